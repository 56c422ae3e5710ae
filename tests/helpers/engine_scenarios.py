"""Engine scenarios run as a subprocess: most need vLLM's default multiprocess engine; all
need a process whose plugin state is their own.

Prints one JSON object per line: {"step": ..., "ok": ..., "error": ..., "tokens": ...}.
"""

from __future__ import annotations

import json
import os
import sys


def emit(**kwargs):
    print("RESULT " + json.dumps(kwargs), flush=True)


def bad_input(model_dir: str) -> None:
    import numpy as np
    import torch
    from vllm import SamplingParams

    from hf_bridge.validate import parity
    from hf_bridge.validate.engine import make_llm

    from transformers import AutoProcessor

    llm = make_llm(model_dir, limit_mm_per_prompt={"image": 2})
    image = parity.test_image(64, 64, 1)
    expanded = AutoProcessor.from_pretrained(model_dir)(text=["user: <image>hi"], images=[image])["input_ids"][0]
    params = SamplingParams(max_tokens=8, temperature=0.0)
    good = {"prompt": "user: <image>Describe the image.assistant:", "multi_modal_data": {"image": image}}
    bad = {
        "more_placeholders": {"prompt": "user: <image><image>hi", "multi_modal_data": {"image": image}},
        "fewer_placeholders": {"prompt": "user: <image>hi", "multi_modal_data": {"image": [image, image]}},
        "unreadable_image": {"prompt": "user: <image>hi", "multi_modal_data": {"image": np.zeros(5, np.uint8)}},
        "undecodable_image": {"prompt": "user: <image>hi", "multi_modal_data": {"image": "data:image/png;base64,AAAA"}},
        "image_tensor_as_torchvision_reads_it": {
            "prompt": "user: <image>hi", "multi_modal_data": {"image": torch.from_numpy(np.asarray(image)).permute(2, 0, 1)}},
        "pixels_scaled_to_unit_range": {  # as torchvision's `ToTensor` gives them
            "prompt": "user: <image>hi", "multi_modal_data": {"image": [torch.from_numpy(np.asarray(image)).permute(2, 0, 1) / 255]}},
        "processor_input_ids_as_prompt": {"prompt_token_ids": list(expanded), "multi_modal_data": {"image": image}},
        "unsupported_modality": {"prompt": "user: hi", "multi_modal_data": {"video": parity.test_video()}},
        "refused_processor_kwargs": {**good, "mm_processor_kwargs": {"size": {"foo": 3}}},
        "kwargs_against_config": {**good, "mm_processor_kwargs": {"vision_feature_select_strategy": "full"}},
        "kwargs_change_pixel_sides": {**good, "mm_processor_kwargs": {"do_resize": False, "do_center_crop": False}},
        "kwargs_pad_the_text": {**good, "mm_processor_kwargs": {"padding": "max_length", "max_length": 200}},
        "kwarg_nothing_reads": {**good, "mm_processor_kwargs": {"do_rezise": False}},
        "tensors_not_torch": {**good, "mm_processor_kwargs": {"return_tensors": "np"}},
    }
    (first,) = llm.generate([good], params, use_tqdm=False)
    emit(step="good_before", ok=True, tokens=list(first.outputs[0].token_ids))
    for name, request in bad.items():
        try:
            llm.generate([request], params, use_tqdm=False)
            emit(step=name, ok=True)
        except Exception as exc:  # the message is what the test checks
            emit(step=name, ok=False, error=f"{type(exc).__name__}: {exc}")
        (out,) = llm.generate([good], params, use_tqdm=False)
        emit(step=f"good_after_{name}", ok=True, tokens=list(out.outputs[0].token_ids))


