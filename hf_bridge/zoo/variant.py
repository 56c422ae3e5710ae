"""A checkpoint with some of its settings changed: its weights linked rather than copied
(`variant`), or a zoo model built afresh with settings made before its weights are drawn
(`rebuilt`, for a setting that changes their shapes). How the tests, the benchmarks and
the processor-settings sweep try settings the zoo does not ship."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

PROCESSOR_CONFIG = "processor_config.json"
SECTION_FILES = {
    "image_processor": "preprocessor_config.json",
    "feature_extractor": "preprocessor_config.json",
    "video_processor": "video_preprocessor_config.json",
}
"""Where transformers saves a processor's part that is not nested in the processor's file."""
HF_BRIDGE_FILES = "hf_bridge_"
"""hf_bridge's own files beside a checkpoint (cached references, the zoo's recipe stamp):
they describe the original, not the copy."""


def variant(
    model_dir: Path,
    into: Path,
    *,
    processor: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    **sections: dict[str, Any],
) -> Path:
    """Copy checkpoint `model_dir` to `into` (a new directory; weights as symlinks, none of
    hf_bridge's own files) with these keys set: `processor`'s in the processor's own
    config, each of `sections`' (`image_processor=`, `video_processor=`, ...) in that
    part's config, `config`'s in the model config."""
    unknown = set(sections) - set(SECTION_FILES)
    if unknown:
        raise TypeError(f"no processor part {', '.join(sorted(unknown))}; parts are {', '.join(SECTION_FILES)}")
    into.mkdir(parents=True)
    for path in Path(model_dir).iterdir():
        if path.suffix == ".safetensors":
            (into / path.name).symlink_to(path.resolve())
        elif path.is_file() and not path.name.startswith(HF_BRIDGE_FILES):
            shutil.copy(path, into / path.name)
    nested = _read(into / PROCESSOR_CONFIG)
    for section, keys in sections.items():
        if section in nested:
            nested[section].update(keys)
        else:
            _update(into / SECTION_FILES[section], keys)
    _update(into / PROCESSOR_CONFIG, {**nested, **(processor or {})})
    _update(into / "config.json", config or {})
    return into


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _update(path: Path, keys: dict[str, Any]) -> None:
    if keys:
        path.write_text(json.dumps({**_read(path), **keys}, indent=2))


def rebuilt(
    name: str,
    into: Path,
    *,
    config: dict[str, Any] | None = None,
    processor: dict[str, Any] | None = None,
    seed: int = 0,
) -> Path:
    """Build zoo model `name` afresh into `into` (a new directory) with `config`'s and
    `processor`'s attributes set on the objects its recipe makes, before the weights are
    drawn: dotted paths into their parts (`text_config.sliding_window`,
    `image_processor.merge_size`); a sub-config replaced whole is a dict naming its
    `model_type`. In a clean interpreter, as the zoo builds."""
    from ..clean_interpreter import CleanCall

    CleanCall(_build_rebuilt, name, Path(into), config or {}, processor or {}, seed,
              doing=f"building zoo model {name!r} with {config or {}} {processor or {}}").result()
    return Path(into)


def _build_rebuilt(name: str, into: Path, config: dict[str, Any], processor: dict[str, Any], seed: int) -> None:
    from .build import build_checkpoint
    from .specs import SPECS

    spec = SPECS[name]

    def make_config(tokenizer):
        return _with_attributes(spec.make_config(tokenizer), config)

    def make_processor(tokenizer):
        return _with_attributes(spec.make_processor(tokenizer), processor)

    stamp = {"rebuilt_from": name, "seed": seed, "config": config, "processor": processor}
    build_checkpoint(dataclasses.replace(spec, make_config=make_config, make_processor=make_processor), into, stamp, seed)


def _with_attributes(target: Any, attributes: dict[str, Any]) -> Any:
    for path, value in attributes.items():
        *parents, attribute = path.split(".")
        owner = target
        for parent in parents:
            owner = getattr(owner, parent)
        if not hasattr(owner, attribute):
            raise AttributeError(f"{type(owner).__name__} has no {attribute!r} to set ({path})")
        setattr(owner, attribute, _as_sub_config(getattr(owner, attribute), value))
    return target


def _as_sub_config(current: Any, value: Any) -> Any:
    """`value`, or where it replaces a whole sub-config (another tower's `vision_config`)
    and names a `model_type`, that type's config made from it."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(current, PretrainedConfig) and isinstance(value, dict) and "model_type" in value:
        return AutoConfig.for_model(**value)
    return value
