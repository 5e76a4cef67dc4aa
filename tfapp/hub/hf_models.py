"""``model.hub_handle: hf:ORG/NAME[@REVISION]``: a Hugging Face model id, fetched once.

huggingface_hub does the fetching, so its own conventions hold: ``HF_HOME`` /
``HF_HUB_CACHE`` say where its cache is, ``HF_HUB_OFFLINE=1`` keeps it off the network,
``HF_TOKEN`` (or ``hf auth login``) opens private and gated models, ``HF_ENDPOINT`` points it
at a mirror. Only what the conversion reads is fetched (config, safetensors weights,
tokenizer files), never pickled PyTorch weights.

``tfapp.hub.handles`` converts the snapshot once into tfapp's cache, keyed by the commit
the revision resolved to.
"""

from __future__ import annotations

import re
from pathlib import Path

from tfapp.errors import ConfigError

__all__ = ["HF_FILES", "HF_PREFIX", "fetch_hf_snapshot", "parse_hf_handle"]

HF_PREFIX = "hf:"
# What the conversion reads; everything else in a repo (pytorch_model.bin, tf_model.h5,
# onnx/, ...) is left on the Hub.
HF_FILES = ["config.json", "model.safetensors", "model.safetensors.index.json",
            "model-*.safetensors", "vocab.txt", "tokenizer_config.json", "tokenizer.json",
            "special_tokens_map.json", "sentencepiece.bpe.model"]  # the last: XLM-R's
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def parse_hf_handle(handle: str) -> tuple[str, str | None]:
    """``"hf:org/name@rev"`` -> ``("org/name", "rev")`` (rev None: the default branch)."""
    body = handle[len(HF_PREFIX):].strip()
    repo_id, _, revision = body.partition("@")
    if not _REPO_ID.match(repo_id) or ".." in repo_id or (_ and not revision):
        raise ConfigError(f"model.hub_handle: '{handle}' is not a Hugging Face model id; write "
                          "hf:ORG/NAME or hf:ORG/NAME@REVISION (e.g. "
                          "hf:google-bert/bert-base-multilingual-cased)")
    return repo_id, revision or None


def fetch_hf_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The local snapshot folder of ``repo_id`` at ``revision`` (huggingface_hub's cache).

    A full commit hash is looked up in the cache first (it cannot change, so there is
    nothing to ask the Hub); a branch or tag asks the Hub unless ``HF_HUB_OFFLINE`` is
    set, and huggingface_hub falls back to the cached snapshot when the Hub is out of
    reach. Every failure is one ``ConfigError`` line.
    """
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise ConfigError("hf: model ids need the 'huggingface_hub' package; pip install "
                          "huggingface_hub") from None
    name = f"hf:{repo_id}" + (f"@{revision}" if revision else "")
    if revision and _COMMIT.match(revision):
        try:
            return Path(huggingface_hub.snapshot_download(
                repo_id, revision=revision, allow_patterns=HF_FILES, local_files_only=True))
        except errors.LocalEntryNotFoundError:
            pass  # not cached yet: fetch it below
    try:
        return Path(huggingface_hub.snapshot_download(repo_id, revision=revision,
                                                      allow_patterns=HF_FILES))
    except errors.GatedRepoError:
        raise ConfigError(f"{name} is a gated model: accept its terms on "
                          f"https://huggingface.co/{repo_id} and set HF_TOKEN (or run "
                          "`hf auth login`)") from None
    except errors.RepositoryNotFoundError:
        raise ConfigError(f"{name}: no such model on the Hugging Face Hub, or it is private; "
                          "check the id, and for a private model set HF_TOKEN (or run `hf auth "
                          "login`)") from None
    except errors.RevisionNotFoundError:
        raise ConfigError(f"{name}: the model has no revision '{revision}'; give a branch, tag "
                          "or commit hash that exists (or drop @REVISION for the default "
                          "branch)") from None
    except errors.LocalEntryNotFoundError:
        where = huggingface_hub.constants.HF_HUB_CACHE
        if huggingface_hub.constants.HF_HUB_OFFLINE:  # its own reading of the variable
            raise ConfigError(f"{name} is not in the Hugging Face cache ({where}) and "
                              "HF_HUB_OFFLINE is set; fetch it once with network (unset "
                              "HF_HUB_OFFLINE), or copy a cache that has it") from None
        raise ConfigError(f"{name}: the Hugging Face Hub cannot be reached and the model is not "
                          f"in the cache ({where}); check the network (or HF_ENDPOINT), or "
                          "fetch it on a machine with network and copy the cache") from None
    except errors.HFValidationError as err:
        raise ConfigError(f"{name} is not a valid Hugging Face model id: "
                          f"{str(err).splitlines()[0]}") from None
    except errors.HfHubHTTPError as err:
        raise ConfigError(f"{name}: the Hugging Face Hub refused the download "
                          f"({str(err).splitlines()[0]})") from None
