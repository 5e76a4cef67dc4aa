"""Distributed tuning: one chief process serves the oracle, worker processes run trials.

KerasTuner reads three environment variables: ``KERASTUNER_TUNER_ID`` ("chief" for the
oracle server, any other unique id for a worker), ``KERASTUNER_ORACLE_IP`` and
``KERASTUNER_ORACLE_PORT`` (where the chief listens). ``--chief`` / ``--worker ID`` with
``--oracle HOST:PORT`` (or a bare ``PORT``) set them, so each process is started by one
command. Without ``--oracle`` the chief listens on 127.0.0.1:8000: only its own machine
can reach it.

Anyone who reaches the chief can ask for trials and report results, so on any other
address the chief needs a shared secret, ``TFAPP_ORACLE_TOKEN``: a gRPC interceptor
refuses every call that does not carry it (UNAUTHENTICATED). Each worker process sends the
token, its id and a random nonce with every call; the chief refuses (ALREADY_EXISTS) a
second process using an id that another process used within ``tune.worker_timeout_s``,
since the two would share one trial directory.

KerasTuner's chief cannot tell a dead worker from a slow one: a worker killed mid-trial
keeps its trial "ongoing" and the chief waits for it forever. tfapp's workers therefore
send the chief a heartbeat every ``tune.worker_timeout_s / 6`` seconds (a small gRPC
method next to the oracle's); a worker silent for ``tune.worker_timeout_s`` is taken as
gone, and its trial goes back to the queue for the next worker that asks, which resumes
it from the trial's checkpoint.
"""

from __future__ import annotations

import collections
import hmac
import ipaddress
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from tfapp import compat
from tfapp.config import ConfigError

import grpc

ENV_ID, ENV_IP, ENV_PORT = "KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"
ENV_TOKEN = "TFAPP_ORACLE_TOKEN"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", "8000"
_HEARTBEAT_SERVICE, _HEARTBEAT_METHOD = "tfapp.TunerWorkers", "Heartbeat"
# Call metadata a worker sends with every call (gRPC wants lower-case keys).
_MD_TOKEN, _MD_WORKER, _MD_NONCE = "tfapp-oracle-token", "tfapp-worker-id", "tfapp-worker-nonce"
# This process's nonce: tells apart two worker processes started with the same id.
_NONCE = secrets.token_hex(8)


def configure(chief: bool, worker: str | None, oracle: str | None) -> str:
    """Set KerasTuner's environment from the flags; returns this process's role
    (local, chief or worker). Variables already set in the environment are kept, except
    that ``--oracle`` overrides the address."""
    if chief and worker:
        raise ConfigError("--chief and --worker exclude each other; start one process with "
                          "--chief and each worker with --worker ID")
    if oracle:
        os.environ[ENV_IP], os.environ[ENV_PORT] = parse_oracle(oracle)
    if chief:
        os.environ[ENV_ID] = "chief"
    elif worker:
        if "chief" in worker:  # KerasTuner treats any id containing "chief" as the chief
            raise ConfigError(f"--worker '{worker}': a worker id may not contain 'chief'")
        os.environ[ENV_ID] = f"tuner-{worker}"
    if chief or worker:
        # Loopback unless told otherwise: the chief serves whoever can reach it.
        os.environ.setdefault(ENV_IP, DEFAULT_HOST)
        os.environ.setdefault(ENV_PORT, DEFAULT_PORT)
    if ENV_IP in os.environ and ENV_ID not in os.environ:
        raise ConfigError(f"{ENV_IP} is set but this process has no role; pass --chief or "
                          f"--worker ID (or set {ENV_ID})")
    secret = token()
    if role() != "local" and secret is not None and not (secret.isascii()
                                                         and secret.isprintable()):
        raise ConfigError(f"{ENV_TOKEN} may hold only printable ASCII characters (it is sent "
                          "as gRPC metadata); e.g. the output of: openssl rand -hex 16")
    if role() == "chief" and secret is None and not is_loopback(os.environ[ENV_IP]):
        raise ConfigError(f"the chief would serve the oracle on {address()}, which other "
                          f"machines can reach, with no token; set {ENV_TOKEN} to the same "
                          "secret for the chief and every worker (e.g. export "
                          f"{ENV_TOKEN}=$(openssl rand -hex 16)), or leave --oracle out to "
                          f"serve on {DEFAULT_HOST} only")
    return role()


