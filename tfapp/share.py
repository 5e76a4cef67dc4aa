"""Share runs: ``python -m tfapp.share RUN_DIR [RUN_DIR ...]``.

tensorboard.dev was shut down on 2024-01-01; this is what replaces it:

* W&B: offline runs (``RUN_DIR/wandb/offline-run-*``) are uploaded with ``wandb sync``
  when an API key is available and the URL printed; without a key the exact
  ``wandb sync`` command is printed instead;
* one self-contained HTML report (no server, no requests to other hosts): run summaries,
  configs, metric curves, a comparison of several runs or of a tuner search's trials,
  confusion matrices, generator samples and profile summaries.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tfapp import cli
from tfapp.tracking import report

REPORT_NAME = "tfapp_report.html"


def report_path(out: str, runs: list[Path], given: Sequence[str | Path] = ()) -> Path:
    """Where the report goes: ``--out`` (inside it when it is a folder), else the run's
    report.html for one run, the folder's report.html when one folder holding runs (a
    tuner search) was given, ./tfapp_report.html for several."""
    if out:
        # A folder is where the user wants the report, not a file to replace.
        return Path(out) / REPORT_NAME if Path(out).is_dir() else Path(out)
    if len(runs) == 1:
        return runs[0] / "report.html"
    if len(given) == 1 and Path(given[0]).is_dir():
        return Path(given[0]) / "report.html"
    return Path(REPORT_NAME)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tfapp.share",
        description="Write one self-contained HTML report of runs (or a tuner search "
                    "directory) and sync their offline W&B runs, or print how to.")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="run directories (output_dir/name) or folders holding runs")
    parser.add_argument("--out", default="",
                        help="report file, or an existing folder to write "
                             f"{REPORT_NAME} into (default: report.html in the run or the "
                             f"search folder given, ./{REPORT_NAME} for several)")
    parser.add_argument("--no-profile", action="store_true",
                        help="leave profile summaries out (they take a few seconds each)")
    parser.add_argument("--no-sync", action="store_true",
                        help="never upload to W&B, only print the wandb sync commands")
    return parser


def sync_wandb(run_dir: Path, upload: bool) -> list[str]:
    """Upload (or say how to upload) the offline W&B runs of ``run_dir``."""
    from tfapp.tracking import wandb_run  # imports TensorFlow: only when there is a run

    lines = []
    for offline in sorted(run_dir.glob("wandb/offline-run-*")):
        command = ["wandb", "sync", str(offline)]
        if not upload or not wandb_run.has_api_key():
            lines.append(f"W&B offline run {offline}: upload with: {' '.join(command)}")
            continue
        done = subprocess.run([sys.executable, "-m", "wandb", "sync", str(offline)],
                              capture_output=True, text=True, timeout=600)
        urls = re.findall(r"https?://\S+", done.stdout + done.stderr)
        if done.returncode == 0:
            lines.append(f"W&B: synced {offline}" + (f": {urls[-1]}" if urls else ""))
        else:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["failed"]
            lines.append(f"W&B: sync of {offline} failed ({last[0]}); retry with: "
                         f"{' '.join(command)}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cli.setup_logging()

    def body() -> int:
        runs = report.find_runs(args.runs)
        out = report_path(args.out, runs, args.runs)
        for run in runs:
            for line in sync_wandb(run, upload=not args.no_sync):
                print(line)
        # the paths as given: a search folder among them gets its search section
        path = report.write_report(args.runs, out, with_profile=not args.no_profile)
        print(f"report ({len(runs)} run{'s' if len(runs) > 1 else ''}): {path.resolve()}")
        return 0

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
