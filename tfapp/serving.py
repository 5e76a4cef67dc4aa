"""Exported models: the one export interface, the one finder and the one loader.

Every task that exports a model describes its export with an ``ExportFormat``: the
``marker`` (the metadata file next to ``saved_model.pb`` that says which task wrote it),
``write`` (the SavedModel, the marker and the model card, atomically), ``load`` (an
``ExportedModel``: what predict, evaluate and generate call) and ``describe`` (the
export's facts for its model card); a format whose model is a transformers BERT task
model also says how ``tfapp export-hf`` writes it (``hf_architecture``, ``hf_refusal``,
``hf_form``: an ``HfForm``). The formats live with their tasks
(``tfapp/tasks/<name>/serving.py``) and ``tfapp.tasks.export_formats()`` lists them: this
module sits below the tasks and never names one.

``find_export`` turns ``--model`` (a run directory or its export/) into the SavedModel
directory and its format, by the marker found there; ``load_export`` loads it: a damaged
export (truncated, files deleted, its metadata unreadable) is one line.
"""

from __future__ import annotations

import contextlib
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp import compat
from tfapp.atomic import save_model
from tfapp.config import ConfigError, ExperimentConfig
from tfapp.run_layout import RunLayout

BATCH = 256

#: what a command asks an export for (``ExportFormat.serves``)
PREDICT, EVALUATE, GENERATE = "predict", "evaluate", "generate"


@dataclass
class Evaluation:
    """What ``ExportedModel.evaluate`` found: the scores (JSON-ready), the rows it left
    out (a ``tfapp.data.rows.bad_rows.BadRowReport``) and how the scores read as a table."""

    result: dict
    report: Any
    render: Callable[[dict], str]


@dataclass
class HfForm:
    """One run's export as a transformers BERT task model (``tfapp export-hf``): what
    differs from task to task, the encoder and tokenizer being the same for all.

    Attributes:
      auto_class: the transformers Auto class that loads it (the card's snippet).
      pipeline_tag: the Hub's pipeline tag (card header, model-index task type, tags).
      kind: the card's first words ("Text classifier").
      labels: the output labels, in the order of the head's columns (id2label).
      kernel: the head's kernel ``[hidden, labels]``, as transformers' ``classifier``
        holds it (a binary classifier's one sigmoid unit already written as ``[0, z]``).
      bias: the head's bias ``[labels]``.
      pooler: whether the head reads the pooler (so the checkpoint holds it).
      problem_type: config.json's ``problem_type`` (None: not written).
      notes: the card's task-specific notes (Markdown list items, without the ``*``).
      demo_data: the card's dataset name for a run trained on ``data.train_files=demo``.
      text_pair: the model reads sentence pairs (the tokenizer takes the second texts).
    """

    auto_class: str
    pipeline_tag: str
    kind: str
    labels: list[str]
    kernel: Any
    bias: Any
    pooler: bool
    problem_type: str | None = None
    notes: list[str] = field(default_factory=list)
    demo_data: str = "tfapp demo data"
    text_pair: bool = False


class ExportedModel:
    """A loaded export: its directory, the ``tf.saved_model.load`` module and its marker's
    JSON. A format's model overrides the commands its format ``serves``; the lookup never
    hands a command a model that does not serve it, so these defaults only guard."""

    #: the model reads sentence pairs (a second text per row)
    text_pair: bool = False
    #: the keys of ``predict_rows``'s dicts (a kept column may not take one)
    output_columns: tuple[str, ...] = ()
    #: the keys of the rows ``evaluate`` hands ``rows`` (a kept column may not take one)
    evaluation_columns: tuple[str, ...] = ()

    def __init__(self, path: Path, module: Any, metadata: dict):
        self.path, self.module, self.metadata = path, module, metadata

    def predict_rows(self, texts: Any, pairs: Any | None = None) -> list[dict]:
        """One dict per text of the batch ``texts`` (a string tensor ``[n]`` or a list;
        ``pairs``: their second texts), the prediction alone, as ``predict --output``
        writes it next to the kept columns."""
        raise ConfigError(f"{self.path}: this export does not predict")

    def predict_lines(self, texts: list[str], pairs: list[str] | None, *,
                      as_json: bool) -> list[str]:
        """What ``predict`` prints for ``texts`` (``pairs``: their second texts, if any)."""
        raise ConfigError(f"{self.path}: this export does not predict")

    def evaluate(self, files: str, params: Path, flags: dict[str, Any],
                 rows: Callable[[list[dict]], None] | None = None,
                 keep: Sequence[str] = ()) -> Evaluation:
        """Scores on the labelled ``files``, read as the run's ``params`` (a params.yaml,
        perhaps missing) say, with the data ``flags`` evaluate was given (key -> value).
        ``rows``: called with each batch's per-row predictions and gold labels, in input
        order, as they are scored (``evaluate --output``), each led by the input columns
        ``keep`` names (``--keep``; a format whose rows are not input rows refuses it)."""
        raise ConfigError(f"{self.path}: this export cannot be evaluated")

    @staticmethod
    def refuse_keep(keep: Sequence[str], rows: str) -> None:
        """``evaluate``'s refusal of ``--keep`` by a format whose evaluated ``rows`` (what
        they are, for the message) are not the input's rows, so have no columns to keep."""
        if keep:
            raise ConfigError(f"--keep {','.join(keep)}: {rows}, not the input's rows with "
                              "their columns; leave --keep out")


