"""Export a fine-tuned BERT classifier or NER tagger as a Hugging Face checkpoint.

    tfapp export-hf runs/classifier --out hf_model --license apache-2.0 --language en
    tfapp export-hf runs/ner --out hf_ner --push my-org/my-tagger     # needs HF_TOKEN

OUT gets what ``save_pretrained`` writes, so transformers' ``AutoModelForSequenceClassification``
/ ``AutoModelForTokenClassification`` and ``AutoTokenizer`` load it (no TensorFlow needed):

* ``config.json``: ``BertForSequenceClassification`` (classifier) or
  ``BertForTokenClassification`` (ner), the encoder's sizes, ``id2label``/``label2id``;
* ``model.safetensors``: the weights of the run's export (what ``tfapp predict`` runs):
  the encoder under ``bert.``, the output layer as ``classifier``;
* ``vocab.txt``, ``tokenizer_config.json`` (``do_lower_case``, ``model_max_length`` =
  ``data.seq_length``), ``special_tokens_map.json``;
* ``README.md``: a model card with the Hub's metadata header (license, language, tags,
  datasets, the run's validation/test metrics as ``model-index``).

What transformers' BERT heads cannot express is refused, in one line: cnn/rnn models,
``model.pooling=mean_max`` (HF classifies from the pooler: train with
``model.pooling=pooled``, the default), the generator and mlm tasks, and encoders that are
not tfapp's own BERT modules (``builtin:``, ``hf:``, ``hub build-bert``/``convert``).
A binary classifier (one sigmoid unit in tfapp) becomes two softmax logits ``[0, z]``,
which give exactly tfapp's two probabilities; a multi-label one keeps a sigmoid per label
(``problem_type: multi_label_classification``); a sentence-pair one takes the second texts
as the tokenizer's second argument (token type 1, as tfapp packs them).
"""
# The encoder, tokenizer, card and checks are the same for every task; what differs (the
# transformers class, labels, head, card notes, refusals) is the run's export format's
# hf_form/hf_refusal (tfapp.serving.ExportFormat, in tfapp/tasks/<name>/serving.py),
# found by the run's task: this module names none.

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tfapp import cli
from tfapp.atomic import atomic_directory
from tfapp.config import ConfigError, ExperimentConfig, load_config
from tfapp.hub.handles import HUB_METADATA_FILE, resolve_hub_handle
from tfapp.hub.hf_checkpoint import (
    hf_config,
    hf_encoder_weights,
    hf_head_weights,
    save_weights,
    write_tokenizer,
)
from tfapp.hub.hf_models import HF_PREFIX
from tfapp.model_card import CARD_FILE
from tfapp.models.bert_config import BertConfig
from tfapp.run_layout import RunLayout
from tfapp.serving import ExportFormat, HfForm, load_export, model_variables
from tfapp.tasks import export_formats

import click

__all__ = ["CardOptions", "command", "export_run_to_hf", "main", "push_to_hub"]

HEAD_LAYER = "logits"  # the output Dense of every exportable task's model
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# report key -> (model-index metric type, display name)
METRICS = {"accuracy": ("accuracy", "accuracy"), "macro_f1": ("f1", "macro F1"),
           "auc": ("roc_auc", "ROC AUC"), "f1": ("f1", "entity F1"),
           "precision": ("precision", "entity precision"), "recall": ("recall", "entity recall"),
           "token_accuracy": ("accuracy", "token accuracy")}


@dataclass
class CardOptions:
    """The model card's metadata header: what the run cannot know."""

    license: str = "other"
    languages: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)  # Hub dataset ids
    tags: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------- the run
def _hf_formats() -> list[ExportFormat]:
    """The export formats that have a Hugging Face form, in ``export_formats`` order."""
    return [fmt for fmt in export_formats() if fmt.hf_architecture]


