"""The suite's checkpoints of types outside the zoo, built in one clean interpreter
(`conftest.GenericCheckpoints`): what the types import beyond the server's preloads
(tokenizers, each type's processor and model modules) is imported once, not once per
type. The suite's 27 types, a fork each, took 109 s of a CI run's setup, where one
fresh interpreter for them all had taken 49 s."""

from __future__ import annotations

from pathlib import Path

from hf_bridge.zoo.shrink import build_sweep_model


def build_each(builds: list[tuple[str, Path, int]]) -> None:
    """Each (model type, directory, seed) by the sweep's generic shrinker."""
    for model_type, directory, seed in builds:
        build_sweep_model(model_type, directory, seed)
