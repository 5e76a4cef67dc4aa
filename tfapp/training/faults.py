"""Faults of a multi-worker run: a lost worker becomes one clear error, not a traceback.

When a MultiWorkerMirrored worker dies, the others learn it from their next collective op
(the peer's socket closes: ``UnavailableError`` at once) or from TF's coordination service,
whose heartbeats mark a silent (frozen, unreachable) worker as dead after its heartbeat
timeout and abort every other task's collectives. Either way TensorFlow raises a
multi-screen ``Graph execution error`` naming a collective op; ``worker_loss_explained``
turns it into ``WorkerLost``: one ``tfapp: error:`` line that says which peer and what to do,
and exit code ``EXIT_WORKER_LOST`` (75, sysexits' "temporary failure: try again") -- the
backups let the same command, started again on every worker, resume.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

from tfapp.config import ConfigError
from tfapp.runtime import TFConfig, read_tf_config

EXIT_WORKER_LOST = 75


class WorkerLost(RuntimeError):
    """A peer of this multi-worker run stopped; run the same command again on every worker."""

    exit_code = EXIT_WORKER_LOST


def _peer(message: str) -> str:
    """The first task named in ``message`` that is not this one, with its address."""
    try:
        tf_config = read_tf_config()
    except ConfigError:
        tf_config = TFConfig(cluster={})
    me = (tf_config.task_type, tf_config.task_index)
    for job, task in re.findall(r"/job:(\w+)(?:/replica:\d+)?/task:(\d+)", message):
        if (job, int(task)) != me:
            address = tf_config.cluster.get(job, [])
            where = f" ({address[int(task)]})" if int(task) < len(address) else ""
            return f"{job} {task}{where}"
    return "another worker"


@contextlib.contextmanager
def worker_loss_explained() -> Iterator[None]:
    """Inside a multi-worker run (TF_CONFIG set), report a lost peer as ``WorkerLost``."""
    if not os.environ.get("TF_CONFIG"):
        yield
        return
    import tensorflow as tf

    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
            tf.errors.DeadlineExceededError, tf.errors.InternalError) as err:
        lines = [ln.strip() for ln in str(err.message).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "aborted" in ln.lower() or "unhealthy" in ln.lower()
                    or "heartbeat" in ln.lower()), lines[-1] if lines else type(err).__name__)
        raise WorkerLost(
            f"{_peer(err.message)} of this multi-worker run stopped responding ({why[:200]}); "
            "this worker stopped too. Start the same command again on every worker to resume "
            "from the last backup") from None