def parse_oracle(text: str) -> tuple[str, str]:
    """(host, port) of ``--oracle``: HOST:PORT, or a bare PORT on 127.0.0.1."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--oracle '{text}' is not HOST:PORT or PORT (e.g. "
                          f"{DEFAULT_HOST}:{DEFAULT_PORT}, or {DEFAULT_PORT} for "
                          f"{DEFAULT_HOST}:{DEFAULT_PORT})")
    return host, port


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (127.0.0.0/8, ::1, localhost)."""
    name = host.strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: other machines may reach it
        return False


def token() -> str | None:
    """The shared secret from TFAPP_ORACLE_TOKEN; None when unset or empty."""
    return os.environ.get(ENV_TOKEN) or None


def address() -> str:
    return f"{os.environ[ENV_IP]}:{os.environ[ENV_PORT]}"


def role() -> str:
    if ENV_IP not in os.environ:
        return "local"
    return "chief" if serves_oracle() else "worker"


def serves_oracle() -> bool:
    """Whether this tuner process is the tuning chief, the one that serves the oracle (not
    ``runtime.is_chief``: the chief of a training cluster, from TF_CONFIG)."""
    return ENV_IP in os.environ and "chief" in os.environ.get(ENV_ID, "")


# -- worker side ---------------------------------------------------------------------------

class _CallDetails(collections.namedtuple(
        "_CallDetails", "method timeout metadata credentials wait_for_ready compression"),
        grpc.ClientCallDetails):
    """grpc.ClientCallDetails is an interface with no constructor of its own."""


class _SendMetadata(grpc.UnaryUnaryClientInterceptor):
    """Adds this worker's token, id and nonce to every call on a channel."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(_CallDetails(
            details.method, details.timeout, (*(details.metadata or ()), *self.metadata),
            details.credentials, details.wait_for_ready, details.compression), request)


def worker_channel(channel: grpc.Channel | None = None) -> grpc.Channel:
    """``channel`` (a new one to the chief if None) sending this worker's metadata."""
    metadata = [(_MD_WORKER, os.environ[ENV_ID]), (_MD_NONCE, _NONCE)]
    if token() is not None:
        metadata.append((_MD_TOKEN, token()))
    return grpc.intercept_channel(channel or grpc.insecure_channel(address()),
                                  _SendMetadata(tuple(metadata)))


def route_client(client: Any) -> None:
    """Send the calls of KerasTuner's oracle client (a worker's ``tuner.oracle``) with this
    worker's metadata. Where this KerasTuner's client cannot be rerouted its calls carry
    none: fine without a token (duplicate ids are still caught by ``wait_for_chief``),
    one line with one."""
    channel = grpc.insecure_channel(address())
    if compat.route_oracle_client(client, worker_channel(channel)):
        return
    channel.close()
    if token() is not None:
        raise ConfigError(f"{ENV_TOKEN} is set but this KerasTuner's oracle client cannot send "
                          "it (tfapp does that on keras-tuner 1.4); install keras-tuner 1.4, or "
                          f"serve the chief on {DEFAULT_HOST} without a token")


def refusal(err: BaseException) -> ConfigError | None:
    """The one line for a call the chief refused to this worker (its token, or its id
    held by another process); None for any other error."""
    code = err.code() if isinstance(err, grpc.RpcError) and hasattr(err, "code") else None
    if code == grpc.StatusCode.UNAUTHENTICATED:
        state = "not set" if token() is None else "not the chief's"
        return ConfigError(f"the tuning chief at {address()} refused this worker: {ENV_TOKEN} "
                           f"is {state}; set it to the token the chief was started with")
    if code == grpc.StatusCode.ALREADY_EXISTS:
        tuner_id = os.environ[ENV_ID]
        shown = tuner_id.removeprefix("tuner-")
        return ConfigError(f"--worker {shown}: another worker process with this id is alive "
                           f"({err.details()}); give each worker its own --worker ID (a "
                           "restarted worker may reuse its id once the old one has been "
                           "silent for tune.worker_timeout_s)")
    return None


