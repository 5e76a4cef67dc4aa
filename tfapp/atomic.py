"""Local files and directories written whole or not at all.

A file: a unique temporary file next to the target, flushed to disk, then renamed over it.
A reader sees the old file or the new one, never half of one; an error (or a kill) while
writing leaves the old file as it was; two writers of the same file never share a
temporary name (the last rename wins, whole).

A directory (a SavedModel, a module pair): written into a temporary sibling, renamed into
place when complete, so a crash never leaves a half-written export that looks complete.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tfapp import killpoints

log = logging.getLogger("tfapp")

__all__ = ["atomic_directory", "atomic_open", "read_state", "remove_leftovers", "save_model",
           "write_bytes", "write_text"]

# The names this module writes under before a rename (atomic_open, atomic_directory).
_LEFTOVER = re.compile(r"^\..+(\.tmp|\.tmp-\w+|\.old-[0-9a-f]{8})$")


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, *, newline: str | None = None) -> Iterator[IO[str]]:
    """A text file (UTF-8) to write; it replaces ``path`` when the block ends cleanly.
    The parent folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600, as open() would have made it
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        killpoints.reached(f"rename:{path.name}")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Replace ``path`` with ``text``, atomically."""
    with atomic_open(path) as fh:
        fh.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Replace ``path`` with ``data`` (an image...), atomically, like ``write_text``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``final`` when the block succeeds.

    The temp dir is a sibling of ``final`` (same filesystem, so the rename is atomic).
    If ``final`` exists: with ``overwrite`` it is replaced, else ``FileExistsError``.
    If another process renamed its own result into ``final`` first (a race on a
    cache entry), that result is kept and ours is discarded; callers treat an
    existing complete ``final`` as success.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    # mkdtemp makes the directory private (0700); a module is meant to be shared and read
    # by other users/services, like any directory the user would create.
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        killpoints.reached(f"rename:{final.name}")
        if final.exists() and overwrite:
            trash = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
            # Lost a race: another writer finished first; its copy is equally valid.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def save_model(module: Any, export_dir: str | os.PathLike, *, signatures: dict,
               metadata: dict, metadata_file: str, files: dict[str, str] | None = None
               ) -> Path:
    """``tf.saved_model.save`` of the serving ``module`` plus its ``metadata_file`` (JSON) and other
    text ``files`` (name -> text: the model card) into ``export_dir`` as one atomic
    directory write; replaces an old export."""
    import tensorflow as tf

    export_dir = Path(export_dir)
    # Exports serve; nothing differentiates through them, so the gradient functions of
    # ops with custom gradients would only be more functions to load.
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    # Not inside compat.without_keras_traces (as tfapp.hub.export saves): the serving roots
    # track no Keras layer (only variables and tf.functions; the tests of each task's
    # export check its variables), so tf-keras traces nothing here, and the scope would
    # drop ``model.variables`` from an old-style root tracking its Keras model, which
    # serving.model_variables reads.
    with atomic_directory(export_dir, overwrite=True) as tmp:
        tf.saved_model.save(module, str(tmp), signatures=signatures, options=options)
        write_text(tmp / metadata_file, json.dumps(metadata, indent=1))
        for name, text in (files or {}).items():
            write_text(tmp / name, text)
    return export_dir


def read_state(path: str | os.PathLike, what: str) -> dict | None:
    """A JSON state file tfapp wrote (status, records, reports), or None when it is
    missing -- or truncated or unparsable (a kill, a full disk, an older writer): such a
    file counts as missing, with one warning line naming it, never a traceback."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        log.warning("%s %s is unreadable (%s); treating it as missing", what, path,
                    str(err).splitlines()[0] if str(err) else type(err).__name__)
        return None
    if not isinstance(value, dict):
        log.warning("%s %s does not hold a JSON object; treating it as missing", what, path)
        return None
    return value


def remove_leftovers(folder: str | os.PathLike) -> list[str]:
    """Delete the temporaries of writes a kill cut short in ``folder`` (not below it);
    returns their names. Only for a folder no other process is writing into (a run
    directory under its lock): a live writer's temporary looks the same."""
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        if _LEFTOVER.match(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed
