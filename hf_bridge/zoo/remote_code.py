"""A zoo checkpoint rewritten as a checkpoint with its own code (transformers' "remote
code", `trust_remote_code=True`): a new model type whose config, base model, generation
class and processor are classes in Python files beside the weights, named in `auto_map`,
as users' checkpoints ship models transformers does not have.

The classes subclass transformers' own, so the tiny model stays a real one, with two
things only the checkpoint's code knows: the generation class builds its own base model
class (so transformers saves and loads the weights in that class's layout, not the
library's), and it scales the logits (a head transform read from no config field).

    python -m hf_bridge.zoo.remote_code SOURCE_DIR INTO_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LOGIT_SCALE = 0.5
"""What the checkpoint's own head multiplies the logits by."""
MODEL_TYPE_SUFFIX = "_own_code"
PREFIX = "Own"
"""Prepended to each transformers class name for the checkpoint's subclass of it."""
CONFIG_FILE = "configuration_own.py"
MODELING_FILE = "modeling_own.py"
PROCESSING_FILE = "processing_own.py"


def remote_code_copy(source: Path, into: Path) -> Path:
    """Write `source` (a zoo checkpoint) into `into` as a checkpoint with its own code. In a
    fresh interpreter, as the zoo builds: models instantiated where a vLLM engine ran are
    not plain transformers."""
    done = subprocess.run([sys.executable, "-m", __name__, str(source), str(into)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"writing {source} as a remote-code checkpoint failed:\n{done.stderr[-4000:]}")
    return into


def _write_here(source: Path, into: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor
    from transformers.models.auto import modeling_auto

    from ..head import generation_class

    config = AutoConfig.from_pretrained(source)
    base = modeling_auto.MODEL_MAPPING_NAMES[config.model_type]
    generation = generation_class(config).__name__
    processor = AutoProcessor.from_pretrained(source)
    names = {"config": type(config).__name__, "base": base, "generation": generation, "processor": type(processor).__name__}
    into.mkdir(parents=True)
    (into / CONFIG_FILE).write_text(
        f"from transformers import {names['config']}\n\n\n"
        f"class {PREFIX}{names['config']}({names['config']}):\n"
        f"    model_type = \"{config.model_type}{MODEL_TYPE_SUFFIX}\"\n"
    )
    (into / MODELING_FILE).write_text(
        f"import functools\n\nfrom transformers import {base}, {generation}\n\n"
        f"from .{CONFIG_FILE[:-3]} import {PREFIX}{names['config']}\n\n\n"
        f"class {PREFIX}{base}({base}):\n"
        f"    config_class = {PREFIX}{names['config']}\n\n\n"
        f"class {PREFIX}{generation}({generation}):\n"
        f"    config_class = {PREFIX}{names['config']}\n\n"
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
        f"from transformers import {names['processor']}\n\n\n"
        f"class {PREFIX}{names['processor']}({names['processor']}):\n"
        f"    pass\n"
    )
    stored = json.loads((source / "config.json").read_text())
    stored.update(
        model_type=config.model_type + MODEL_TYPE_SUFFIX,
        architectures=[PREFIX + generation],
        auto_map={
            "AutoConfig": f"{CONFIG_FILE[:-3]}.{PREFIX}{names['config']}",
            "AutoModel": f"{MODELING_FILE[:-3]}.{PREFIX}{base}",
            "AutoModelForImageTextToText": f"{MODELING_FILE[:-3]}.{PREFIX}{generation}",
        },
    )
    (into / "config.json").write_text(json.dumps(stored, indent=2))
    own_config = AutoConfig.from_pretrained(into, trust_remote_code=True)
    model = AutoModelForImageTextToText.from_config(own_config, trust_remote_code=True, dtype=torch.float32)
    original = generation_class(config).from_pretrained(source, dtype=torch.float32)
    model.load_state_dict(original.state_dict(), strict=True)
    model.save_pretrained(into)
    processor.save_pretrained(into)
    processor_config = json.loads((into / "processor_config.json").read_text())
    processor_config.update(processor_class=PREFIX + names["processor"],
                            auto_map={"AutoProcessor": f"{PROCESSING_FILE[:-3]}.{PREFIX}{names['processor']}"})
    (into / "processor_config.json").write_text(json.dumps(processor_config, indent=2))


if __name__ == "__main__":
    _write_here(Path(sys.argv[1]), Path(sys.argv[2]))
