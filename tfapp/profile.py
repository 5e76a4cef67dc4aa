"""Profile a run: ``python -m tfapp.profile capture|summary ...``.

* ``capture --address localhost:PORT --duration-ms 2000 --logdir RUN/logs`` records a
  running job that was started with ``trainer.profiler_port=PORT
  trainer.profiler_listen_all=true`` (TensorFlow's profiler server listens on every
  interface, unauthenticated: only where a firewall keeps the port closed to others);
* ``summary RUN`` prints step time, the share of it spent waiting on input (with a verdict
  and advice) and the top ops, from the newest capture under RUN (TensorBoard's Profile
  tab shows the same capture in full: ``tensorboard --logdir RUN``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from types import SimpleNamespace

from tfapp import cli
from tfapp.config import ConfigError
from tfapp.tracking import profiler

import click


def _pick(run: str, name: str):
    sessions = profiler.find_sessions(run)
    if not sessions:
        raise ConfigError(f"no profiler capture under '{run}'; {profiler.HOW_TO_CAPTURE}")
    if not name:
        return sessions[-1], sessions
    chosen = [s for s in sessions if s.name == name]
    if not chosen:
        raise ConfigError(f"--session {name}: not found; have: "
                          f"{', '.join(s.name for s in sessions)}")
    return chosen[-1], sessions


@click.group("profile", cls=cli.Group, help="""Profile a run.

    `capture` records a running job's profile; `summary` prints step time, the input-bound
    verdict and the top ops of a capture, with TensorBoard's profile converters
    (TensorBoard's Profile tab shows the same capture in full: tensorboard --logdir RUN).""")
def group() -> None:
    """The ``profile`` commands (the group itself does nothing)."""


@group.add_command
@cli.command("capture", """Capture a job started with trainer.profiler_port.

    The job runs with trainer.profiler_port=PORT trainer.profiler_listen_all=true
    (TensorFlow's profiler server listens on every interface, unauthenticated: only where a
    firewall keeps the port closed to others).""")
@click.option("--address", required=True, metavar="HOST:PORT",
              help="The job's profiler server, e.g. localhost:6009.")
@click.option("--duration-ms", type=int, default=2000, show_default=True,
              help="How long to record; cover several steps.")
@click.option("--logdir", required=True,
              help="Where the capture goes; use RUN_DIR/logs so that TensorBoard and "
                   "tfapp profile summary RUN_DIR find it.")
@click.option("--summary", is_flag=True, help="Print the summary afterwards.")
def capture(args: SimpleNamespace) -> int:
    if args.duration_ms <= 0:
        raise ConfigError("--duration-ms must be > 0")
    session = profiler.capture(args.address, args.logdir, args.duration_ms)
    print(f"captured {args.duration_ms} ms into {session}")
    if args.summary:
        print(profiler.format_summary(profiler.summarize(session)))
    return 0


@group.add_command
@cli.command("summary", """Summarise the newest capture under a run.

    Step time, the share of it spent waiting on input (with a verdict and advice) and the
    top ops. RUN_DIR: a run directory (or any folder above plugins/profile/).""")
@click.argument("run", metavar="RUN_DIR")
@click.option("--session", default="",
              help="Capture session name (default: the newest; --list shows them).")
@click.option("--list", "list_sessions", is_flag=True, help="List the capture sessions.")
@click.option("--top", type=int, default=10, show_default=True, help="How many ops to list.")
@click.option("--json", is_flag=True, help="Print the summary as JSON.")
def summary(args: SimpleNamespace) -> int:
    session, sessions = _pick(args.run, args.session)
    if args.list_sessions:
        print("\n".join(str(s) for s in sessions))
        return 0
    result = profiler.summarize(session, top=args.top)
    print(json.dumps(result, indent=1) if args.json else profiler.format_summary(result))
    return 0


command = group


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(group, argv, "python -m tfapp.profile")


if __name__ == "__main__":
    sys.exit(main())
