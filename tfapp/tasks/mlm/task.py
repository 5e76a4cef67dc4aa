"""Masked-LM domain adaptation as a task (``task: mlm``; ``python -m tfapp.pretrain``).

Continues BERT's masked-LM pretraining of a tfapp Hub module on a corpus, through the
same training loop as every task (params.yaml, status.json, backups and SIGTERM resume,
TensorBoard, W&B), then exports the adapted encoder as a new module pair:

1. ``model.hub_handle`` (a directory written by ``build-bert``, ``convert`` or an earlier
   ``pretrain``, or ``builtin:tiny``) is read into a native ``BertEncoder``;
2. the corpus (``data.train_files``, its ``data.text_column``) goes through tf.data:
   shuffle, repeat, batch, the module's *own* preprocessor (so the ids are exactly those
   fine-tuning will see), then dynamic masking (``tfapp.data.text.masking``: ``mlm.mask_rate``,
   80/10/10, optional whole-word), new masks every step;
3. the loop fits the encoder + masked-LM head (``tfapp.models.mlm``) for
   ``trainer.max_steps`` steps, logging ``mlm_loss`` and ``masked_accuracy`` every
   ``trainer.eval_every_steps``;
4. ``finish`` exports the adapted encoder with the *same* vocabulary and preprocessor
   settings (``export_bert_modules``; atomic) to ``mlm.output`` (default RUN_DIR/export).
   The MLM head is dropped, as TF-Hub BERT encoders do not carry it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError
from tfapp.data.rows.spec import RowSpec
from tfapp.hub.handles import resolve_hub_handle
from tfapp.training.task import Inputs, Task, TaskOutput

log = logging.getLogger("tfapp")

__all__ = ["MaskedLMTask", "hub_module_dir"]


def hub_module_dir(handle: str, what: str = "model.hub_handle"
                   ) -> tuple[Path, Path, dict[str, Any]]:
    """(module directory, its preprocessor, its tfapp_hub.json) of a tfapp module."""
    from tfapp.hub.export import HUB_METADATA_FILE, read_metadata

    encoder, _ = resolve_hub_handle(handle)
    root = Path(encoder).parent
    if not (root / HUB_METADATA_FILE).is_file():
        raise ConfigError(f"{what} {handle}: not a tfapp module directory (no "
                          f"{HUB_METADATA_FILE} next to its encoder); give one written by "
                          "`python -m tfapp.hub build-bert`, `python -m tfapp.hub convert` or "
                          "`python -m tfapp.pretrain`")
    meta = read_metadata(root)
    return root, root / meta.get("preprocessor", "preprocessor"), meta


@dataclass
class MlmInputs(Inputs):
    """The masked-LM inputs and what the model and export need.

    Attributes:
      module: the module directory being adapted.
      meta: its tfapp_hub.json.
      seq_length: tokens per sequence.
      max_predictions: predicted tokens per sequence.
      texts: the corpus's texts (num_train_examples counts sequences: packed, fewer).
    """

    module: Path = field(default_factory=Path)
    meta: dict = field(default_factory=dict)
    seq_length: int = 0
    max_predictions: int = 0
    texts: int = 0


class MaskedLMTask(Task):
    """Masked-LM pretraining of a tfapp BERT module on unlabelled text."""

    default_monitor = "val_mlm_loss"  # no validation split: the training mlm_loss

    @classmethod
    def input_files(cls, cfg) -> dict[str, str]:
        from tfapp.data.examples.mlm import demo_files

        return {"train": demo_files(cfg.data)[0]}

    @classmethod
    def row_spec(cls, cfg):
        return RowSpec.from_config("texts", cfg.data,
                                   column_hint="set data.text_column (pretrain --text-column)")

    @property
    def output(self) -> Path:
        return Path(self.cfg.mlm.output) if self.cfg.mlm.output else self.layout.export

    def build_inputs(self) -> MlmInputs:
        from tfapp.data.examples.mlm import corpus, mlm_examples
        from tfapp.data.input import reader
        from tfapp.data.text.bert_preprocess import make_bert_preprocess_fn, read_bert_vocab
        from tfapp.data.text.masking import MlmMasker, default_max_predictions
        from tfapp.hub.export import check_out_dir
        from tfapp.models.bert import BertConfig

        import tensorflow as tf

        cfg, d, m = self.cfg, self.cfg.data, self.cfg.mlm
        if self.cfg.mlm.output and self.output.exists() and not m.overwrite:
            raise ConfigError(f"mlm.output: {self.output} already exists; choose another "
                              "(--out) or set mlm.overwrite=true (--overwrite)")
        if self.cfg.mlm.output:  # a folder of other files: refused now, not after training
            check_out_dir(self.output, m.overwrite)
        root, preprocessor, meta = hub_module_dir(cfg.model.hub_handle)
        if meta.get("tokenizer") == "sentencepiece":  # masking reads a WordPiece vocab.txt
            raise ConfigError(f"model.hub_handle: {cfg.model.hub_handle} tokenizes with "
                              "SentencePiece (XLM-RoBERTa); pretrain (masked LM) takes WordPiece "
                              "modules only (BERT, DistilBERT, ELECTRA, build-bert's)")
        bert_cfg = BertConfig.from_dict(meta["bert_config"])
        seq_length = d.seq_length
        if not 3 <= seq_length <= bert_cfg.max_position_embeddings:
            raise ConfigError(f"data.seq_length {seq_length} must be in [3, "
                              f"{bert_cfg.max_position_embeddings}] (the module's positions)")
        max_predictions = m.max_predictions or default_max_predictions(seq_length, m.mask_rate)
        if max_predictions > seq_length:
            raise ConfigError(f"mlm.max_predictions {max_predictions} exceeds data.seq_length "
                              f"{seq_length}; lower it")
        # "demo": the shipped unlabelled reviews (docs/hub.md's masked-LM corpus).
        # d holds nothing out: its validation and test splits are 0 (MlmDataConfig)
        texts = corpus(d, self.row_spec(cfg), cfg.runtime.seed)
        vocab, _ = read_bert_vocab(root / meta.get("vocab_file", "vocab.txt"))
        seed = cfg.runtime.seed
        try:
            masker = MlmMasker(vocab, max_predictions=max_predictions, mask_rate=m.mask_rate,
                               whole_word=m.whole_word, seed=seed)
        except ValueError as err:
            raise ConfigError(f"model.hub_handle {cfg.model.hub_handle}: {err}") from None
        preprocess = make_bert_preprocess_fn(hub_preprocessor=str(preprocessor),
                                             seq_length=seq_length)
        examples = mlm_examples(texts, preprocess, seq_length, pack=m.pack, vocab=vocab)
        log.info("masked LM: %d texts -> %d %s of %d tokens", texts.rows, examples.source.size,
                 "packed sequences" if m.pack else "texts", seq_length)

        def masked(ds: tf.data.Dataset, ctx: tf.distribute.InputContext, plan) -> Any:
            # The batch index seeds the masks: new masks every step, the same run for the
            # same seed, and a resumed run draws the masks the first run would have. Each
            # input pipeline gets its own stream.
            local = ctx.get_per_replica_batch_size(plan.global_batch)
            ds = ds.enumerate(start=plan.first_batch(local)).map(
                lambda step, f: masker(step * ctx.num_input_pipelines + ctx.input_pipeline_id,
                                       f),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            return ds.prefetch(tf.data.AUTOTUNE) if d.prefetch else ds

        inputs = reader.training_inputs(lambda split: examples, texts, None, d,
                                        runtime=self.runtime, seed=seed,
                                        resumed_batches=self.ctx.resumed_batches(),
                                        after=masked)
        return MlmInputs(**inputs.fields(), module=root, meta=meta, seq_length=seq_length,
                         max_predictions=max_predictions, texts=texts.rows)

    def build_model(self, inputs: MlmInputs):
        from tfapp.models.bert import dummy_inputs
        from tfapp.models.hub_encoder import native_encoder_from_hub
        from tfapp.models.mlm import BertMaskedLM

        import tensorflow as tf

        encoder = native_encoder_from_hub(str(inputs.module / inputs.meta.get("encoder",
                                                                             "encoder")))
        if encoder is None:
            raise ConfigError(f"model.hub_handle {self.cfg.model.hub_handle}: its encoder "
                              "cannot be read into tfapp's native BERT (not written by "
                              "tfapp?); convert the checkpoint first")
        model = BertMaskedLM(encoder)
        # Built before fit, as BackupAndRestore needs the variables to restore into.
        positions = tf.zeros([1, inputs.max_predictions], tf.int32)
        model({**dummy_inputs(1, inputs.seq_length), "masked_lm_positions": positions})
        return model

    def finish(self, model, inputs: MlmInputs, history: dict) -> TaskOutput:
        """Export the adapted encoder (float32, from a fresh single-device copy: the trained
        one may be mixed precision and hold distributed variables); the chief only."""
        from tfapp.hub.export import export_bert_modules, float32_policy
        from tfapp.models.bert import BertConfig, BertEncoder

        out = TaskOutput(metrics={})
        if not (self.cfg.trainer.export and self.ctx.is_chief):
            return out
        meta, m = inputs.meta, self.cfg.mlm
        weights = {name: var.numpy() for name, var in model.encoder.named_weights().items()}
        with float32_policy():
            encoder = BertEncoder(BertConfig.from_dict(meta["bert_config"])).build_weights()
        encoder.assign_named_weights(weights)
        steps = self.cfg.trainer.max_steps
        params = {**asdict(m), "steps": steps, "batch_size": self.cfg.data.batch_size,
                  "seq_length": inputs.seq_length, "max_predictions": inputs.max_predictions,
                  "texts": inputs.texts,
                  "sequences": inputs.num_train_examples, "seed": self.cfg.runtime.seed,
                  "log_every": self.cfg.trainer.eval_every_steps,
                  "learning_rate": self.cfg.optimizer.learning_rate,
                  "history": {k: [round(float(x), 5) for x in v] for k, v in history.items()}}
        params.pop("output"), params.pop("overwrite")
        out.paths["exported"] = export_bert_modules(
            encoder, inputs.module / meta.get("vocab_file", "vocab.txt"), self.output,
            lower_case=bool(meta["lower_case"]),
            default_seq_length=int(meta.get("default_seq_length", inputs.seq_length)),
            overwrite=True,
            extra_metadata={"pretrained_from": {
                "hub": self.cfg.model.hub_handle,
                "source": meta.get("converted_from") or meta.get("build_params")
                or meta.get("pretrained_from"),
                "mlm": params}})
        h = history
        out.lines = [f"masked-LM: {steps} steps on {inputs.texts} texts "
                     f"({inputs.num_train_examples} sequences)" + (
            f"; mlm_loss {h['mlm_loss'][0]:.3f} -> {h['mlm_loss'][-1]:.3f}, masked_accuracy "
            f"{h['masked_accuracy'][0]:.3f} -> {h['masked_accuracy'][-1]:.3f}"
            if h.get("mlm_loss") else " (resumed after its last step: exported only)"),
            f"use it with: model.hub_handle={self.output}"]
        return out