class ExportFormat(ABC):
    """One task's export: how it is written, found, loaded and described.

    Attributes:
      task: the task's name, as messages say it ("no exported classifier there").
      marker: the metadata file written next to ``saved_model.pb``; it says the task.
      train_hint: how to make one, for messages ("train with task=ner and ...").
      serves: the commands it answers (``PREDICT``, ``EVALUATE``, ``GENERATE``).
      hf_architecture: the transformers class ``tfapp export-hf`` writes it as
        ("BertForSequenceClassification"); empty: it has no Hugging Face form.
      text_ops: its graph tokenizes with TensorFlow Text ops, registered before it loads.
    """

    task: str
    marker: str
    train_hint: str
    serves: frozenset[str]
    hf_architecture: str = ""
    text_ops: bool = False

    def write(self, module: Any, export_dir: str | os.PathLike, *, signatures: dict,
              metadata: dict, files: dict[str, str] | None = None) -> Path:
        """The SavedModel, its marker (``metadata`` as JSON) and other text ``files`` (the
        model card) as one atomic directory write; replaces an old export."""
        return save_model(module, export_dir, signatures=signatures, metadata=metadata,
                          metadata_file=self.marker, files=files)

    @abstractmethod
    def load(self, model: str | os.PathLike) -> ExportedModel:
        """The export at ``--model`` loaded (``load_export``, then the task's own reading)."""

    @abstractmethod
    def describe(self, metadata: dict) -> dict[str, str]:
        """Facts of an export from its marker's JSON (name -> Markdown), for model cards."""

    def hf_refusal(self, cfg: ExperimentConfig) -> str:
        """Why the run of ``cfg`` has no ``hf_architecture`` form although its task has
        one (what the transformers head cannot express, and how to train one that it
        can), as the rest of a one-line error; empty when it can be written."""
        return ""

    def hf_form(self, module: Any, metadata: dict, kernel: Any, bias: Any,
                run_dir: Path) -> HfForm:
        """The run's export (``module``: loaded, ``metadata``: its marker's JSON; ``kernel``
        and ``bias``: its output layer) as ``hf_architecture``. Only formats with an
        ``hf_architecture`` override it; ``tfapp export-hf`` asks no other."""
        raise ConfigError(f"{run_dir}: a {self.task} run has no Hugging Face form here")


def base_encoder_fact(metadata: dict) -> dict[str, str]:
    """The model card's "base encoder" line of a BERT-based export (its Hub handle and
    preprocessor, as the export's metadata records them); empty without a handle."""
    if not metadata.get("hub_handle"):
        return {}
    pre = metadata.get("preprocessor")
    return {"base encoder": f"`{metadata['hub_handle']}`"
                            + (f" (preprocessor `{pre}`)" if pre else "")}


@contextlib.contextmanager
def first_calls(texts: int) -> Iterator[None]:
    """The export's functions first called inside run without Grappler's graph rewrites
    when ``texts`` fit in one call (``BATCH``), as ``predict``'s own texts mostly do.
    Grappler rewrites a function once, at its first call, for every call after it: on a
    2-core CPU it cost a MiniLM classifier 0.6-1.0 s of CPU (half its first call, and as
    much again in memory as 15 MB), and the 512 texts scored after it took as long with
    the rewrites as without (median of 3 each). A job of one call never gets it back.
    Probabilities differ in the last bits of float32 (1e-7, from fused kernels)."""
    if texts > BATCH:
        yield
        return
    tf = compat.import_tensorflow_for_serving()
    before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer",
                                                                 False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})