def _read_run(run_dir: Path) -> tuple[ExperimentConfig, ExportFormat]:
    """The run's config and export format, refusing what transformers' BERT task models
    cannot express."""
    layout = RunLayout(run_dir)
    tasks = " or ".join(fmt.task for fmt in _hf_formats())
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such directory; give a run directory "
                          f"(output_dir/name) of a {tasks} run")
    if not layout.params.is_file():
        raise ConfigError(f"{run_dir} has no params.yaml: not a tfapp run directory; give "
                          f"output_dir/name of a finished {tasks} run")
    cfg = load_config(layout.params)
    fmt = next((f for f in _hf_formats() if f.task == cfg.task), None)
    if fmt is None:
        forms = " and ".join(f"{f.task} ({f.hf_architecture})" for f in _hf_formats())
        raise ConfigError(f"{run_dir}: a {cfg.task} run has no Hugging Face form here; "
                          f"export-hf writes {forms} runs")
    if cfg.model.kind != "bert":
        raise ConfigError(f"{run_dir}: model.kind={cfg.model.kind} is not a BERT model, which is "
                          "all transformers' BERT classes hold; train with model.kind=bert to "
                          "export it")
    refusal = fmt.hf_refusal(cfg)
    if refusal:
        raise ConfigError(f"{run_dir}: {refusal}")
    if not (layout.export / "saved_model.pb").is_file():
        raise ConfigError(f"{run_dir} has no export/saved_model.pb; train it with "
                          "trainer.export=true (the default), or export it again")
    return cfg, fmt


