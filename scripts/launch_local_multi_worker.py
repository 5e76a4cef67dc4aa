"""Launch a local N-worker MultiWorkerMirrored training run (optionally fed by tf.data service).

    python scripts/launch_local_multi_worker.py --workers 2 -- --config configs/classifier.yaml
    python scripts/launch_local_multi_worker.py --workers 2 --data-service 2 --listen-all -- \\
        --config configs/classifier_local.yaml data.service.processing_mode=distributed_epoch

Everything after ``--`` is passed to ``python -m tfapp.train`` unchanged on every worker,
plus ``runtime.strategy=multi_worker`` (and ``data.service.address=...`` with
``--data-service``). Each worker gets its own ``TF_CONFIG`` naming all workers on
127.0.0.1, exactly what a cluster scheduler gives each host (docs/scale_out.md shows the
same command across real hosts). Worker 0 is the chief: it alone writes the run directory.

127.0.0.1 is only the address the processes advertise: TensorFlow's gRPC servers (each
worker's, and the tf.data service's) listen on every interface with no authentication.
``--data-service`` therefore needs ``--listen-all`` (passed on to ``tfapp.data_service``);
run this where a firewall keeps those ports closed to other hosts.

Output lines are prefixed ``[worker i]``. The launcher exits with 0 when every worker
finished; otherwise with the first failing worker's exit code -- after giving the others
``--grace`` seconds to stop on their own (TF's coordination service makes them fail when a
peer disappears), then killing what is left, so a dead worker never leaves a hung run.
SIGTERM/SIGINT to the launcher is forwarded to every worker (they save a backup and exit
143; running the same command again resumes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tf_config(ports: list[int], index: int, host: str = "127.0.0.1") -> str:
    """The TF_CONFIG of worker ``index`` in a cluster of workers on ``host``."""
    cluster = {"worker": [f"{host}:{p}" for p in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def _pump(proc: subprocess.Popen, prefix: str) -> threading.Thread:
    def run():
        for line in proc.stdout:
            sys.stdout.write(f"{prefix} {line}")
            sys.stdout.flush()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def start_data_service(workers: int) -> tuple[subprocess.Popen, str]:
    """``python -m tfapp.data_service`` on a free port; returns it and its address."""
    proc = subprocess.Popen([sys.executable, "-m", "tfapp.data_service", "--workers",
                             str(workers), "--port", str(free_ports(1)[0]), "--listen-all"],
                            cwd=REPO,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.time() + 120
    for line in proc.stdout:
        sys.stdout.write(f"[data service] {line}")
        if line.startswith("use: data.service.address="):
            _pump(proc, "[data service]")
            return proc, line.split("=", 1)[1].strip()
        if time.time() > deadline:
            break
    proc.kill()
    raise SystemExit("tfapp: error: the tf.data service did not start; see its output above")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run python -m tfapp.train as N MultiWorkerMirrored workers on this "
                    "machine. Put the train arguments after --.")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--data-service", type=int, default=0, metavar="N",
                        help="also start a tf.data service with N workers and feed training "
                             "from it (default 0: each worker reads its own shard)")
    parser.add_argument("--listen-all", action="store_true",
                        help="required with --data-service: its servers listen on every "
                             "interface with no authentication (python -m tfapp.data_service "
                             "--help)")
    parser.add_argument("--grace", type=float, default=60.0,
                        help="seconds the other workers get to stop after one fails "
                             "(default 60), then they are killed")
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="kill the whole run after this many seconds (default 0: none)")
    parser.add_argument("train_args", nargs=argparse.REMAINDER,
                        help="-- then the arguments of python -m tfapp.train")
    args = parser.parse_args(argv)
    train_args = [a for a in args.train_args if a != "--"] if args.train_args[:1] == ["--"] \
        else args.train_args
    if args.workers < 1:
        parser.error("--workers must be at least 1")

    if args.data_service and not args.listen_all:
        print("tfapp: error: --data-service starts TensorFlow's tf.data servers, which listen "
              "on every network interface with no authentication; add --listen-all on a "
              "machine whose firewall keeps their ports closed to other hosts",
              file=sys.stderr)
        return 2

    service = None
    extra = ["runtime.strategy=multi_worker"]
    if args.data_service:
        service, address = start_data_service(args.data_service)
        extra.append(f"data.service.address={address}")

    ports = free_ports(args.workers)
    procs: list[subprocess.Popen] = []
    for i in range(args.workers):
        proc = subprocess.Popen([sys.executable, "-m", "tfapp.train", *train_args, *extra],
                                cwd=os.getcwd(), env=_env(TF_CONFIG=tf_config(ports, i)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(f"[launcher] worker {i}: pid {proc.pid}, TF_CONFIG={tf_config(ports, i)}",
              flush=True)
        procs.append(proc)
    pumps = [_pump(p, f"[worker {i}]") for i, p in enumerate(procs)]

    def forward(signum, frame):  # noqa: ARG001
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    started, failed_at, code = time.time(), None, 0
    try:
        while any(p.poll() is None for p in procs):
            for i, p in enumerate(procs):
                if p.returncode not in (None, 0) and failed_at is None:
                    failed_at, code = time.time(), p.returncode
                    print(f"[launcher] worker {i} exited with {p.returncode}; waiting up to "
                          f"{args.grace:.0f} s for the others to stop", flush=True)
            late = failed_at is not None and time.time() - failed_at > args.grace
            if late or (args.timeout and time.time() - started > args.timeout):
                print("[launcher] killing the workers still running", flush=True)
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                code = code or 124
            time.sleep(0.2)
    finally:
        for t in pumps:
            t.join(timeout=5)
        if service is not None:
            service.send_signal(signal.SIGTERM)
            try:
                service.wait(30)
            except subprocess.TimeoutExpired:
                service.kill()
    codes = [p.returncode for p in procs]
    code = code or next((c for c in codes if c), 0)
    print(f"[launcher] worker exit codes {codes}; took {time.time() - started:.0f} s",
          flush=True)
    return code if code >= 0 else 128 - code  # killed by signal N -> 128 + N, as shells do


if __name__ == "__main__":
    sys.exit(main())
