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

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from tfapp import cli
from tfapp.tracking import report

import click

REPORT_NAME = "tfapp_report.html"


def report_path(out: str, runs: list[Path], given: Sequence[str | Path] = ()) -> Path:
    """Where the report goes: ``--out`` (inside it when it is a folder; ``.html`` added
    when it has no such suffix), else the run's report.html for one run, the folder's
    report.html when one folder holding runs (a tuner search) was given,
    ./tfapp_report.html for several."""
    if out:
        # A folder is where the user wants the report, not a file to replace.
        if Path(out).is_dir():
            return Path(out) / REPORT_NAME
        # `--out report` wrote a file named `report` that no browser opens as a page.
        path = Path(out)
        return path if path.suffix.lower() in (".html", ".htm") else path.with_name(
            path.name + ".html")
    if len(runs) == 1:
        return runs[0] / "report.html"
    if len(given) == 1 and Path(given[0]).is_dir():
        return Path(given[0]) / "report.html"
    return Path(REPORT_NAME)


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


@cli.command(
    "share",
    """Write one self-contained HTML report of runs and sync their offline W&B runs.

    RUN_DIR: run directories (output_dir/name), a tuner search directory, or folders
    holding runs. The report (no server, no requests to other hosts) has run summaries,
    configs, metric curves, a comparison of several runs or of a search's trials, confusion
    matrices, generator samples and profile summaries. Offline W&B runs are uploaded with
    wandb sync when an API key is available, else the command is printed.""")
@click.argument("runs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option("--out", default="",
              help="Report file (.html added if missing), or an existing folder to write "
                   f"{REPORT_NAME} into (default: report.html in the run or the search "
                   f"folder given, ./{REPORT_NAME} for several).")
@click.option("--no-profile", is_flag=True,
              help="Leave profile summaries out (they take a few seconds each).")
@click.option("--no-sync", is_flag=True,
              help="Never upload to W&B, only print the wandb sync commands.")
def command(args: SimpleNamespace) -> int:
    runs = report.find_runs(list(args.runs))
    out = report_path(args.out, runs, list(args.runs))
    for run in runs:
        for line in sync_wandb(run, upload=not args.no_sync):
            print(line)
    # the paths as given: a search folder among them gets its search section
    path = report.write_report(list(args.runs), out, with_profile=not args.no_profile)
    print(f"report ({len(runs)} run{'s' if len(runs) > 1 else ''}): {path.resolve()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.share")


if __name__ == "__main__":
    sys.exit(main())
