"""Where hf_bridge keeps what it builds and writes (tiny checkpoints, a notebook's media):
under the user cache directory, `$XDG_CACHE_HOME`, else `~/.cache`. No vLLM import."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(name: str) -> Path:
    """`$XDG_CACHE_HOME/hf_bridge/<name>` (`~/.cache/hf_bridge/<name>` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hf_bridge" / name
