"""Prepare a task's data once: ``python -m tfapp.prepare --config FILE --out DIR``.

Reads the config's ``data.train_files`` / ``validation_files`` / ``test_files`` (as the
task reads them: its columns, format and tag scheme) into ``DIR/train``, ``DIR/validation``
and ``DIR/test``: TFRecord shards of ``tf.train.Example`` and a manifest each
(``tfapp.data.prepare.builder``). Training then streams them with no pass over the data:
``data.train_files=DIR/train`` (the command prints the overrides).

On several hosts, ``--shard i/N`` on host ``i`` prepares its share of the input files
into the same ``--out`` (a shared disk or ``gs://``); the host that finishes last writes
the manifest. A killed run resumes: rerun the same command.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from types import SimpleNamespace

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.config import ConfigError, ExperimentConfig
from tfapp.tasks import get_task

import click


def _shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise ConfigError(f"--shard {text}: give I/N with 0 <= I < N, e.g. --shard 0/4 on the "
                          "first of four hosts")
    return int(m.group(1)), int(m.group(2))


def _check(args: SimpleNamespace) -> None:  # --print-config checks them too
    _shard(args.shard)
    if args.shard_mb <= 0:
        raise ConfigError(f"--shard-mb {args.shard_mb}: must be > 0")


@cli.command(
    "prepare",
    """Prepare a config's data once into TFRecord shards and a manifest per split.

    Writes OUT/train, OUT/validation and OUT/test, read as the task reads them. Train on
    them with data.train_files=OUT/train (printed at the end): no pass over the data before
    the first step, each worker reads its own shards, a resumed run skips whole shards.""",
    config=True, check=_check)
@click.option("--out", required=True, metavar="DIR",
              help="Folder to write (local or gs://); a rerun resumes it.")
@click.option("--split", type=click.Choice(["train", "validation", "test", "all"]),
              default="all", show_default=True, help="Which split's files (all: all it has).")
@click.option("--shard", default="0/1", metavar="I/N", show_default=True,
              help="Prepare input files I, I+N, I+2N, ... (one host of N).")
@click.option("--workers", type=int, default=0,
              help="Input files prepared side by side (default: one per core).")
@click.option("--shard-mb", type=float, default=64.0, show_default=True,
              help="Size of each TFRecord shard written, in MB: shards are what input "
                   "workers divide among themselves.")
def command(cfg: ExperimentConfig, args: SimpleNamespace) -> int:
    shard = _shard(args.shard)
    from tfapp.data.formats.files import resolve_files
    from tfapp.data.prepare.builder import prepare

    task = get_task(cfg.task)
    files = given = task.input_files(cfg)
    if args.split != "all":
        if args.split not in files:
            raise ConfigError(f"--split {args.split}: the config gives no "
                              f"data.{args.split}_files")
        files = {args.split: files[args.split]}
    spec, out = task.row_spec(cfg), args.out.rstrip("/")
    # Held-out fractions of the training files get shards of their own (the run's seed
    # and fractions; a run with others still reads the folder, filtering by bucket).
    held_out = spec.with_held_out(
        cfg.runtime.seed,
        0.0 if "validation" in given else getattr(cfg.data, "validation_split", 0.0),
        0.0 if "test" in given else getattr(cfg.data, "test_split", 0.0))
    overrides, waiting = [], []
    for split, pattern in files.items():
        what = f"data.{split}_files"
        paths = [pattern] if cfg.data.format == "tfds" else \
            resolve_files(pattern, what)
        started = time.time()
        manifest = prepare(paths, f"{out}/{split}", held_out if split == "train" else spec,
                           mode=cfg.data.on_bad_rows,
                           split=split, shard=shard, workers=args.workers,
                           shard_bytes=int(args.shard_mb * (1 << 20)),
                           progress=lambda line: print(line, flush=True))
        seconds = time.time() - started
        if manifest is None:
            waiting.append(split)
            print(f"{split}: this host's files are done ({args.shard}); the manifest is "
                  "written when every host's are", flush=True)
            continue
        bad = manifest.bad_rows.get("count", 0)
        print(f"{split}: {manifest.rows} rows in {len(manifest.shards)} shard(s) from "
              f"{len(manifest.sources)} file(s) -> {out}/{split}"
              + (f"; {bad} bad row(s) skipped" if bad else "")
              + (f" ({manifest.rows / seconds:,.0f} rows/s)" if seconds > 0.5 else ""),
              flush=True)
        overrides.append(f"data.{split}_files={out}/{split}")
    if overrides and not waiting:
        print("train on it with: " + " ".join(overrides))
    return 0



def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.prepare")


if __name__ == "__main__":
    sys.exit(main())
