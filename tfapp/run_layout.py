"""The run directory's layout: every file and folder a run writes, named in one place.

``RunLayout(output_dir/name)`` is what the training loop, the tasks, the reports, W&B and
evaluate read their paths from; nothing else spells a run-directory file name. No
TensorFlow import, so reports and ``--help`` stay fast.

A multi-worker run has one run directory, written by the chief. Every other worker writes
the same files into its own scratch copy (collective saves need every worker), under
``.workers/<task_type>_<task_id>/`` next to the run directory, and removes it at the end.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tfapp.atomic import read_state

__all__ = ["RunLayout", "WORKERS_DIR", "aside_path", "is_worker_scratch"]

#: the folder next to a run directory that holds non-chief workers' scratch copies
WORKERS_DIR = ".workers"


@dataclass(frozen=True)
class RunLayout:
    """Paths inside one run directory (``root``)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    # ----------------------------------------------------------------- what the loop writes
    @property
    def lock(self) -> Path:
        """Held (flock) by the one process training into this directory."""
        return self.root / ".lock"

    @property
    def params(self) -> Path:
        return self.root / "params.yaml"

    @property
    def status(self) -> Path:
        return self.root / "status.json"

    @property
    def header_txt(self) -> Path:
        return self.root / "run_header.txt"

    @property
    def header_json(self) -> Path:
        return self.root / "run_header.json"

    @property
    def input_state(self) -> Path:
        """How the training stream is laid out (batches per fit epoch): with the backup's
        (epoch, step), where a resumed run's data resumes."""
        return self.root / "input_state.json"

    @property
    def lr_find_json(self) -> Path:
        return self.root / "lr_find.json"

    @property
    def lr_find_png(self) -> Path:
        return self.root / "lr_find.png"

    @property
    def lr_range_test_png(self) -> Path:
        """``python -m tfapp.lr_find``'s plot (its numbers: the same name, .json); apart
        from lr_find.json, which a resumed ``learning_rate=auto`` run reads its rate from."""
        return self.root / "lr_range_test.png"

    @property
    def lr_schedule_png(self) -> Path:
        return self.root / "lr_schedule.png"

    @property
    def logs(self) -> Path:
        """TensorBoard: ``train/`` and ``validation/`` (Keras), plus task panels."""
        return self.root / "logs"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def best_record(self) -> Path:
        """``best.json``: which checkpoint in ``checkpoints/`` holds the best evaluation
        (``training.callbacks.BestCheckpoint``), its epoch, monitor and value."""
        return self.checkpoints / "best.json"

    def best(self) -> dict | None:
        """The best-checkpoint record (``checkpoint``, ``epoch``, ``step``, ``monitor``,
        ``value``), or None: the one reader of ``best.json``."""
        return read_state(self.best_record, "best-checkpoint record")

    @property
    def best_checkpoint(self) -> Path | None:
        """The best checkpoint's path prefix (for ``model.load_weights``), or None."""
        record = self.best()
        return self.checkpoints / record["checkpoint"] if record else None

    @property
    def backup(self) -> Path:
        """BackupAndRestore's folder: a rerun of the same command resumes from it."""
        return self.root / "backup"

    @property
    def backup_params(self) -> Path:
        """The config the backup was made under, kept with it: a rerun is compared with
        this one, not with params.yaml, which a user may have edited."""
        return self.backup / "tfapp_params.yaml"

    def has_backup(self) -> bool:
        """Whether the backup folder holds a backup to resume (not only its config)."""
        return self.backup.is_dir() and any(p.name != self.backup_params.name
                                            for p in self.backup.iterdir())

    @property
    def history(self) -> Path:
        return self.root / "history.csv"

    @property
    def curves(self) -> Path:
        return self.root / "curves.png"

    @property
    def export(self) -> Path:
        """The serving SavedModel (``trainer.export``)."""
        return self.root / "export"

    # ----------------------------------------------------------------- what tasks write
    @property
    def labels(self) -> Path:
        """The classifier's label vocabulary."""
        return self.root / "labels.json"

    @property
    def vocab(self) -> Path:
        """The generator's word vocabulary."""
        return self.root / "vocab.txt"

    @property
    def validation_report(self) -> Path:
        return self.root / "validation_report.json"

    @property
    def test_report(self) -> Path:
        """The exported model scored on the test split (``data.test_files``/``test_split``)."""
        return self.root / "test_report.json"

    @property
    def confusion_matrix(self) -> Path:
        """The exported model's confusion matrix on validation (as validation_report.json)."""
        return self.root / "confusion_matrix.png"

    def confusion_matrix_for(self, split: str) -> Path:
        """The exported model's confusion matrix on ``split`` (validation or test)."""
        return self.confusion_matrix if split == "validation" else \
            self.root / f"confusion_matrix_{split}.png"

    def task_logs(self, panel: str) -> Path:
        """A task's own TensorBoard writer (``validation`` images, generator ``samples``)."""
        return self.logs / panel

    # ----------------------------------------------------------------- workers
    def worker_scratch(self, task_type: str, task_id: int) -> RunLayout:
        """The same layout in a non-chief worker's scratch copy."""
        return RunLayout(self.root.parent / WORKERS_DIR / f"{task_type}_{task_id}"
                         / self.root.name)

    def remove_worker_scratch(self) -> None:
        """Delete this (scratch) layout and the scratch folders it leaves empty."""
        if not is_worker_scratch(self.root):
            raise ValueError(f"{self.root} is not a worker scratch directory")
        shutil.rmtree(self.root, ignore_errors=True)
        for parent in (self.root.parent, self.root.parent.parent):
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()


def is_worker_scratch(path: str | os.PathLike) -> bool:
    """Whether ``path`` lies in a worker's scratch copy (reports skip those)."""
    return WORKERS_DIR in Path(path).parts


def aside_path(root: Path) -> Path:
    """Where ``--start-over`` moves a run directory: ``<name>.old-<date>-<time>`` beside it
    (with ``-2``, ``-3`` ... when taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = root.with_name(f"{root.name}.old-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = root.with_name(f"{root.name}.old-{stamp}-{n}")
    return aside
