"""A quiet first screen: TensorFlow's C++ start-up notices kept off a command's stderr.

TensorFlow 2.20+ logs through absl, which writes everything logged before its own
initialisation straight to stderr, whatever ``TF_CPP_MIN_LOG_LEVEL`` says: every command
opened with two oneDNN notices, "Could not find cuda drivers" and, on CPU machines,
``E... failed call to cuInit``, before tfapp's first line. So a command's stderr goes
through a small filter process that drops those lines -- C++ INFO and WARNING lines and
the few ERROR lines that are only notices -- and passes everything else through as it
comes, fatal lines included. Being a separate process is what keeps nothing lost when
TensorFlow aborts: the filter drains what the dying process wrote, then exits.

Installed only for ``python -m tfapp...`` commands and the ``tfapp`` console script (not
when tfapp is imported as a library, e.g. under pytest), and not with ``-v``/``--verbose``
or ``TFAPP_TF_LOGS=1``.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["NOISE", "quiet_stderr", "stderr_is_terminal"]

#: Lines dropped: C++ INFO/WARNING lines (absl's format, TF 2.21, and TensorFlow's own
#: dated one, TF 2.20), absl's pre-initialisation notice, and ERROR lines that only say a
#: GPU or a faster kernel is absent.
NOISE = (r"^[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] "
         r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\] "
         r"|^WARNING: All log messages before absl::InitializeLog\(\) is called"
         r"|^(E\d{4} |\d{4}-\d\d-\d\d [\d:.]+: E ).*\] "
         r"(failed call to cuInit|oneDNN supports DT_\w+ only on platforms)")

# Runs in ``python -S``: read stdin in chunks, forward at once whatever cannot be the
# start of a noise line (progress output needs no newline), hold a line that might be
# one until it ends.
_FILTER = r"""
import os, re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise = re.compile(sys.argv[1].encode())
maybe = re.compile(rb"^([IWEF]\d{0,4}( |$)|W(A(R(N(I(N(G(:.*)?)?)?)?)?)?)?$"
                   rb"|[\d\- :.]*$|\d{4}-[\d\- :.]+: ?([IWEF]( |$))?)")
out, held = sys.stdout.fileno(), b""
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    data, held = held + chunk, b""
    lines = data.split(b"\n")
    tail = lines.pop()
    text = b"".join(line + b"\n" for line in lines if not noise.search(line))
    if tail and maybe.match(tail[:40]) and not noise.search(tail):
        held = tail
    elif tail and not noise.search(tail):
        text += tail
    elif tail:
        held = tail
    if text:
        os.write(out, text)
if held and not noise.search(held):
    os.write(out, held)
"""

_TERMINAL = sys.stderr.isatty() if sys.stderr else False


def stderr_is_terminal() -> bool:
    """Whether stderr was a terminal before the filter took it over."""
    return _TERMINAL


def quiet_stderr() -> bool:
    """Route this process's stderr (fd 2) through the noise filter; returns whether it did."""
    try:
        sys.stderr.flush()
        target = os.dup(2)
        filt = subprocess.Popen(  # noqa: S603 (our own interpreter, a fixed program)
            [sys.executable, "-S", "-c", _FILTER, NOISE], stdin=subprocess.PIPE,
            stdout=target, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return False
    os.dup2(filt.stdin.fileno(), 2)
    os.close(target)
    filt.stdin.close()  # fd 2 now holds the pipe; the filter ends when this process does
    return True


def wanted(script: bool = False) -> bool:
    """Whether this process is a ``python -m tfapp...`` command that wants the filter
    (asked when tfapp is imported), or with ``script`` the ``tfapp`` console script (asked
    by its ``main``, before anything imports TensorFlow)."""
    argv = sys.argv
    return (bool(argv) and (script or argv[0] == "-m") and "-v" not in argv
            and "--verbose" not in argv
            and os.environ.get("TFAPP_TF_LOGS", "") not in ("1", "true"))