def model_variables(module: Any) -> list:
    """The model's weights in a loaded BERT task export (``tf.saved_model.load``):
    ``model_variables`` (``tfapp.models.serving_module``), or, in an older export that
    tracks the Keras model itself, that model's ``variables``."""
    if hasattr(module, "model_variables"):
        return list(module.model_variables)
    return list(module.model.variables)


def find_export(model: str | os.PathLike, formats: Sequence[ExportFormat],
                command: str | None = None) -> tuple[Path, ExportFormat]:
    """(SavedModel directory, its format) of ``--model``: the directory itself or
    RUN_DIR/export, its format the one whose marker is there. ``formats`` are those
    ``command`` may take (all of them when None); a one-line ConfigError when there is no
    export or it is of another format, named after the first of ``formats`` that serves
    ``command`` (the order of ``tfapp.tasks.export_formats``)."""
    usable = [f for f in formats if command is None or command in f.serves]
    if not usable:
        raise ConfigError(f"--model {model}: no kind of export serves '{command}'")
    first, path = usable[0], Path(model)
    if not path.exists():
        raise ConfigError(f"--model {model}: no such directory; give a {first.task} run "
                          "directory (output_dir/name) or its export/ directory")
    for candidate in (path, RunLayout(path).export):
        if (candidate / "saved_model.pb").is_file():
            for fmt in usable:
                if (candidate / fmt.marker).is_file():
                    return candidate, fmt
            raise ConfigError(f"--model {model}: '{candidate}' is a SavedModel but not a "
                              f"tfapp {first.task} export (no {first.marker}); "
                              f"{first.train_hint}")
    raise ConfigError(f"--model {model}: no exported {first.task} there (expected "
                      f"{RunLayout(path).export / 'saved_model.pb'}); {first.train_hint}")


def _damaged(model: str | os.PathLike, export: Path, fmt: ExportFormat,
             what: str) -> ConfigError:
    return ConfigError(f"--model {model}: the {fmt.task} export {export} is damaged ({what}); "
                       f"export it again ({fmt.train_hint}), or copy the whole export/ "
                       "folder again if it was copied")


def load_export(model: str | os.PathLike, fmt: ExportFormat) -> tuple[Path, Any, dict]:
    """(export directory, ``tf.saved_model.load`` of it, its marker's JSON) of a ``fmt``
    export at ``--model``; one ConfigError naming the export when it cannot be loaded.
    TensorFlow is imported for serving (``compat.import_tensorflow_for_serving``) when
    nothing imported it before."""
    tf = compat.import_tensorflow_for_serving()
    export, _ = find_export(model, [fmt])
    marker = export / fmt.marker
    try:
        metadata = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _damaged(model, export, fmt, f"{marker.name} is unreadable: "
                       f"{getattr(err, 'msg', None) or err}") from None
    if not isinstance(metadata, dict):
        raise _damaged(model, export, fmt, f"{marker.name} holds no JSON object")
    # Named here rather than left to TensorFlow, whose errors for these say nothing of the
    # export ("Read less bytes than requested", "not an sstable", a device hint).
    variables = export / "variables"
    if not (variables / "variables.index").is_file():
        raise _damaged(model, export, fmt, "variables/variables.index is missing")
    if not list(variables.glob("variables.data-*")):
        raise _damaged(model, export, fmt, "variables/variables.data-* is missing")
    if (export / "saved_model.pb").stat().st_size == 0:
        raise _damaged(model, export, fmt, "saved_model.pb is empty")
    try:
        if (export / "fingerprint.pb").is_file():  # else TF logs a traceback and loads on
            tf.saved_model.experimental.read_fingerprint(str(export))
        if fmt.text_ops:
            compat.register_text_ops(export)
        module = tf.saved_model.load(str(export))
    except Exception as err:  # noqa: BLE001  TensorFlow raises many kinds for a bad file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise _damaged(model, export, fmt, f"{type(err).__name__}: {first}") from None
    return export, module, metadata
