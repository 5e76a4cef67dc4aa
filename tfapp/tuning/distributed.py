"""Distributed tuning: one chief process serves the oracle, worker processes run trials.

KerasTuner reads three environment variables: ``KERASTUNER_TUNER_ID`` ("chief" for the
oracle server, any other unique id for a worker), ``KERASTUNER_ORACLE_IP`` and
``KERASTUNER_ORACLE_PORT`` (where the chief listens). ``--chief`` / ``--worker ID`` with
``--oracle HOST:PORT`` set them, so each process is started by one command.
"""

from __future__ import annotations

import os
import time

from tfapp.config import ConfigError

ENV_ID, ENV_IP, ENV_PORT = "KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"


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


def serve_oracle(oracle, poll_seconds: float = 0.5) -> None:
    """Serve ``oracle`` to the workers until the search is over and every worker has been
    told so (KerasTuner's ``start_server``, polling twice a second instead of every 20 s)."""
    from concurrent import futures

    import grpc
    from keras_tuner.src import protos
    from keras_tuner.src.distribute import oracle_chief

    address = f"{os.environ[ENV_IP]}:{os.environ[ENV_PORT]}"
    # One thread: the oracle's methods are synchronized anyway.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    servicer = oracle_chief.OracleServicer(oracle)
    protos.get_service_grpc().add_OracleServicer_to_server(servicer, server)
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
        while not (servicer.stop_triggered and oracle_chief.exit_chief(oracle)):
            time.sleep(poll_seconds)
    finally:
        server.stop(grace=2)
