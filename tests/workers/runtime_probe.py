"""Subprocess probe: resolve the runtime from overrides and print what it chose as JSON.

Usage: python tests/workers/runtime_probe.py key=value ...
"""

import json
import sys

import tfapp  # noqa: F401
from tfapp import runtime
from tfapp.config import load_config

cfg = load_config(None, sys.argv[1:])
rt = runtime.setup(cfg.runtime)
print(json.dumps({"kind": rt.kind, "replicas": rt.num_replicas, "precision": rt.precision,
                  "global_batch": rt.global_batch_size(cfg.data.batch_size),
                  "strategy": type(rt.strategy).__name__, "reason": rt.reason}))
