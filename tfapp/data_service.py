"""Run a tf.data service: one dispatcher and N workers in this process.

    python -m tfapp.data_service --workers 2 --port 5050 --listen-all

prints the dispatcher address (``grpc://127.0.0.1:5050``) and serves until Ctrl-C or
SIGTERM. Point training at it with ``data.service.address=grpc://127.0.0.1:5050``: the
input pipeline (tokenisation included) then runs in the workers, and with
``data.service.processing_mode=distributed_epoch`` every example is produced once per
epoch across all workers.

What binds where: TensorFlow's tf.data servers always listen on every interface
(``0.0.0.0``/``[::]``: the dispatcher on ``--port``, each worker on a free port) with no
authentication, and have no bind-address option; whoever reaches a port can register and
run tf.data pipelines (TensorFlow graphs, which can read and write files) as this user.
So nothing starts without ``--listen-all`` (``listen_all=True`` in code): pass it on a
machine whose firewall keeps those ports closed to other hosts. ``--host`` is only the
address ADVERTISED to trainers (on a cluster, one the trainers can reach), never a bind
address: ``127.0.0.1`` does not make the service private.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Sequence
from types import SimpleNamespace

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfapp import cli
from tfapp.config import ConfigError

import click

__all__ = ["LocalDataService", "command", "listen_all_refusal", "main"]


def listen_all_refusal(how: str) -> str:
    """The one-line refusal to start without the acknowledgement ``how`` names."""
    return ("TensorFlow's tf.data servers listen on every network interface with no "
            "authentication (they have no bind address; --host only sets the address "
            "advertised to trainers), so anyone who can reach their ports can run tf.data "
            f"pipelines as this user; pass {how} to start them on a machine whose firewall "
            "keeps those ports closed to other hosts")


class LocalDataService:
    """A dispatcher and ``workers`` worker servers in this process.

    Args:
      workers: number of worker servers.
      port: dispatcher port (0 picks a free one).
      host: address advertised to trainers and the dispatcher (not a bind address: the
        servers listen on every interface whatever it says).
      work_dir: dispatcher journal directory for fault tolerance ("" = none).
      heartbeat_ms: worker heartbeat interval (loopback: short is cheap).
      listen_all: the caller's acknowledgement that the servers listen on every interface
        unauthenticated (see the module docstring); without it nothing starts.
    """

    def __init__(self, workers: int = 2, port: int = 0, host: str = "127.0.0.1",
                 work_dir: str = "", heartbeat_ms: int = 1000, *, listen_all: bool = False):
        # Refused before TensorFlow loads: nothing is bound, nothing is written.
        if not listen_all:
            raise ConfigError(listen_all_refusal("listen_all=True"))
        import tensorflow as tf

        # Workers run the pipelines' graphs, which hold tensorflow-text ops (WordPiece,
        # case folding, trimming); registering them here is what lets a worker run them.
        import tensorflow_text  # noqa: F401

        if workers < 1:
            raise ConfigError(f"--workers {workers}: need at least one worker")
        service = tf.data.experimental.service
        # The workers' ports are chosen now and given to the dispatcher: sharding by file
        # (data.service.processing_mode=file) needs the dispatcher to know its workers.
        ports = _free_ports(workers)
        config = service.DispatcherConfig(
            port=port, work_dir=work_dir or None, fault_tolerant_mode=bool(work_dir),
            worker_addresses=[f"{host}:{p}" for p in ports])
        try:
            self.dispatcher = service.DispatchServer(config)
        except Exception as err:  # e.g. port in use: gRPC's message is a multi-line dump
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ConfigError(f"cannot start the tf.data dispatcher on port {port} "
                              f"({first[:160]}); choose another --port") from None
        self.host = host
        # target is "host:port" of the dispatcher as seen from here.
        self.dispatcher_address = self.dispatcher.target.split("://")[-1]
        self.port = int(self.dispatcher_address.rsplit(":", 1)[1])
        self.worker_ports = ports
        self.workers = [
            service.WorkerServer(service.WorkerConfig(
                dispatcher_address=self.dispatcher_address, port=worker_port,
                worker_address=f"{host}:{worker_port}",
                # Workers learn of finished jobs by heartbeat; a short one lets a worker drop
                # a released job's tasks (and stop) in about a second, not tens of seconds.
                heartbeat_interval_ms=heartbeat_ms))
            for worker_port in ports
        ]

    @property
    def address(self) -> str:
        """What ``data.service.address`` takes."""
        return f"grpc://{self.host}:{self.port}"

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.dispatcher.stop()


def _free_ports(n: int) -> list[int]:
    """``n`` ports free now (held open together, so they differ)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@cli.command(
    "data-service",
    """Start a tf.data service (dispatcher + workers) for tfapp pipelines.

    TensorFlow's servers listen on every interface with no authentication; --listen-all
    acknowledges that.""")
@click.option("--workers", type=int, default=2, show_default=True, help="Worker servers.")
@click.option("--port", type=int, default=5050, show_default=True,
              help="Dispatcher port (0 = any free port).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address ADVERTISED to trainers; not a bind address: the servers listen "
                   "on every interface regardless.")
@click.option("--work-dir", default="",
              help="Dispatcher journal directory (restarts keep jobs); default none.")
@click.option("--listen-all", is_flag=True,
              help="Required: start the servers although they listen on every interface "
                   "(0.0.0.0/[::]) unauthenticated; use it where a firewall keeps the ports "
                   "closed to other hosts.")
def command(args: SimpleNamespace) -> int:
    if not args.listen_all:
        raise ConfigError(listen_all_refusal("--listen-all"))
    service = LocalDataService(args.workers, args.port, args.host, args.work_dir,
                               listen_all=True)
    stop = threading.Event()

    def _on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    print(f"tf.data service: dispatcher {service.address}, {len(service.workers)} worker(s)",
          flush=True)
    ports = ", ".join(map(str, service.worker_ports))
    print(f"listening on all interfaces, unauthenticated: dispatcher port {service.port}, "
          f"workers on ports {ports}", flush=True)
    print(f"use: data.service.address={service.address}", flush=True)
    stop.wait()
    service.stop()
    print("tf.data service stopped", flush=True)
    return 0




def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.data_service")


if __name__ == "__main__":
    sys.exit(main())
