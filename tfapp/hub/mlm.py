"""Masked-LM domain adaptation: continue BERT pretraining on a corpus, export new modules.

``continue_pretraining`` is what ``python -m tfapp.pretrain`` runs:

1. resolve ``--hub`` (a directory written by ``build-bert``, ``convert`` or an earlier
   ``pretrain``, or ``builtin:tiny``) and read its weights into a native ``BertEncoder``
   (``native_encoder_from_hub``) inside the resolved strategy's scope, under its
   precision policy;
2. feed the corpus through tf.data: shuffle, repeat, batch, the module's *own*
   preprocessor (so the ids are exactly those fine-tuning will see), then dynamic
   masking (``tfapp.data.masking``: 15%, 80/10/10, optional whole-word);
3. ``fit`` the encoder + masked-LM head (``tfapp.models.mlm``) for ``steps`` optimizer
   steps with tfapp's AdamW + warmup/decay schedule, logging ``mlm_loss`` and
   ``masked_accuracy`` to TensorBoard every ``log_every`` steps;
4. export the adapted encoder with the *same* vocabulary and preprocessor settings as a
   new module pair (``export_bert_modules``; atomic). The MLM head is dropped, as
   TF-Hub BERT encoders do not carry it.

The learning-rate schedule and optimizer come from ``cfg.optimizer``, the strategy and
precision from ``cfg.runtime``, XLA and steps per call from ``cfg.trainer`` -- the same
config groups ``python -m tfapp.train`` reads.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tfapp.config import ConfigError, ExperimentConfig

__all__ = ["MlmParams", "continue_pretraining"]

log = logging.getLogger("tfapp")


@dataclass(frozen=True)
class MlmParams:
    """What ``python -m tfapp.pretrain`` trains (recorded in the new tfapp_hub.json).

    Attributes:
      steps: optimizer steps in total.
      batch_size: sequences per replica per step.
      seq_length: tokens per sequence (longer texts are truncated); 0 = the module's
        default sequence length.
      mask_rate: share of tokens chosen for prediction (BERT: 0.15).
      whole_word: choose whole words (all their ## pieces) instead of single WordPieces.
      max_predictions: most predicted tokens per sequence; 0 = enough for nearly all.
      log_every: steps per logged point (a Keras epoch).
      seed: seed of shuffling and masking.
    """

    steps: int = 1000
    batch_size: int = 32
    seq_length: int = 0
    mask_rate: float = 0.15
    whole_word: bool = False
    max_predictions: int = 0
    log_every: int = 100
    seed: int = 0


def _hub_dir(handle: str) -> tuple[Path, Path, dict[str, Any]]:
    """(module directory, preprocessor dir, its tfapp_hub.json) for ``--hub``."""
    from tfapp.hub.export import read_metadata
    from tfapp.hub.handles import resolve_hub_handle

    encoder, _ = resolve_hub_handle(handle)
    root = Path(encoder).parent
    if not (root / "tfapp_hub.json").is_file():
        raise ConfigError(f"--hub {handle}: not a tfapp module directory (no tfapp_hub.json "
                          "next to its encoder); give one written by `python -m tfapp.hub "
                          "build-bert`, `python -m tfapp.hub convert` or `python -m "
                          "tfapp.pretrain`")
    meta = read_metadata(root)
    return root, root / meta.get("preprocessor", "preprocessor"), meta


def _dataset(texts: list[str], preprocessor: Path, masker, *, seq_length: int,
             global_batch: int, seed: int):
    """tf.data: texts -> shuffled, repeated global batches -> ids -> masked examples."""
    from tfapp.data.bert_preprocess import make_bert_preprocess_fn

    import tensorflow as tf

    preprocess = make_bert_preprocess_fn(hub_preprocessor=str(preprocessor),
                                         seq_length=seq_length)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices(texts)
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ds = ds.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True).repeat()
        ds = ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)
        ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
        # The step index seeds the masks: new masks every step, same run for the same seed.
        # Each input pipeline gets its own stream.
        ds = ds.enumerate().map(
            lambda step, f: masker(step * ctx.num_input_pipelines + ctx.input_pipeline_id, f),
            num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def continue_pretraining(texts: list[str], hub: str, out_dir: str | os.PathLike,
                         params: MlmParams, cfg: ExperimentConfig, *,
                         logdir: str | os.PathLike | None = None,
                         overwrite: bool = False) -> dict[str, Any]:
    """Masked-LM training of the ``hub`` module on ``texts``; writes ``out_dir`` (the new
    module pair) and returns the steps run and the logged ``mlm_loss``/``masked_accuracy``
    (also recorded in the new tfapp_hub.json)."""
    from tfapp.data.bert_preprocess import _read_bert_vocab
    from tfapp.data.masking import MlmMasker, default_max_predictions
    from tfapp.data.pipeline import distribute
    from tfapp.hub.export import export_bert_modules, float32_policy
    from tfapp.models.bert import BertConfig, BertEncoder
    from tfapp.models.hub_encoder import native_encoder_from_hub
    from tfapp.models.mlm import BertMaskedLM
    from tfapp.runtime import setup
    from tfapp.training.optimizers import build_optimizer

    import tensorflow as tf

    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise ConfigError(f"{out_dir} already exists; choose another --out or pass --overwrite")
    if not texts:
        raise ConfigError("the corpus holds no text; give files with at least one text")
    if isinstance(cfg.optimizer.learning_rate, str):
        raise ConfigError("optimizer.learning_rate=auto is not supported by pretrain; give a "
                          "number, e.g. optimizer.learning_rate=1e-4")
    root, preprocessor, meta = _hub_dir(hub)
    bert_cfg = BertConfig.from_dict(meta["bert_config"])
    seq_length = params.seq_length or int(meta.get("default_seq_length", 128))
    if not 3 <= seq_length <= bert_cfg.max_position_embeddings:
        raise ConfigError(f"--seq-length {seq_length} must be in [3, "
                          f"{bert_cfg.max_position_embeddings}] (the module's positions)")
    max_predictions = params.max_predictions or default_max_predictions(seq_length,
                                                                        params.mask_rate)
    if max_predictions > seq_length:
        raise ConfigError(f"--max-predictions {max_predictions} exceeds --seq-length "
                          f"{seq_length}; lower it")
    vocab, _ = _read_bert_vocab(root / meta.get("vocab_file", "vocab.txt"))
    # Before any TensorFlow op: runtime.cpu_devices must split the CPU first.
    rt = setup(cfg.runtime)
    log.info("pretrain: %s", rt.describe(params.batch_size))
    try:
        masker = MlmMasker(vocab, max_predictions=max_predictions, mask_rate=params.mask_rate,
                           whole_word=params.whole_word, seed=params.seed)
    except ValueError as err:
        raise ConfigError(f"--hub {hub}: {err}") from None

    global_batch = rt.global_batch_size(params.batch_size)
    data = distribute(rt.strategy, _dataset(texts, preprocessor, masker, seq_length=seq_length,
                                            global_batch=global_batch, seed=params.seed))
    steps_per_epoch = max(1, min(params.log_every, params.steps))
    epochs = max(1, -(-params.steps // steps_per_epoch))
    peak = rt.scaled_learning_rate(float(cfg.optimizer.learning_rate),
                                   cfg.optimizer.scale_lr_by_replicas)
    with rt.strategy.scope():
        encoder = native_encoder_from_hub(str(root / meta.get("encoder", "encoder")))
        if encoder is None:
            raise ConfigError(f"--hub {hub}: its encoder cannot be read into tfapp's native "
                              "BERT (not written by tfapp?); convert the checkpoint first")
        model = BertMaskedLM(encoder)
        model.compile(optimizer=build_optimizer(cfg.optimizer, peak=peak,
                                                total_steps=epochs * steps_per_epoch),
                      steps_per_execution=cfg.trainer.steps_per_execution,
                      jit_compile=rt.default_jit_compile(cfg.trainer.jit_compile))
    callbacks = [tf.keras.callbacks.TerminateOnNaN()]
    if logdir and rt.is_chief:
        callbacks.append(tf.keras.callbacks.TensorBoard(str(logdir), update_freq="epoch"))
    history = model.fit(data, epochs=epochs, steps_per_epoch=steps_per_epoch,
                        callbacks=callbacks, verbose=2).history
    if any(not tf.math.is_finite(v) for v in history["mlm_loss"]):
        raise ConfigError("masked-LM loss became non-finite; lower optimizer.learning_rate")

    # Export in float32 from a fresh encoder (the trained one may be mixed precision and
    # hold distributed variables); only the chief writes.
    weights = {name: var.numpy() for name, var in encoder.named_weights().items()}
    summary = {"steps": epochs * steps_per_epoch,
               "history": {k: [round(float(x), 5) for x in v] for k, v in history.items()}}
    if rt.is_chief:
        with float32_policy():
            export_encoder = BertEncoder(bert_cfg).build_weights()
        export_encoder.assign_named_weights(weights)
        export_bert_modules(
            export_encoder, root / meta.get("vocab_file", "vocab.txt"), out_dir,
            lower_case=bool(meta["lower_case"]), default_seq_length=int(
                meta.get("default_seq_length", seq_length)), overwrite=overwrite,
            extra_metadata={"pretrained_from": {"hub": str(hub), "source": meta.get(
                "converted_from") or meta.get("build_params") or meta.get("pretrained_from"),
                "mlm": {**asdict(params), "seq_length": seq_length,
                        "max_predictions": max_predictions, "texts": len(texts),
                        "learning_rate": peak, **summary}}})
    return summary
