"""An export as an Apache Beam model handler: ``RunInference`` scoring, as ``predict --data``
scores, on Beam's runners (the DirectRunner, Dataflow, Flink, Spark).

``ExportModelHandler`` loads the export once per worker process (the loader registers the
TensorFlow Text ops its SavedModel uses), takes the rows in batches Beam cuts
(``BatchElements``, ``batch_elements_kwargs``) and scores each batch with
``tfapp.scoring.scored_rows``, the function ``predict --data`` writes with, so both write
the same values. Each ``PredictionResult`` holds the input ``Row`` and the output row
(kept columns, then the prediction). ``read_file`` reads one input file as predict does
(``tfapp.data.input.input_rows``), applying ``--on-bad-rows``.

apache-beam is the ``[beam]`` extra, installed in a venv of its own (it needs protobuf<7
and pyarrow<26; docs/scale_out.md): importing this module without it is one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tfapp.data.input.input_rows import InputRows
from tfapp.data.rows.bad_rows import BadRowPolicy, BadRowReport
from tfapp.data.rows.spec import Row
from tfapp.errors import ConfigError, DataError
from tfapp.run_layout import RunLayout
from tfapp.scoring import CALL, scored_rows
from tfapp.serving import PREDICT, ExportedModel
from tfapp.tasks import load_export

MISSING_BEAM = ("apache-beam is not installed: it is the [beam] extra, in a venv of its own "
                "(pip install -e '.[cpu,beam]'; docs/scale_out.md says why)")

try:
    import apache_beam as beam
    from apache_beam.ml.inference.base import ModelHandler, PredictionResult
except ModuleNotFoundError as err:  # only a missing apache_beam is the user's to fix
    if err.name != "apache_beam":
        raise
    raise ConfigError(MISSING_BEAM) from None

__all__ = ["ExportModelHandler", "MISSING_BEAM", "local_model", "read_file"]

#: the ``--on-bad-rows`` flag, in messages raised on workers (they name flags, not keys)
_FLAGS = {"data.on_bad_rows": "--on-bad-rows"}


class ExportModelHandler(ModelHandler[Row, PredictionResult, ExportedModel]):
    """``RunInference``'s handler for the export at ``model`` (a run directory or its
    export/): ``Row``s in, one ``PredictionResult`` each out, whose ``inference`` is
    the row ``predict --data`` writes for it. ``batch_size``: the most rows per batch."""

    def __init__(self, model: str, *, batch_size: int = 256):
        super().__init__()
        self.model, self.batch_size = model, batch_size

    def load_model(self) -> ExportedModel:
        return load_export(local_model(self.model), PREDICT)

    def run_inference(self, batch: Sequence[Row], model: ExportedModel,
                      inference_args: dict[str, Any] | None = None
                      ) -> Iterable[PredictionResult]:
        texts = [list(column) for column in zip(*(r.values for r in batch), strict=True)]
        rows = scored_rows(model, texts, [r.kept for r in batch])
        return [PredictionResult(r, row, self.model)
                for r, row in zip(batch, rows, strict=True)]

    def batch_elements_kwargs(self) -> dict[str, int]:
        # At least one model call's worth (scored_rows calls the export CALL rows at a
        # time, sorted by length): smaller batches only pad less often at a higher cost.
        return {"min_batch_size": min(CALL, self.batch_size), "max_batch_size": self.batch_size}

    def get_metrics_namespace(self) -> str:
        return "tfapp"


def read_file(path: str, columns: list[str], keep: list[str], *, fmt: str = "auto",
              mode: str = "fail") -> Iterator[Row]:
    """The good rows of one input file, as ``predict --data`` reads them (``columns``:
    the model's inputs; ``keep``: columns carried through). A bad row stops the pipeline
    (``mode="fail"``: one line naming file:line) or is left out and counted in Beam's
    ``tfapp/bad_rows`` counter (``mode="skip"``)."""
    bad = beam.metrics.Metrics.counter("tfapp", "bad_rows")
    read = beam.metrics.Metrics.counter("tfapp", "rows_read")
    policy = BadRowPolicy(mode, BadRowReport(), "input")
    for record in InputRows(path, columns, keep, fmt=fmt):
        if record.problem is None:
            read.inc()
            yield record
            continue
        try:
            policy(record.file, record.line, record.problem)
        except DataError as err:
            raise err.in_flag_terms(_FLAGS) from None
        bad.inc()


def local_model(model: str) -> str:
    """``model`` (a run directory or its export/) as a local folder tfapp's loader reads:
    itself when local; from a URL (``gs://``, any scheme tf.io.gfile reads), a copy in a
    new temporary folder of the export and the run's params.yaml (its columns and
    bad-row mode). Dataflow's workers see the export only on gs://: each worker process
    copies it once, when Beam loads the model."""
    if "://" not in model:
        return model
    import tempfile

    import tensorflow as tf

    src = model.rstrip("/")
    dest = tempfile.mkdtemp(prefix="tfapp-model-")
    if tf.io.gfile.exists(f"{src}/saved_model.pb"):
        _copy_tree(src, dest)
        return dest
    layout = RunLayout(dest)
    if not tf.io.gfile.exists(f"{src}/{layout.export.name}/saved_model.pb"):
        raise ConfigError(f"--model {model}: no export there (expected "
                          f"{src}/{layout.export.name}/saved_model.pb)")
    _copy_tree(f"{src}/{layout.export.name}", str(layout.export))
    if tf.io.gfile.exists(f"{src}/{layout.params.name}"):
        tf.io.gfile.copy(f"{src}/{layout.params.name}", str(layout.params))
    return dest


def _copy_tree(src: str, dest: str) -> None:
    import tensorflow as tf

    for folder, _, files in tf.io.gfile.walk(src):
        target = dest + folder[len(src):]
        tf.io.gfile.makedirs(target)
        for name in files:
            tf.io.gfile.copy(f"{folder}/{name}", f"{target}/{name}", overwrite=True)
