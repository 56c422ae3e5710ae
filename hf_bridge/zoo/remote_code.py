"""A zoo checkpoint rewritten as a checkpoint with its own code (transformers' "remote
code", `trust_remote_code=True`): a new model type whose config, base model, generation
class and processor are classes in Python files beside the weights, named in `auto_map`,
as users' checkpoints ship models transformers does not have.

The classes subclass transformers' own, so the tiny model stays a real one, with two
things only the checkpoint's code knows: the generation class builds its own base model
class (so transformers saves and loads the weights in that class's layout, not the
library's), and it scales the logits (a head transform read from no config field).

With `own_config=False` the config stays transformers' class and model type, and
`auto_map` names the model classes only, as checkpoints that change a model but not its
config ship: loading that config records no trust, so only the engine's
`trust_remote_code` says to build the checkpoint's classes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..clean_interpreter import CleanCall

LOGIT_SCALE = 0.5
"""What the checkpoint's own head multiplies the logits by."""
MODEL_TYPE_SUFFIX = "_own_code"
PREFIX = "Own"
"""Prepended to each transformers class name for the checkpoint's subclass of it."""
CONFIG_FILE = "configuration_own.py"
MODELING_FILE = "modeling_own.py"
PROCESSING_FILE = "processing_own.py"


def remote_code_copy(source: Path, into: Path, own_config: bool = True) -> Path:
    """Write `source` (a zoo checkpoint) into `into` as a checkpoint with its own code. In a
    clean interpreter, as the zoo builds: models instantiated where a vLLM engine ran are
    not plain transformers."""
    CleanCall(_write_here, Path(source), Path(into), own_config, doing=f"writing {source} as a remote-code checkpoint").result()
    return into


def _write_here(source: Path, into: Path, own_config: bool) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor
    from transformers.models.auto import modeling_auto

    from ..head import generation_class

    config = AutoConfig.from_pretrained(source)
    original_class = generation_class(config)
    base, generation = modeling_auto.MODEL_MAPPING_NAMES[config.model_type], original_class.__name__
    processor = AutoProcessor.from_pretrained(source)
    config_name, processor_name = type(config).__name__, type(processor).__name__
    # the classes' config: the checkpoint's subclass, or transformers' own class
    config_class = f"{PREFIX}{config_name}" if own_config else config_name
    into.mkdir(parents=True)
    if own_config:
        (into / CONFIG_FILE).write_text(
            f"from transformers import {config_name}\n\n\n"
            f"class {config_class}({config_name}):\n"
            f"    model_type = \"{config.model_type}{MODEL_TYPE_SUFFIX}\"\n"
        )
    config_import = f"from .{CONFIG_FILE[:-3]} import {config_class}" if own_config else f"from transformers import {config_class}"
    (into / MODELING_FILE).write_text(
        f"import functools\n\nfrom transformers import {base}, {generation}\n\n"
        f"{config_import}\n\n\n"
        f"class {PREFIX}{base}({base}):\n"
        f"    config_class = {config_class}\n\n\n"
        f"class {PREFIX}{generation}({generation}):\n"
        f"    config_class = {config_class}\n\n"
        f"    def __init__(self, config):\n"
        f"        super().__init__(config)\n"
        f"        self.model = {PREFIX}{base}(config)\n"
        f"        self.post_init()\n\n"
        f"    @functools.wraps({generation}.forward)\n"
        f"    def forward(self, *args, **kwargs):\n"
        f"        output = super().forward(*args, **kwargs)\n"
        f"        output.logits = output.logits * {LOGIT_SCALE}\n"
        f"        return output\n"
    )
    (into / PROCESSING_FILE).write_text(
        f"from transformers import {processor_name}\n\n\n"
        f"class {PREFIX}{processor_name}({processor_name}):\n"
        f"    pass\n"
    )
    auto_map = {
        "AutoModel": f"{MODELING_FILE[:-3]}.{PREFIX}{base}",
        "AutoModelForImageTextToText": f"{MODELING_FILE[:-3]}.{PREFIX}{generation}",
    }
    stored = json.loads((source / "config.json").read_text())
    stored.update(architectures=[PREFIX + generation])
    if own_config:
        stored.update(model_type=config.model_type + MODEL_TYPE_SUFFIX,
                      auto_map={"AutoConfig": f"{CONFIG_FILE[:-3]}.{config_class}", **auto_map})
    else:
        stored.update(auto_map=auto_map)
    (into / "config.json").write_text(json.dumps(stored, indent=2))
    own = AutoConfig.from_pretrained(into, trust_remote_code=True)
    model = AutoModelForImageTextToText.from_config(own, trust_remote_code=True, dtype=torch.float32)
    if type(model).__name__ != PREFIX + generation:
        raise RuntimeError(f"transformers built {type(model).__name__} for {into}, not the checkpoint's {PREFIX}{generation}")
    model.load_state_dict(original_class.from_pretrained(source, dtype=torch.float32).state_dict(), strict=True)
    model.save_pretrained(into)
    processor.save_pretrained(into)
    processor_config = json.loads((into / "processor_config.json").read_text())
    processor_config.update(processor_class=PREFIX + processor_name,
                            auto_map={"AutoProcessor": f"{PROCESSING_FILE[:-3]}.{PREFIX}{processor_name}"})
    (into / "processor_config.json").write_text(json.dumps(processor_config, indent=2))