def heartbeat_call(channel: grpc.Channel) -> Callable[..., Any]:
    """The chief's heartbeat method on ``channel``: called with a worker id (bytes), it
    tells the chief that worker is alive. The call carries the metadata the channel sends
    (``worker_channel``), none on a plain one."""
    return channel.unary_unary(f"/{_HEARTBEAT_SERVICE}/{_HEARTBEAT_METHOD}")


def wait_for_chief(timeout_s: float) -> None:
    """Return once the chief's oracle answers at KERASTUNER_ORACLE_IP:PORT and has taken
    this worker (its token and id); one line if it does not answer within ``timeout_s``
    (workers may start before the chief, so they wait) or refuses it."""
    raw = grpc.insecure_channel(address())
    try:
        grpc.channel_ready_future(raw).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        raise ConfigError(f"no tuning chief answers at {address()} after {timeout_s:.0f} s; "
                          f"start it first (python -m tfapp.tune ... --chief --oracle "
                          f"{address()}) or fix --oracle") from None
    try:
        # A first heartbeat: a wrong token or an id in use is one line now, not a
        # traceback from KerasTuner's client later.
        heartbeat_call(worker_channel(raw))(os.environ[ENV_ID].encode(), timeout=timeout_s)
    except grpc.RpcError as err:
        refused = refusal(err)
        if refused is not None:
            raise refused from None
        # Anything else (e.g. KerasTuner's own chief has no heartbeats) is left to the
        # oracle calls.
    finally:
        raw.close()


def start_heartbeat(worker_timeout_s: float) -> threading.Event:
    """Tell the chief every ``worker_timeout_s / 6`` seconds that this worker is alive, from
    a daemon thread, until the returned event is set (or the process ends)."""
    tuner_id = os.environ[ENV_ID].encode()
    raw = grpc.insecure_channel(address())
    beat = heartbeat_call(worker_channel(raw))
    every = max(0.5, worker_timeout_s / 6)
    stop = threading.Event()

    def loop() -> None:
        while True:
            try:
                beat(tuner_id, timeout=every)
            except grpc.RpcError:  # chief busy or gone: the next beat tries again
                pass
            if stop.wait(every):
                raw.close()
                return

    threading.Thread(target=loop, name="tfapp-heartbeat", daemon=True).start()
    return stop


# -- chief side ----------------------------------------------------------------------------

def serve_oracle(oracle, worker_timeout_s: float = 120.0, poll_seconds: float = 0.5) -> bool:
    """Serve ``oracle`` to the workers until the search is over and every worker has been
    told so (KerasTuner's ``start_server``, polling twice a second instead of every 20 s),
    handing the trial of a worker silent for ``worker_timeout_s`` to the next worker.

    Returns False, having served nothing, where this KerasTuner's service cannot be reached
    (``compat.oracle_server_parts``): the caller then runs KerasTuner's own chief, which
    checks no token (so one is refused) and no worker ids."""
    workers = Workers(worker_timeout_s)
    # Asking for a trial also says "alive": a worker killed before its first heartbeat
    # got through is still noticed.
    parts = compat.oracle_server_parts(
        lambda request, context: workers.heard(request.tuner_id))
    if parts is None:
        if token() is not None:
            raise ConfigError(f"{ENV_TOKEN} is set but this KerasTuner's chief cannot check it "
                              "(tfapp does that on keras-tuner 1.4); install keras-tuner 1.4, "
                              f"or serve on {DEFAULT_HOST} without a token")
        return False
    servicer_class, add_servicer_to_server, exit_chief = parts
    servicer = servicer_class(oracle)
    server = build_server(workers, lambda server: add_servicer_to_server(servicer, server))
    try:
        bound = server.add_insecure_port(address())
    except RuntimeError:  # newer grpc raises where older ones return 0
        bound = 0
    if not bound:
        raise ConfigError(f"the chief cannot listen on {address()} (port in use?); choose "
                          "another --oracle port")
    server.start()
    print(f"chief: serving the oracle on {address()}"
          + (" (workers must send TFAPP_ORACLE_TOKEN)" if token() else ""), flush=True)
    try:
        while not (servicer.stop_triggered and exit_chief(oracle)):
            time.sleep(poll_seconds)
            for tuner_id, silent in workers.silent():
                trial_id = compat.requeue_trial(oracle, tuner_id)
                if trial_id is not None:
                    print(f"chief: worker {tuner_id} sent no heartbeat for {silent:.0f} s "
                          f"(killed or hung?); trial {trial_id} goes to the next worker",
                          flush=True)
    finally:
        server.stop(grace=2)
    return True


