"""Tiny, seeded, randomly initialised checkpoints built offline from real HF classes."""

from .build import build, cached, default_cache_dir
from .specs import SPECS

__all__ = ["SPECS", "build", "cached", "default_cache_dir"]