def _encoder_config(handle: str, run_dir: Path) -> BertConfig:
    """The BertConfig of the run's encoder, from its tfapp module's tfapp_hub.json."""
    not_ours = (f"{run_dir}: its encoder '{handle}' is not a tfapp BERT module (builtin:, "
                "hf:ORG/NAME, or a directory from `tfapp hub build-bert`/`hub convert`), so its "
                "weight names have no known Hugging Face mapping")
    if "://" in handle:
        raise ConfigError(not_ours)
    encoder, _ = resolve_hub_handle(handle)
    meta_dir = Path(encoder).parent
    if not (meta_dir / HUB_METADATA_FILE).is_file():
        raise ConfigError(not_ours)
    try:
        meta = json.loads((meta_dir / HUB_METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{meta_dir / HUB_METADATA_FILE} is unreadable ({err}); "
                          "rebuild the encoder module") from None
    if meta.get("kind", "bert") != "bert" or "bert_config" not in meta:
        raise ConfigError(not_ours)
    return BertConfig.from_dict(meta["bert_config"])


def _split_weights(module: Any, run_dir: Path) -> tuple[dict, Any, Any]:
    """(encoder weights by stable name, head kernel, head bias) of the loaded export."""
    from tfapp.models.bert import hf_weight_name, stable_weight_name

    encoder, head, others = {}, {}, []
    for var in model_variables(module):
        name = var.name.split(":")[0]
        if name.split("/")[0] == HEAD_LAYER:
            head[name.split("/")[-1]] = var.numpy()
            continue
        stable = stable_weight_name(var.name)
        try:
            hf_weight_name(stable)
        except ValueError:
            others.append(name)
            continue
        encoder[stable] = var.numpy()
    if others or set(head) != {"kernel", "bias"}:
        raise ConfigError(f"{run_dir}: the model's head has weights a transformers BERT head "
                          f"(dropout, then one dense layer) cannot hold: "
                          f"{', '.join(others[:3]) or 'no output layer ' + HEAD_LAYER}")
    return encoder, head["kernel"], head["bias"]


def _preprocessor_files(module: Any, run_dir: Path) -> tuple[Path, bool]:
    """(vocab.txt, lower-case?) of the preprocessor the export tokenises with."""
    pre = getattr(module, "preprocessor", None)
    asset = getattr(pre, "vocab_file", None)
    lower = getattr(pre, "do_lower_case", None)
    if asset is None or lower is None:
        raise ConfigError(f"{run_dir}: the export's preprocessor has no vocab_file/do_lower_case "
                          "(not a BERT WordPiece preprocessor), so no tokenizer can be written")
    lower = lower() if callable(lower) else lower  # a variable (tfapp's) or a function
    return Path(asset.asset_path.numpy().decode()), bool(lower.numpy())


# ------------------------------------------------------------------------- the card
def _metrics(layout: RunLayout) -> dict[str, dict[str, float]]:
    out = {}
    for split, path in (("validation", layout.validation_report), ("test", layout.test_report)):
        if path.is_file():
            report = json.loads(path.read_text(encoding="utf-8"))
            out[split] = {k: float(v) for k, v in report.items()
                          if k in METRICS and isinstance(v, int | float)}
    return out


def _data_name(cfg: ExperimentConfig, form: HfForm) -> str:
    files = cfg.data.train_files
    if files == "demo":
        return form.demo_data
    return ", ".join(Path(f.strip()).name for f in str(files).split(",") if f.strip())


def model_card(cfg: ExperimentConfig, form: HfForm, *, metrics: dict, handle: str,
               options: CardOptions, seq_length: int) -> str:
    """README.md: the Hub's metadata header (huggingface_hub's ModelCardData) and a body."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    pipeline, labels, auto = form.pipeline_tag, form.labels, form.auto_class
    name = cfg.name
    dataset = options.datasets[0] if options.datasets else ""
    results = [EvalResult(task_type=pipeline, dataset_type=dataset or "local",
                          dataset_name=dataset or _data_name(cfg, form), dataset_split=split,
                          metric_type=METRICS[key][0], metric_name=f"{split} {METRICS[key][1]}",
                          metric_value=round(value, 4))
               for split, values in metrics.items() for key, value in sorted(values.items())]
    base = handle[len(HF_PREFIX):].split("@")[0] if handle.startswith(HF_PREFIX) else None
    data = ModelCardData(
        license=options.license, language=options.languages or None,
        library_name="transformers", pipeline_tag=pipeline,
        tags=["tfapp", "bert", pipeline, *options.tags], datasets=options.datasets or None,
        base_model=base, model_name=name, eval_results=results or None)
    texts = '["a text"], ["its second text"]' if form.text_pair else '["a text"]'
    lines = [f"# {name}", "",
             f"{form.kind} ({len(labels)} labels) fine-tuned with tfapp (`{cfg.task}` task, run "
             f"`{name}`) from the encoder `{handle}`, exported by `tfapp export-hf`.", "",
             "Labels: " + ", ".join(f"`{x}`" for x in labels), ""]
    if metrics:
        lines += ["| split | metric | value |", "|---|---|---|"]
        lines += [f"| {split} | {METRICS[k][1]} | {v:.4f} |"
                  for split, values in metrics.items() for k, v in sorted(values.items())]
        lines.append("")
    lines += ["## How to use it", "", "```python",
              f"from transformers import AutoTokenizer, {auto}", "",
              'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_REPO_ID")',
              f'model = {auto}.from_pretrained("PATH_OR_REPO_ID")',
              f'inputs = tokenizer({texts}, truncation=True, padding=True, '
              'return_tensors="pt")',
              "logits = model(**inputs).logits", "```", "",
              "## Notes", "",
              f"* tfapp read at most {seq_length} word pieces per text (the tokenizer's "
              "`model_max_length`): pass `truncation=True` to read what it read.",
              *(f"* {note}" for note in form.notes)]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n"))


# ------------------------------------------------------------------------- export
def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not overwrite:
        raise ConfigError(f"--out {out} already exists; choose another --out or pass "
                          "--overwrite")
    if out.exists() and not (out / "config.json").is_file() \
            and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--overwrite: {out} is not an exported checkpoint (no config.json) "
                          "and is not empty; nothing was replaced; choose another --out")


def export_run_to_hf(run_dir: str | Path, out: str | Path, *,
                     card: CardOptions | None = None, overwrite: bool = False) -> Path:
    """Write the run's export as a Hugging Face checkpoint directory ``out`` (atomically:
    nothing is left behind on failure). See the module docstring."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the export holds)

    run_dir, out = Path(run_dir), Path(out)
    cfg, fmt = _read_run(run_dir)
    _check_out(out, overwrite)
    _, module, metadata = load_export(run_dir, fmt)
    handle = str(metadata.get("hub_handle") or cfg.model.hub_handle)
    bert_cfg = _encoder_config(handle, run_dir)
    encoder, kernel, bias = _split_weights(module, run_dir)
    vocab_file, lower_case = _preprocessor_files(module, run_dir)
    vocab = vocab_file.read_text(encoding="utf-8").splitlines()
    if "[PAD]" not in vocab or len(vocab) > bert_cfg.vocab_size:
        raise ConfigError(f"{run_dir}: the export's vocab ({len(vocab)} tokens) does not fit "
                          f"its encoder ({bert_cfg.vocab_size} embeddings) or lacks [PAD]")
    seq_length = int(metadata.get("seq_length") or cfg.data.seq_length)
    form = fmt.hf_form(module, metadata, kernel, bias, run_dir)
    labels = form.labels
    if form.kernel.shape != (bert_cfg.hidden_size, len(labels)):
        raise ConfigError(f"{run_dir}: the output layer has shape {tuple(form.kernel.shape)}, "
                          f"not (hidden {bert_cfg.hidden_size}, {len(labels)} labels): its head "
                          "is not one dense layer on the encoder's output")
    weights = {**hf_encoder_weights(encoder, bert_cfg, pooler=form.pooler, source=str(run_dir)),
               **hf_head_weights(form.kernel, form.bias)}
    config = hf_config(bert_cfg, architecture=fmt.hf_architecture, labels=labels,
                       pad_token_id=vocab.index("[PAD]"), classifier_dropout=cfg.model.dropout,
                       problem_type=form.problem_type)
    text = model_card(cfg, form, metrics=_metrics(RunLayout(run_dir)), handle=handle,
                      options=card or CardOptions(), seq_length=seq_length)
    with atomic_directory(out, overwrite=overwrite) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_weights(weights, tmp / "model.safetensors")
        # safetensors writes 0600; give it the mode our other files got (the umask's).
        (tmp / "model.safetensors").chmod((tmp / "config.json").stat().st_mode & 0o777)
        write_tokenizer(tmp, vocab_file, lower_case=lower_case, max_length=seq_length)
        (tmp / CARD_FILE).write_text(text, encoding="utf-8")
    return out


