"""A notebook's kernel: a transformers model built, an hf_bridge engine built, another
transformers model built; print, as JSON, each model's parity problems against the
clean-process reference, the engine's, and how the decoder classes look."""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from transformers import AutoProcessor
from transformers.models.llama.modeling_llama import LlamaModel

from hf_bridge.validate import parity
from hf_bridge.validate.engine import make_llm
from hf_bridge.validate.reference import references

model_dir = sys.argv[1]
case = parity.standard_cases(64)["one_image"]
(clean,) = references(model_dir, [case])  # transformers in a process vLLM never entered
out = {}
try:
    built_before = parity.load_generation_model(model_dir)
    llm = make_llm(model_dir)
    out["engine"] = parity.compare(clean, parity.vllm_result(llm, AutoProcessor.from_pretrained(model_dir), case))
    out["built before"] = parity.compare(clean, parity.hf_reference(model_dir, case, model=built_before))
    out["built after"] = parity.compare(clean, parity.hf_reference(model_dir, case, model=parity.load_generation_model(model_dir)))
except Exception as error:  # noqa: BLE001 - reported, for the test to show
    out["error"] = f"{type(error).__name__}: {error}"[:300]
    llm = None


def decoder_classes(model):
    decoder = model.get_language_model().model
    return isinstance(decoder, LlamaModel), [cls.__name__ for cls in type(decoder).__mro__]


if llm is not None:
    out["engine decoder is LlamaModel"], out["engine decoder mro"] = llm.apply_model(decoder_classes)[0]
out["LlamaModel mro"] = [cls.__name__ for cls in LlamaModel.__mro__]
print("RESULT " + json.dumps(out))
