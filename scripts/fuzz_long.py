"""The fuzzing properties of tests/test_fuzz.py with many examples and a new seed each run.

    PYTHONPATH=. python scripts/fuzz_long.py [--scale 25] [--only prepare,config,export]

Runs each library property (prepare's readers, config files and overrides, damaged
exports) with ``--scale`` times its CI examples under the ``long`` hypothesis profile, then
prints how many inputs each was given (shrinking included) and every failure found: its
exception, message and the falsifying example hypothesis shrank it to. A failure is a
bad-input case to fix in tfapp and to keep as a row of tests/test_bad_inputs.py. Exits 1
when any property failed. (The CLI properties of test_fuzz.py need pytest's capture; CI
runs them.)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _failures(err: BaseException) -> list[BaseException]:
    """The distinct failures in what a hypothesis test raised (several as a group)."""
    if isinstance(err, BaseExceptionGroup):
        return [e for sub in err.exceptions for e in _failures(sub)]
    return [err]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=25,
                        help="examples per property: this times its CI count (default 25)")
    parser.add_argument("--only", default="prepare,config,export",
                        help="comma-separated properties to run (default: all)")
    args = parser.parse_args(argv)
    # Before test_fuzz is imported: it reads its profile once.
    os.environ["TFAPP_FUZZ_PROFILE"] = "long"
    os.environ["TFAPP_FUZZ_SCALE"] = str(args.scale)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    import test_fuzz as F
    from hypothesis import given

    def export() -> None:
        with tempfile.TemporaryDirectory(prefix="tfapp-fuzz-export-") as tmp:
            built = F.make_export(Path(tmp))

            @F.fuzz(5, shrink=False)
            @given(F.damage(F._export_files(built)))
            def prop(changes) -> None:
                F.check_export(built, changes)

            prop()

    properties: dict[str, Callable[[], None]] = {
        "prepare": F.test_prepare_reads_back_every_row_or_fails_in_one_line,
        "config": F.test_a_config_loads_and_reads_back_or_fails_in_one_line,
        "export": export}
    found: list[tuple[str, BaseException]] = []
    for name in args.only.split(","):
        started = time.time()
        try:
            properties[name]()
        except Exception as err:  # noqa: BLE001  (every failure is reported, then the next)
            found += [(name, e) for e in _failures(err)]
        print(f"{name}: {F.TRIED[name]} inputs in {time.time() - started:.0f} s", flush=True)
    print(f"\n{sum(F.TRIED.values())} inputs tried; {len(found)} failure(s) found")
    for name, err in found:
        print(f"\n--- {name}: {type(err).__name__}: {str(err)[:500]}")
        for note in getattr(err, "__notes__", []):
            print(note)
        print("".join(traceback.format_tb(err.__traceback__)[-3:]))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
