"""A model named by its Hugging Face hub id (`model.path = "Qwen/Qwen2.5-Coder-0.5B-Instruct"`):
its snapshot directory in the local HF cache (`HF_HOME` / `HF_HUB_CACHE` honoured), fetched
only where asked (`hargo submit`, on the login node), so compute nodes never touch the network.
No torch: it runs on a login node. docs/models.md, "Models by hub id".
"""

from __future__ import annotations

import re
from pathlib import Path

from hargo_hpc.errors import HargoError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name
BUILT_IN = ("tiny", "smollm2")
# Weight formats left out of a download when the repository has safetensors.
OTHER_WEIGHTS = ["*.bin", "*.pth", "*.pt", "*.h5", "*.msgpack", "*.onnx", "*.ot", "*.gguf",
                 "original/*"]


class HubError(HargoError, ValueError):
    """A hub id that is not in the cache here and cannot be fetched (one line)."""


def is_hub_id(path: str) -> bool:
    """`owner/name` that is neither a GGUF file nor a built-in model nor a path here: neither
    existing nor under an existing directory `owner` (`runs/final`, not written yet, is a
    missing directory, not a model to download)."""
    return (path not in BUILT_IN and bool(HUB_ID.match(path)) and not path.endswith(".gguf")
            and not Path(path.split("/")[0]).expanduser().is_dir())


def resolve_model(path: str, revision: str | None = None, *, download: bool = False) -> str:
    """`path` as it is unless it is a hub id; a hub id's snapshot directory in the HF cache,
    downloaded first when `download` and it is not cached. HubError (one line naming the id
    and how to fetch it) when it is neither cached nor downloadable."""
    if not is_hub_id(path):
        return path
    from huggingface_hub import constants, snapshot_download

    try:
        return snapshot_download(path, revision=revision, local_files_only=True)
    except (OSError, ValueError):  # not in the cache (LocalEntryNotFoundError)
        if not download:
            fetch = f"hf download {path}" + (f" --revision {revision}" if revision else "")
            raise HubError(
                f"model.path {path}{f'@{revision}' if revision else ''}: not in the Hugging "
                f"Face cache here ({constants.HF_HUB_CACHE}); fetch it where there is network "
                f"(`{fetch}`, or `hargo submit` on a login node does) or point model.path at a "
                "checkpoint directory") from None
    try:
        return snapshot_download(path, revision=revision, ignore_patterns=_ignored(path, revision))
    except Exception as err:  # network, authorisation, an unknown repository or revision
        raise HubError(f"model.path {path}: cannot download it from the Hugging Face hub "
                       f"({type(err).__name__}: {_one_line(err)})") from None


def _ignored(path: str, revision: str | None) -> list[str]:
    """The other weight formats when the repository has safetensors; nothing otherwise."""
    from huggingface_hub import list_repo_files

    files = list_repo_files(path, revision=revision)
    return OTHER_WEIGHTS if any(f.endswith(".safetensors") for f in files) else []


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300] or type(error).__name__