def build_server(workers: Workers, add_services: Callable[[grpc.Server], None]
                 ) -> grpc.Server:
    """The chief's gRPC server (not yet bound): the heartbeat method, what
    ``add_services`` adds, and the guard (token, worker ids) in front of every call."""
    # Oracle methods are synchronized anyway; more threads keep heartbeats from queueing
    # behind a slow oracle call.
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         interceptors=[_Guard(token(), workers)])
    add_services(server)

    def beat(request: bytes, context: Any) -> bytes:
        workers.heard(request.decode())
        return b""

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        _HEARTBEAT_SERVICE, {_HEARTBEAT_METHOD: grpc.unary_unary_rpc_method_handler(beat)}),))
    return server


class _Guard(grpc.ServerInterceptor):
    """Before every call: the token (when the chief has one), then the caller's worker id
    and nonce (``Workers.heard``)."""

    def __init__(self, secret: str | None, workers: Workers) -> None:
        self._secret = secret.encode() if secret is not None else None
        self._workers = workers

    def intercept_service(self, continuation, details):
        metadata = dict(details.invocation_metadata or ())
        if self._secret is not None and not hmac.compare_digest(
                str(metadata.get(_MD_TOKEN, "")).encode(), self._secret):
            return _refuse(grpc.StatusCode.UNAUTHENTICATED, f"wrong or missing {ENV_TOKEN}")
        tuner_id = metadata.get(_MD_WORKER)
        if tuner_id:
            held = self._workers.heard(tuner_id, metadata.get(_MD_NONCE))
            if held is not None:
                return _refuse(grpc.StatusCode.ALREADY_EXISTS,
                               f"the chief heard from another process as {tuner_id} "
                               f"{held:.0f} s ago")
        return continuation(details)


def _refuse(code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    def refuse(request: Any, context: grpc.ServicerContext) -> None:
        context.abort(code, details)

    return grpc.unary_unary_rpc_method_handler(refuse)


class Workers:
    """Which process holds each worker id and when it last called (gRPC threads write,
    the serve loop reads). ``clock`` returns seconds; tests pass their own."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, str | None]] = {}

    def heard(self, tuner_id: str, nonce: str | None = None) -> float | None:
        """Record a call from ``tuner_id`` (from the process ``nonce`` names, if sent).
        Returns None, or, when another process (another nonce) holds the id and was heard
        from within the timeout, the seconds since then: that call is refused."""
        now = self._clock()
        with self._lock:
            last, holder = self._last.get(tuner_id, (None, None))
            if (last is not None and nonce and holder and nonce != holder
                    and now - last <= self.timeout_s):
                return now - last
            self._last[tuner_id] = (now, nonce or holder)
        return None

    def silent(self) -> list[tuple[str, float]]:
        """Workers silent for over the timeout, each reported once (until heard again)."""
        now = self._clock()
        with self._lock:
            gone = [(t, now - last) for t, (last, _) in self._last.items()
                    if now - last > self.timeout_s]
            for tuner_id, _ in gone:
                del self._last[tuner_id]
        return gone
