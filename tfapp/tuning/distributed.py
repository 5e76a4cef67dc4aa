"""Distributed tuning: one chief process serves the oracle, worker processes run trials.

KerasTuner reads three environment variables: ``KERASTUNER_TUNER_ID`` ("chief" for the
oracle server, any other unique id for a worker), ``KERASTUNER_ORACLE_IP`` and
``KERASTUNER_ORACLE_PORT`` (where the chief listens). ``--chief`` / ``--worker ID`` with
``--oracle HOST:PORT`` set them, so each process is started by one command.

KerasTuner's chief cannot tell a dead worker from a slow one: a worker killed mid-trial
keeps its trial "ongoing" and the chief waits for it forever. tfapp's workers therefore
send the chief a heartbeat every ``tune.worker_timeout_s / 6`` seconds (a small gRPC
method next to the oracle's); a worker silent for ``tune.worker_timeout_s`` is taken as
gone, and its trial goes back to the queue for the next worker that asks, which resumes
it from the trial's checkpoint.
"""

from __future__ import annotations

import os
import threading
import time

from tfapp import compat
from tfapp.config import ConfigError

ENV_ID, ENV_IP, ENV_PORT = "KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"
_HEARTBEAT_SERVICE, _HEARTBEAT_METHOD = "tfapp.TunerWorkers", "Heartbeat"


def configure(chief: bool, worker: str | None, oracle: str | None) -> str:
    """Set KerasTuner's environment from the flags; returns this process's role
    (local, chief or worker). Variables already set in the environment are kept."""
    if chief and worker:
        raise ConfigError("--chief and --worker exclude each other; start one process with "
                          "--chief and each worker with --worker ID")
    if oracle:
        host, sep, port = oracle.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"--oracle '{oracle}' is not HOST:PORT (e.g. 127.0.0.1:8000)")
        os.environ[ENV_IP], os.environ[ENV_PORT] = host, port
    if chief:
        os.environ[ENV_ID] = "chief"
    elif worker:
        if "chief" in worker:  # KerasTuner treats any id containing "chief" as the chief
            raise ConfigError(f"--worker '{worker}': a worker id may not contain 'chief'")
        os.environ[ENV_ID] = f"tuner-{worker}"
    if (chief or worker) and ENV_IP not in os.environ:
        raise ConfigError("distributed tuning needs the chief's address: --oracle HOST:PORT "
                          f"(or {ENV_IP} and {ENV_PORT})")
    if ENV_IP in os.environ and ENV_ID not in os.environ:
        raise ConfigError(f"{ENV_IP} is set but this process has no role; pass --chief or "
                          f"--worker ID (or set {ENV_ID})")
    return role()


def role() -> str:
    if ENV_IP not in os.environ:
        return "local"
    return "chief" if is_chief() else "worker"


def is_chief() -> bool:
    return ENV_IP in os.environ and "chief" in os.environ.get(ENV_ID, "")


def wait_for_chief(timeout_s: float) -> None:
    """Return once the chief's oracle answers at KERASTUNER_ORACLE_IP:PORT; one line if it
    does not within ``timeout_s`` (workers may start before the chief, so they wait)."""
    import grpc

    address = f"{os.environ[ENV_IP]}:{os.environ[ENV_PORT]}"
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        raise ConfigError(f"no tuning chief answers at {address} after {timeout_s:.0f} s; start "
                          f"it first (python -m tfapp.tune ... --chief --oracle {address}) or "
                          "fix --oracle") from None
    finally:
        channel.close()


def serve_oracle(oracle, worker_timeout_s: float = 120.0, poll_seconds: float = 0.5) -> bool:
    """Serve ``oracle`` to the workers until the search is over and every worker has been
    told so (KerasTuner's ``start_server``, polling twice a second instead of every 20 s),
    handing the trial of a worker silent for ``worker_timeout_s`` to the next worker.

    Returns False, having served nothing, where this KerasTuner's service cannot be reached
    (``compat.oracle_server_parts``): the caller then runs KerasTuner's own chief."""
    from concurrent import futures

    import grpc

    beats = _Heartbeats()
    # Asking for a trial also says "alive": a worker killed before its first heartbeat
    # got through is still noticed.
    parts = compat.oracle_server_parts(
        lambda request, context: beats.beat(request.tuner_id.encode(), context))
    if parts is None:
        return False
    servicer_class, add_servicer_to_server, exit_chief = parts
    address = f"{os.environ[ENV_IP]}:{os.environ[ENV_PORT]}"
    # Oracle methods are synchronized anyway; more threads keep heartbeats from queueing
    # behind a slow oracle call.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = servicer_class(oracle)
    add_servicer_to_server(servicer, server)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        _HEARTBEAT_SERVICE, {_HEARTBEAT_METHOD: grpc.unary_unary_rpc_method_handler(
            beats.beat)}),))
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:  # newer grpc raises where older ones return 0
        bound = 0
    if not bound:
        raise ConfigError(f"the chief cannot listen on {address} (port in use?); choose another "
                          "--oracle port")
    server.start()
    print(f"chief: serving the oracle on {address}", flush=True)
    try:
        while not (servicer.stop_triggered and exit_chief(oracle)):
            time.sleep(poll_seconds)
            for tuner_id, silent in beats.silent(worker_timeout_s):
                trial_id = compat.requeue_trial(oracle, tuner_id)
                if trial_id is not None:
                    print(f"chief: worker {tuner_id} sent no heartbeat for {silent:.0f} s "
                          f"(killed or hung?); trial {trial_id} goes to the next worker",
                          flush=True)
    finally:
        server.stop(grace=2)
    return True


class _Heartbeats:
    """When each worker last said it is alive (gRPC threads write, the serve loop reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def beat(self, request: bytes, context) -> bytes:
        with self._lock:
            self._last[request.decode()] = time.monotonic()
        return b""

    def silent(self, timeout_s: float) -> list[tuple[str, float]]:
        """Workers silent for over ``timeout_s``, each reported once (until it beats again)."""
        now = time.monotonic()
        with self._lock:
            gone = [(t, now - last) for t, last in self._last.items() if now - last > timeout_s]
            for tuner_id, _ in gone:
                del self._last[tuner_id]
        return gone


def start_heartbeat(worker_timeout_s: float) -> threading.Event:
    """Tell the chief every ``worker_timeout_s / 6`` seconds that this worker is alive, from
    a daemon thread, until the returned event is set (or the process ends)."""
    import grpc

    tuner_id = os.environ[ENV_ID].encode()
    channel = grpc.insecure_channel(f"{os.environ[ENV_IP]}:{os.environ[ENV_PORT]}")
    beat = channel.unary_unary(f"/{_HEARTBEAT_SERVICE}/{_HEARTBEAT_METHOD}")
    every = max(0.5, worker_timeout_s / 6)
    stop = threading.Event()

    def loop() -> None:
        while True:
            try:
                beat(tuner_id, timeout=every)
            except grpc.RpcError:  # chief busy or gone: the next beat tries again
                pass
            if stop.wait(every):
                channel.close()
                return

    threading.Thread(target=loop, name="tfapp-heartbeat", daemon=True).start()
    return stop
