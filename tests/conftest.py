"""Shared test helpers: every test process uses tf-keras as tf.keras, quietly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("WANDB_MODE", "disabled")
# builtin:tiny (the tiny Hub BERT) is built once per test session into a private cache,
# never into the user's ~/.cache/tfapp.
os.environ.setdefault("TFAPP_CACHE_DIR", tempfile.mkdtemp(prefix="tfapp-test-cache-"))

import pytest

REPO = Path(__file__).resolve().parents[1]


def subprocess_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update({"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    env.update(extra)
    return env


def run_python(args: list[str], *, timeout: int = 300, env: dict | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in a fresh interpreter (TensorFlow device setup is per process)."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env or subprocess_env(), cwd=cwd or REPO)


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def repo() -> Path:
    return REPO