# ------------------------------------------------------------------------- upload
def hub_token() -> str:
    """The Hugging Face token (HF_TOKEN, or the one `hf auth login` saved)."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise ConfigError("--push needs a Hugging Face write token: set HF_TOKEN (from "
                          "https://huggingface.co/settings/tokens) or run `hf auth login`")
    return token


def push_to_hub(out: Path, repo_id: str, *, token: str, private: bool = False) -> str:
    """Create ``repo_id`` (if new) and upload ``out`` to it; the commit's URL."""
    from huggingface_hub import HfApi

    try:
        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, exist_ok=True)
        info = api.upload_folder(repo_id=repo_id, folder_path=str(out),
                                 commit_message="Upload model exported by tfapp export-hf")
    except Exception as err:  # HTTP errors, refused connections, ...: all one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ConfigError(f"--push {repo_id}: the upload failed ({first}); the checkpoint is "
                          f"complete in {out}: retry with `hf upload {repo_id} {out}`") from None
    return str(getattr(info, "commit_url", "") or f"https://huggingface.co/{repo_id}")


# ------------------------------------------------------------------------- command line
@cli.command("export-hf", __doc__)
@click.argument("run_dir", metavar="RUN_DIR")
@click.option("--out", required=True, help="Folder to write the checkpoint into.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it holds an earlier export.")
@click.option("--license", "license_", default="other", show_default=True,
              help="Card header: license id (e.g. apache-2.0, mit).")
@click.option("--language", multiple=True, help="Card header: a language code (repeat).")
@click.option("--dataset", multiple=True,
              help="Card header: a Hub dataset id the model was trained on (repeat).")
@click.option("--tag", multiple=True, help="Card header: an extra tag (repeat).")
@click.option("--push", metavar="REPO_ID", default="",
              help="Upload to this Hugging Face model repo (token from HF_TOKEN).")
@click.option("--private", is_flag=True, help="With --push: a private repo.")
def command(args: SimpleNamespace) -> int:
    token = ""
    if args.push:  # before the export's work, so a missing token costs nothing
        if not _REPO_ID.match(args.push):
            raise ConfigError(f"--push {args.push}: not a Hugging Face repo id; write "
                              "ORG/NAME (or USER/NAME)")
        token = hub_token()
    out = export_run_to_hf(args.run_dir, args.out, overwrite=args.overwrite,
                           card=CardOptions(license=args.license_, languages=list(args.language),
                                            datasets=list(args.dataset), tags=list(args.tag)))
    print(f"wrote {out} (config.json, model.safetensors, tokenizer files, {CARD_FILE})")
    if args.push:
        print(f"uploaded to {push_to_hub(out, args.push, token=token, private=args.private)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.export_hf")


if __name__ == "__main__":
    sys.exit(main())
