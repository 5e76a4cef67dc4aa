"""Turn ``model.hub_handle`` into an encoder handle and its matching preprocessor.

``resolve_hub_handle(handle) -> (encoder_handle, preprocessor_handle_or_empty)``:

* ``builtin:tiny`` -- a tiny BERT (2 layers, hidden 128, 2 heads, intermediate 256)
  with a WordPiece vocab learned from the shipped demo training texts, built once
  into ``$TFAPP_CACHE_DIR/hub/tiny-bert-<hash>`` (default ``~/.cache/tfapp``) and
  reused. The hash covers the build parameters, the corpus bytes and the module
  format, so a change rebuilds instead of reusing a stale module. The build runs in a
  subprocess (it must not reseed, change the precision policy of, or create
  variables in the caller's strategy scope), under a file lock so concurrent
  processes (several workers, parallel tests) build it once; the directory appears
  atomically.
* ``builtin:tiny-cased`` -- the same shape, cased, with a WordPiece vocab of the NER
  demo's sentences and the demo reviews (``configs/ner.yaml``'s encoder), built the same
  way into ``tiny-cased-bert-<hash>``;
* ``hf:ORG/NAME[@REVISION]`` -- a Hugging Face BERT-family model id, fetched by
  huggingface_hub (``tfapp.hub.hf_models``: its cache, ``HF_HUB_OFFLINE``, ``HF_TOKEN``)
  and converted once into ``$TFAPP_CACHE_DIR/hub/hf/ORG--NAME-<commit>-f<format>``;
* a local directory written by ``python -m tfapp.hub build-bert`` (has
  ``tfapp_hub.json``) -> its ``encoder/`` and ``preprocessor/``; the ``encoder/``
  directory of such a build finds its sibling preprocessor the same way;
* any other local SavedModel directory -> itself, preprocessor "";
* ``https://`` (tfhub.dev, Kaggle), ``gs://`` and other URLs pass through unchanged
  to tensorflow_hub, which downloads and caches them (honouring ``TFHUB_CACHE_DIR``);
  the preprocessor is "" -- set ``model.hub_preprocessor`` to the matching one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tfapp.cachedir import cache_dir, usable_cache_dir
from tfapp.config import ConfigError
from tfapp.demo import DEMO_DIR
from tfapp.hub.builder import BuildParams
from tfapp.hub.hf_models import HF_PREFIX, fetch_hf_snapshot, parse_hf_handle
from tfapp.models.bert_config import BertConfig

__all__ = ["BUILTIN_MODULES", "builtin_module_dir", "cache_dir", "ensure_builtin", "ensure_hf",
           "hf_module_dir", "resolve_hub_handle"]

HUB_METADATA_FILE = "tfapp_hub.json"  # same name as tfapp.hub.export (no TF import here)
# Bump when the exported module layout changes, so cached builds are rebuilt. 2: the
# encoder's Keras object is saved without tf-keras's own layer traces (format 1 modules
# still load, ~1-2.5 CPU-s slower each time).
MODULE_FORMAT = 2
BUILTIN_PREFIX = "builtin:"

# name -> (build parameters, corpus files inside tfapp/demo, their text column)
BUILTIN_MODULES: dict[str, tuple[BuildParams, str, str]] = {
    "tiny": (BuildParams(BertConfig(vocab_size=3000, hidden_size=128, num_layers=2,
                                    num_heads=2, intermediate_size=256,
                                    max_position_embeddings=512, dropout=0.1,
                                    attention_dropout=0.1),
                         lower_case=True, seed=0, seq_length=128),
             ("reviews_train.csv",), "text"),
    # the tagger's: names keep their capitals, and an unseen name is read as word pieces
    "tiny-cased": (BuildParams(BertConfig(vocab_size=4000, hidden_size=128, num_layers=2,
                                          num_heads=2, intermediate_size=256,
                                          max_position_embeddings=512, dropout=0.1,
                                          attention_dropout=0.1),
                               lower_case=False, seed=0, seq_length=128),
                   ("ner_train.conll", "reviews_train.csv"), "text"),
}


def hub_cache_dir() -> Path:
    """Where tensorflow_hub caches downloaded modules: ``$TFHUB_CACHE_DIR``, else inside
    tfapp's cache root (not tensorflow_hub's default, a world-writable temp folder)."""
    return Path(os.environ.get("TFHUB_CACHE_DIR") or cache_dir() / "tfhub_modules")


def _builtin_spec(name: str) -> tuple[BuildParams, list[Path], str]:
    if name not in BUILTIN_MODULES:
        raise ConfigError(f"model.hub_handle: '{BUILTIN_PREFIX}{name}' is unknown; builtin "
                          f"modules: {', '.join(BUILTIN_PREFIX + n for n in BUILTIN_MODULES)}")
    params, names, column = BUILTIN_MODULES[name]
    corpus = [DEMO_DIR / file for file in names]
    missing = [path for path in corpus if not path.is_file()]
    if missing:
        raise ConfigError(f"the demo corpus {missing[0]} for '{BUILTIN_PREFIX}{name}' is missing; "
                          "reinstall tfapp (it ships tfapp/demo/)")
    return params, corpus, column


def builtin_module_dir(name: str) -> Path:
    """Cache directory of a builtin module (whether or not it is built yet)."""
    params, corpus, column = _builtin_spec(name)
    digest = hashlib.sha256()
    digest.update(f"format={MODULE_FORMAT};column={column};".encode())
    digest.update(params.to_json().encode())
    for path in corpus:
        digest.update(path.read_bytes())
    return cache_dir() / "hub" / f"{name}-bert-{digest.hexdigest()[:12]}"


def _is_complete(path: Path) -> bool:
    return (path / HUB_METADATA_FILE).is_file()


@contextlib.contextmanager
def _file_lock(path: Path, timeout_s: float = 900.0) -> Iterator[None]:
    """An exclusive advisory lock (POSIX flock); a no-op where fcntl does not exist."""
    try:
        import fcntl
    except ImportError:  # Windows: the atomic rename alone keeps the cache consistent
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(f"timed out waiting for {path} (another process is "
                                      "building the module); delete it if it is stale"
                                      ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_hub_command(args: list[str], what: str) -> None:
    """``python -m tfapp.hub ARGS`` in a child process: building or converting creates
    variables and must not reseed, change the precision policy of, or create variables in
    the caller's strategy scope. A failure is one ``ConfigError`` line."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    # The build needs no accelerator or cluster: keep the child off the caller's GPUs and
    # out of its multi-worker cluster.
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.pop("TF_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "tfapp.hub", *args, "--quiet"],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit code {proc.returncode}"
        raise ConfigError(f"{what} failed: {last}")


def _build_in_subprocess(params: BuildParams, corpus: list[Path], column: str, out: Path
                         ) -> None:
    bert = params.bert
    _run_hub_command(
        ["build-bert", "--corpus", *map(str, corpus), "--text-column", column,
         "--out", str(out), "--layers", str(bert.num_layers), "--hidden", str(bert.hidden_size),
         "--heads", str(bert.num_heads), "--intermediate", str(bert.intermediate_size),
         "--max-positions", str(bert.max_position_embeddings),
         "--vocab-size", str(bert.vocab_size),
         "--lower-case" if params.lower_case else "--no-lower-case",
         # build-bert's one --dropout sets both rates (equal in every builtin module)
         "--seed", str(params.seed), "--dropout", str(bert.dropout),
         "--seq-length", str(params.seq_length),
         *(["--whole-words"] if params.whole_words else [])],
        f"building the builtin BERT module into {out}")


def _build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(final)`` unless a complete module is there: under a file lock, so
    concurrent processes (workers, parallel tests) build it once; the build itself
    writes atomically."""
    if _is_complete(final):
        return final
    usable_cache_dir()  # building writes there: a cache that cannot be written is one line
    with _file_lock(final.parent / f".{final.name}.lock"):
        if not _is_complete(final):  # another process may have built it while we waited
            if final.exists():  # present but incomplete (not written by tfapp): rebuild
                shutil.rmtree(final, ignore_errors=True)
            build(final)
    if not _is_complete(final):
        raise ConfigError(f"building {final} left no module there")
    return final


def ensure_builtin(name: str) -> Path:
    """Build the builtin module ``name`` once (cached, atomic, race-safe); its directory."""
    final = builtin_module_dir(name)
    if _is_complete(final):
        return final
    params, corpus, column = _builtin_spec(name)
    return _build_once(final, lambda out: _build_in_subprocess(params, corpus, column, out))


def hf_module_dir(repo_id: str, commit: str) -> Path:
    """Where the conversion of Hugging Face ``repo_id`` at ``commit`` is cached."""
    return cache_dir() / "hub" / "hf" / f"{repo_id.replace('/', '--')}-{commit}-f{MODULE_FORMAT}"


def ensure_hf(handle: str) -> Path:
    """Fetch ``hf:ORG/NAME[@REV]`` (huggingface_hub's cache) and convert it once into
    tfapp's cache, keyed by the commit the revision resolved to: a branch that moves is
    converted again, a pinned commit never is."""
    repo_id, revision = parse_hf_handle(handle)
    snapshot = fetch_hf_snapshot(repo_id, revision)
    final = hf_module_dir(repo_id, snapshot.name)  # huggingface_hub names it by commit
    return _build_once(final, lambda out: _run_hub_command(
        ["convert", "--from", str(snapshot), "--out", str(out)], f"converting {handle}"))


def _from_tfapp_dir(path: Path) -> tuple[str, str] | None:
    """(encoder, preprocessor) for a tfapp build directory or its encoder/ subdirectory."""
    for root in (path, path.parent):
        meta_file = root / HUB_METADATA_FILE
        if not meta_file.is_file():
            continue
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ConfigError(f"{meta_file} is unreadable ({err}); rebuild the module with "
                              "`python -m tfapp.hub build-bert`") from None
        encoder = root / meta.get("encoder", "encoder")
        if root == path.parent and encoder.resolve() != path.resolve():
            continue
        pre = meta.get("preprocessor", "")
        return str(encoder), str(root / pre) if pre else ""
    return None


def resolve_hub_handle(handle: str) -> tuple[str, str]:
    """``(encoder_handle, preprocessor_handle_or_empty)`` for ``model.hub_handle``.

    See the module docstring for the handle kinds. Raises ``ConfigError`` (one line)
    for an empty handle, an unknown builtin or a local path that does not exist.
    """
    handle = (handle or "").strip()
    if not handle:
        raise ConfigError("model.hub_handle is empty; give a TF-Hub URL, a local SavedModel "
                          "directory, a gs:// path or builtin:tiny")
    if handle.startswith((BUILTIN_PREFIX, HF_PREFIX)):
        built = (ensure_builtin(handle[len(BUILTIN_PREFIX):]) if handle.startswith(BUILTIN_PREFIX)
                 else ensure_hf(handle))
        resolved = _from_tfapp_dir(built)
        assert resolved is not None  # _build_once checked tfapp_hub.json
        return resolved
    if "://" in handle:
        if handle.lower().startswith("http://"):
            raise ConfigError(f"model.hub_handle: '{handle}' is plain http (anyone on the path "
                              "could swap the weights); use its https:// address")
        # tensorflow_hub's own default cache is a shared /tmp folder another local user
        # could fill first; tfapp's cache is the user's own.
        os.environ.setdefault("TFHUB_CACHE_DIR", str(hub_cache_dir()))
        return handle, ""
    path = Path(handle).expanduser()
    if not path.exists():
        raise ConfigError(f"model.hub_handle: '{handle}' does not exist; give a TF-Hub URL, a "
                          "local SavedModel directory, a gs:// path, builtin:tiny or hf:ORG/NAME")
    return _from_tfapp_dir(path) or (str(path), "")
