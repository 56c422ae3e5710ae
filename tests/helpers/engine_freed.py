"""What an in-process engine in compiled mode leaves behind once it is freed, in a clean
interpreter as a notebook's kernel is (the tests' own process keeps frames that hold
engines)."""

from __future__ import annotations

import gc
import weakref


def compiled_model_left_after(model_dir: str, shut_down_first: bool) -> dict:
    """Builds an engine in compiled mode, runs a request, frees it (shut down first, or
    only dropped, as a notebook cell run again drops it), and reports what is left."""
    from torch._dynamo import convert_frame
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    from hf_bridge.validate.engine import make_llm, shutdown

    hooks_before = len(convert_frame._bytecode_hooks)
    llm = make_llm(model_dir, enforce_eager=False)
    tokens = llm.generate(["Describe a cat."], use_tqdm=False)[0].outputs[0].token_ids
    (compiled,) = llm.apply_model(
        lambda model: [weakref.ref(m) for m in model.modules() if isinstance(m, TorchCompileWithNoGuardsWrapper)])
    hooks_alive = len(convert_frame._bytecode_hooks) - hooks_before
    if shut_down_first:
        shutdown(llm)
    del llm
    gc.collect()
    return {"tokens": len(tokens), "compiled modules": len(compiled), "hooks while alive": hooks_alive,
            "hooks left": len(convert_frame._bytecode_hooks) - hooks_before,
            "compiled modules left": sum(ref() is not None for ref in compiled)}
