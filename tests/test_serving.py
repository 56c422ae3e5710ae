"""`vllm serve --model-impl transformers` on loopback, driven by the openai client."""

from __future__ import annotations

import pytest

from hf_bridge.server import image_data_url
from hf_bridge.validate import parity


@pytest.fixture(scope="module")
def server(zoo):
    from hf_bridge.server import OpenAIServer

    model_dir = zoo("llava")
    with OpenAIServer(model_dir, "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
                      "--limit-mm-per-prompt", '{"image": 1}', "--served-model-name", "tiny-llava") as running:
        yield model_dir, running.base_url


@pytest.mark.slow
def test_chat_with_an_image_equals_offline(server, engines):
    from openai import OpenAI
    from transformers import AutoProcessor

    model_dir, base_url = server
    case = parity.standard_cases(64)["one_image"]
    (image,) = case.images
    data_url = image_data_url(image)

    client = OpenAI(base_url=base_url, api_key="unused", timeout=120)
    reply = client.chat.completions.create(
        model="tiny-llava",
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url}},
            {"type": "text", "text": case.text},
        ]}],
        temperature=0.0,
        max_tokens=parity.MAX_NEW_TOKENS,
        extra_body={"min_tokens": parity.MAX_NEW_TOKENS},
    )

    processor = AutoProcessor.from_pretrained(model_dir)
    offline = parity.vllm_result(engines.get(model_dir, limit_mm_per_prompt={"image": 2}), processor, case)
    assert reply.usage.prompt_tokens == len(offline.prompt_ids)
    assert reply.choices[0].message.content == processor.tokenizer.decode(offline.tokens)


@pytest.mark.slow
def test_served_prompt_without_media_gets_the_processors_own_tokens(zoo, engines):
    """Chameleon's processor ends every prompt with its separator, media or not. The
    server tokenizes a chat without images and runs no multimodal processor on it
    (vLLM's async renderer path); hf_bridge adds the separator there too, so the served
    prompt is transformers' and the reply the offline engine's."""
    from openai import OpenAI
    from transformers import AutoProcessor

    from hf_bridge.server import OpenAIServer

    model_dir = zoo("chameleon")
    processor = AutoProcessor.from_pretrained(model_dir)
    messages = parity.standard_cases(64)["text_only"].messages()
    rendered = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    transformers_ids = processor(text=[rendered])["input_ids"][0].tolist()
    assert transformers_ids[-1] == processor.tokenizer.sep_token_id
    (offline,) = engines.get(model_dir, limit_mm_per_prompt={"image": 2}).chat(messages, parity.sampling_params(), use_tqdm=False)
    assert offline.prompt_token_ids == transformers_ids

    with OpenAIServer(model_dir, "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
                      "--served-model-name", "tiny-chameleon") as running:
        reply = OpenAI(base_url=running.base_url, api_key="unused", timeout=120).chat.completions.create(
            model="tiny-chameleon",
            messages=messages,
            temperature=0.0,
            max_tokens=parity.MAX_NEW_TOKENS,
            extra_body={"min_tokens": parity.MAX_NEW_TOKENS},
        )
    assert reply.usage.prompt_tokens == len(transformers_ids)
    assert reply.choices[0].message.content == offline.outputs[0].text
