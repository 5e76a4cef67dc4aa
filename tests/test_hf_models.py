"""``model.hub_handle: hf:ORG/NAME[@REV]``: huggingface_hub resolves the id against a real
cache laid out on disk (blobs, snapshots named by commit, refs), tfapp converts the
snapshot once; refusals are one line. No network: offline runs, and a local HTTP server
that answers as the Hub does for the errors huggingface_hub maps (unknown or private id,
unknown revision, gated model)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import tfapp  # noqa: F401  (selects tf-keras before TensorFlow is imported)

import numpy as np
import pytest
import tensorflow_hub as hub
from test_hub_convert import encoder_inputs, numpy_bert, write_hf_checkpoint

REPO, COMMIT = "acme/tiny-bert", "3f1c2a9d8e7b6a5c4d3e2f1a0b9c8d7e6f5a4b3c"


def lay_out_hf_cache(hf_home: Path, src: Path, repo_id: str, commit: str,
                     refs: tuple[str, ...] = ("main",)) -> Path:
    """Place checkpoint files the way huggingface_hub stores a download: content in
    ``blobs/<sha256>``, ``snapshots/<commit>/<file>`` a relative symlink to its blob,
    ``refs/<branch>`` holding the commit."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp / "hf"), TFAPP_CACHE_DIR=str(tmp / "tfapp-cache"),
               PYTHONPATH=os.pathsep.join([str(Path(tfapp.__file__).parents[1]),
                                           env.get("PYTHONPATH", "")]), **extra)
    return env


def _resolve(tmp: Path, handle: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfapp.hub", "resolve", handle],
                          capture_output=True, text=True, env=_env(tmp, **env), timeout=300)


# Each handle's resolution or refusal in one child process (huggingface_hub reads HF_* at import).
_REFUSALS = """
import sys
from tfapp.errors import ConfigError
from tfapp.hub.handles import resolve_hub_handle
for handle in sys.argv[1:]:
    try:
        print(handle, "=>", resolve_hub_handle(handle))
    except ConfigError as err:
        print(handle, "=>", err)
"""


def _refusals(tmp: Path, handles: list[str], **env: str) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-c", _REFUSALS, *handles], capture_output=True,
                          text=True, env=_env(tmp, **env), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if " => " in ln]
    assert len(lines) == len(handles), proc.stdout
    return dict(ln.split(" => ", 1) for ln in lines)


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf")
    weights = write_hf_checkpoint(tmp / "checkpoint", seed=7)
    lay_out_hf_cache(tmp / "hf", tmp / "checkpoint", REPO, COMMIT)
    return tmp, weights


def test_an_hf_id_resolves_offline_and_converts_once(hf_cache):
    import huggingface_hub

    tmp, weights = hf_cache
    # huggingface_hub itself accepts the layout as its cache.
    [info] = huggingface_hub.scan_cache_dir(tmp / "hf" / "hub").repos
    assert info.repo_id == REPO and {r.commit_hash for r in info.revisions} == {COMMIT}

    proc = _resolve(tmp, f"hf:{REPO}", HF_HUB_OFFLINE="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    module = tmp / "tfapp-cache" / "hub" / "hf" / f"acme--tiny-bert-{COMMIT}-f2"
    assert f"encoder: {module / 'encoder'}" in proc.stdout
    assert f"preprocessor: {module / 'preprocessor'}" in proc.stdout
    meta = json.loads((module / "tfapp_hub.json").read_text())
    assert meta["converted_from"]["source"].endswith(f"snapshots/{COMMIT}")

    # The converted encoder computes the checkpoint's BERT.
    config = json.loads((tmp / "checkpoint" / "config.json").read_text())
    ids, mask, types = encoder_inputs()
    got = hub.load(str(module / "encoder"))(
        {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}, training=False)
    want = numpy_bert(weights, config, ids, mask, types)
    np.testing.assert_allclose(got["sequence_output"].numpy(), want["sequence_output"],
                               atol=1e-4, rtol=0)

    # The same commit by branch and by hash is the same conversion, reused, not redone.
    stamp = (module / "tfapp_hub.json").stat().st_mtime_ns
    again = _refusals(tmp, [f"hf:{REPO}@main", f"hf:{REPO}@{COMMIT}"], HF_HUB_OFFLINE="1")
    assert set(again.values()) == {str((str(module / "encoder"), str(module / "preprocessor")))}
    assert (module / "tfapp_hub.json").stat().st_mtime_ns == stamp


def test_offline_refusals_are_one_line(hf_cache, tmp_path):
    tmp, _ = hf_cache
    got = _refusals(tmp, ["hf:acme/missing", f"hf:{REPO}@v2", "hf:no-slash", f"hf:{REPO}@"],
                    HF_HUB_OFFLINE="1")
    assert "is not in the Hugging Face cache" in got["hf:acme/missing"]
    assert "HF_HUB_OFFLINE is set" in got["hf:acme/missing"]
    assert "not in the Hugging Face cache" in got[f"hf:{REPO}@v2"]
    assert "is not a Hugging Face model id; write hf:ORG/NAME" in got["hf:no-slash"]
    assert "is not a Hugging Face model id" in got[f"hf:{REPO}@"]
    assert all("\n" not in message for message in got.values())
    # Through the command: exit 2, one line, no traceback.
    proc = _resolve(tmp, "hf:acme/missing", HF_HUB_OFFLINE="1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "fetch it once with network (unset HF_HUB_OFFLINE), or copy a cache that has it")


class _Hub(http.server.BaseHTTPRequestHandler):
    """Answers as huggingface.co does for the errors huggingface_hub turns into its own
    exception types (the X-Error-Code header)."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if "/acme/private" in self.path:
            status, code, message = 401, "RepoNotFound", "Repository not found"
        elif "/acme/gated" in self.path:
            status, code, message = 403, "GatedRepo", "Access to model acme/gated is restricted"
        else:
            status, code, message = 404, "RevisionNotFound", "Invalid rev id: v9"
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_hub_answers_become_one_line(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = _refusals(tmp_path, ["hf:acme/private", "hf:acme/gated", "hf:acme/tiny-bert@v9"],
                        HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert "no such model on the Hugging Face Hub, or it is private" in got["hf:acme/private"]
    assert "set HF_TOKEN" in got["hf:acme/private"]
    assert "is a gated model: accept its terms on https://huggingface.co/acme/gated" \
        in got["hf:acme/gated"]
    assert "the model has no revision 'v9'" in got["hf:acme/tiny-bert@v9"]
    # Nothing reachable at all: the network is named, not a stack of retries.
    closed = _refusals(tmp_path, ["hf:acme/tiny-bert"], HF_ENDPOINT="http://127.0.0.1:9")
    assert "the Hugging Face Hub cannot be reached and the model is not in the cache" \
        in closed["hf:acme/tiny-bert"]
