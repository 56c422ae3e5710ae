"""Where a checkpoint the user named lives: a local directory, or a hub id fetched (or
found in the hub cache, offline) with huggingface_hub, as transformers would."""

from __future__ import annotations

from pathlib import Path


def checkpoint_dir(model: str | Path, command: str) -> Path:
    """`model` as a local directory; `command` names the caller in the error."""
    local = Path(model).expanduser()
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(model)))
    except Exception as error:  # noqa: BLE001 - any failure reads as one refusal with its cause
        raise SystemExit(
            f"{command}: {model} is neither a checkpoint directory nor a hub id that could be fetched "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
            "download it where the hub is reachable and pass the directory"
        ) from None
