"""Print, as JSON, which class vLLM resolves each backend name to (after plugins load)."""

import json

from vllm import ModelRegistry
from vllm.plugins import load_general_plugins

load_general_plugins()
names = ["TransformersMultiModalForCausalLM", "TransformersMultiModalMoEForCausalLM", "HFBridgeForConditionalGeneration"]
out = {}
for name in names:
    cls = ModelRegistry._try_load_model_cls(name) if name in ModelRegistry.models else None
    out[name] = f"{cls.__module__}.{cls.__qualname__}" if cls else None
print("RESULT " + json.dumps(out))
