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

import argparse
import json
import sys
from collections.abc import Sequence

from tfapp import cli
from tfapp.config import ConfigError
from tfapp.tracking import profiler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tfapp.profile",
        description="Capture a running job's profile and summarise captures (step time, "
                    "input-bound verdict, top ops) with TensorBoard's profile converters.")
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="capture a job started with trainer.profiler_port")
    cap.add_argument("--address", required=True, metavar="HOST:PORT",
                     help="the job's profiler server, e.g. localhost:6009")
    cap.add_argument("--duration-ms", type=int, default=2000,
                     help="how long to record (default 2000); cover several steps")
    cap.add_argument("--logdir", required=True,
                     help="where the capture goes; use RUN_DIR/logs so TensorBoard and "
                          "`summary RUN_DIR` find it")
    cap.add_argument("--summary", action="store_true", help="print the summary afterwards")
    summ = sub.add_parser("summary", help="summarise the newest capture under a run")
    summ.add_argument("run", metavar="RUN_DIR", help="run directory (or any folder above "
                                                     "plugins/profile/)")
    summ.add_argument("--session", default="",
                      help="capture session name (default: the newest; --list shows them)")
    summ.add_argument("--list", action="store_true", help="list the capture sessions")
    summ.add_argument("--top", type=int, default=10, help="how many ops to list (default 10)")
    summ.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cli.setup_logging()

    def body() -> int:
        if args.command == "capture":
            if args.duration_ms <= 0:
                raise ConfigError("--duration-ms must be > 0")
            session = profiler.capture(args.address, args.logdir, args.duration_ms)
            print(f"captured {args.duration_ms} ms into {session}")
            if args.summary:
                print(profiler.format_summary(profiler.summarize(session)))
            return 0
        session, sessions = _pick(args.run, args.session)
        if args.list:
            print("\n".join(str(s) for s in sessions))
            return 0
        summary = profiler.summarize(session, top=args.top)
        print(json.dumps(summary, indent=1) if args.json else profiler.format_summary(summary))
        return 0

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