def touching_items(model_dir: str) -> None:
    """A Qwen2-VL checkpoint without a chat template, whose placeholder is the bare
    `<|image_pad|>`: two images with no text between them (`touching_items.py`), first as
    processor-cache hits, then with an image not seen before, each followed by the good
    request; an image beside a video, which the model lays out apart (two token types)."""
    from vllm import SamplingParams

    from hf_bridge.validate import parity
    from hf_bridge.validate.engine import make_llm

    llm = make_llm(model_dir, limit_mm_per_prompt={"image": 2, "video": 1})
    seen, other, new = parity.test_image(64, 64, 1), parity.test_image(48, 80, 2), parity.test_image(32, 32, 3)
    params = SamplingParams(max_tokens=8, temperature=0.0)

    def apart(first, second):
        return {"prompt": "<|image_pad|>and<|image_pad|>Describe.", "multi_modal_data": {"image": [first, second]}}

    steps = {
        "good_before": apart(seen, other),
        "touching_seen": {"prompt": "<|image_pad|><|image_pad|>Describe.", "multi_modal_data": {"image": [seen, other]}},
        "good_after_touching_seen": apart(seen, other),
        "touching_new": {"prompt": "<|image_pad|><|image_pad|>", "multi_modal_data": {"image": [new, seen]}},
        "good_with_the_new_image": apart(new, seen),
        "image_beside_video": {"prompt": "<|image_pad|><|video_pad|>Describe.",
                               "multi_modal_data": {"image": seen, "video": parity.test_video()}},
        "good_after_all": apart(seen, other),
    }
    for name, request in steps.items():
        try:
            (out,) = llm.generate([request], params, use_tqdm=False)
            emit(step=name, ok=True, tokens=list(out.outputs[0].token_ids), finish_reason=out.outputs[0].finish_reason)
        except Exception as exc:  # the message is what the test checks
            emit(step=name, ok=False, error=f"{type(exc).__name__}: {exc}")


def engine_start(model_dir: str) -> None:
    """Starts an engine, with the engine kwargs `$ENGINE_KWARGS` (JSON) names."""
    from hf_bridge.validate.engine import make_llm

    try:
        make_llm(model_dir, limit_mm_per_prompt={"image": 1}, **json.loads(os.environ.get("ENGINE_KWARGS", "{}")))
        emit(step="start", ok=True)
    except Exception as exc:
        emit(step="start", ok=False, error=f"{type(exc).__name__}: {exc}")


def tensor_parallel(model_dir: str) -> None:
    """The standard cases `HF_BRIDGE_TP_CASES` names (one and two images by default), at TP=2."""
    import dataclasses

    from transformers import AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.validate.engine import make_llm

    standard = parity.standard_cases(64)
    cases = [standard[name] for name in os.environ.get("HF_BRIDGE_TP_CASES", "one_image,two_images").split(",")]
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = make_llm(model_dir, tensor_parallel_size=2, limit_mm_per_prompt=parity.media_limits(cases))
    for case in cases:
        name, result = case.name, parity.vllm_result(llm, processor, case)
        emit(step=name, ok=True, tokens=result.tokens, prompt_ids=result.prompt_ids,
             token_logprobs=result.token_logprobs, result=dataclasses.asdict(result))
    if os.environ.get("VLLM_ALLOW_INSECURE_SERIALIZATION") == "1":  # a function handed to each worker
        import engine_scenarios  # this file as a module, whose functions the workers import by name

        emit(step="heads", ok=True, ranks=llm.apply_model(engine_scenarios.attention_heads))


def attention_heads(model) -> dict[str, list[int]]:
    """Each vLLM attention layer's name -> [query heads, key/value heads] it was built with."""
    from vllm.model_executor.layers.attention import Attention

    return {name: [layer.num_heads, layer.num_kv_heads] for name, layer in model.named_modules() if isinstance(layer, Attention)}


def case_result(model_dir: str) -> None:
    """The standard case `HF_BRIDGE_CASE` names, greedy, with log-probs; the engine's class."""
    from transformers import AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.validate.engine import make_llm

    case = parity.standard_cases(64)[os.environ["HF_BRIDGE_CASE"]]
    llm = make_llm(model_dir, limit_mm_per_prompt={"image": 2})
    model_class = llm.apply_model(lambda model: type(model).__name__)[0]
    result = parity.vllm_result(llm, AutoProcessor.from_pretrained(model_dir), case)
    emit(step="case", ok=True, model_class=model_class, quantization=llm.llm_engine.model_config.quantization, result=vars(result))


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    scenarios = {"bad-input": bad_input, "engine-start": engine_start, "tensor-parallel": tensor_parallel,
                 "case-result": case_result, "touching-items": touching_items}
    scenarios[sys.argv[1]](sys.argv[2])
