"""Print, as JSON, which class vLLM resolves each backend name to (after plugins load),
and, for each checkpoint directory given as an argument, the architecture vLLM picks
for it with `model_impl="transformers"` (and `$PROBE_RUNNER`, else "auto"), or the error
that stops it."""

import json
import os
import sys

from vllm import ModelRegistry
from vllm.plugins import load_general_plugins

load_general_plugins()
names = [
    "TransformersMultiModalForCausalLM",
    "TransformersMultiModalMoEForCausalLM",
    "HFBridgeForConditionalGeneration",
    "HFBridgeInTreeTransformersMultiModalForCausalLM",
]
out = {}
for name in names:
    cls = ModelRegistry._try_load_model_cls(name) if name in ModelRegistry.models else None
    out[name] = f"{cls.__module__}.{cls.__qualname__}" if cls else None
if len(sys.argv) > 1:
    from vllm.config import ModelConfig

    def architecture(directory: str) -> str:
        try:
            return ModelConfig(model=directory, model_impl="transformers", runner=os.environ.get("PROBE_RUNNER", "auto")).architecture
        except Exception as error:  # noqa: BLE001 - reported as the probe's answer
            return f"error: {error}"

    out["checkpoints"] = {d: architecture(d) for d in sys.argv[1:]}
print("RESULT " + json.dumps(out))
