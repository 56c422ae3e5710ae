"""`vllm serve --model-impl transformers` on loopback, driven by the openai client.

One server (a minute to start on two cores) serves both tests: Chameleon, whose processor
adds a separator to every prompt, media or not. It starts on a port another socket holds,
as when a process binds the picked port before the server does."""

from __future__ import annotations

import socket

import pytest

from hf_bridge.server import image_data_url
from hf_bridge.validate import parity


@pytest.fixture(scope="module")
def server(zoo):
    from hf_bridge.server import OpenAIServer

    model_dir = zoo("chameleon")
    server = OpenAIServer(model_dir, "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
                          "--limit-mm-per-prompt", '{"image": 1}', "--served-model-name", SERVED)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", server.port))
        holder.listen()
        taken = server.port
        with server as running:
            assert running.port != taken, "a taken port must lead to a fresh one, not to a failure"
            yield model_dir, running.base_url


SERVED = "tiny-chameleon"


def served_reply(base_url: str, messages: list[dict]):
    """The server's greedy chat completion of `messages`, the parity run's token count."""
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key="unused", timeout=120).chat.completions.create(
        model=SERVED, messages=messages, temperature=0.0, max_tokens=parity.MAX_NEW_TOKENS,
        extra_body={"min_tokens": parity.MAX_NEW_TOKENS},
    )


@pytest.mark.slow
def test_chat_with_an_image_equals_offline(server, engines):
    """The same chat, image and all, served and offline (`LLM.chat`): the same prompt and reply."""
    model_dir, base_url = server
    case = parity.standard_cases(64)["one_image"]
    (image,) = case.images
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image_data_url(image)}},
        {"type": "text", "text": case.text},
    ]}]
    reply = served_reply(base_url, messages)

    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    (offline,) = llm.chat(messages, parity.sampling_params(), use_tqdm=False)
    image_token = llm.get_tokenizer().convert_tokens_to_ids("<image>")
    assert offline.prompt_token_ids.count(image_token) > 1, "the image must be in the prompt, expanded"
    assert reply.usage.prompt_tokens == len(offline.prompt_token_ids)
    assert reply.choices[0].message.content == offline.outputs[0].text


@pytest.mark.slow
def test_served_prompt_without_media_gets_the_processors_own_tokens(server, engines):
    """Chameleon's processor ends every prompt with its separator, media or not. The
    server tokenizes a chat without images and runs no multimodal processor on it
    (vLLM's async renderer path); hf_bridge adds the separator there too, so the served
    prompt is transformers' and the reply the offline engine's."""
    from transformers import AutoProcessor

    model_dir, base_url = server
    processor = AutoProcessor.from_pretrained(model_dir)
    messages = parity.standard_cases(64)["text_only"].messages()
    rendered = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    transformers_ids = processor(text=[rendered])["input_ids"][0].tolist()
    assert transformers_ids[-1] == processor.tokenizer.sep_token_id
    (offline,) = engines.get(model_dir, limit_mm_per_prompt={"image": 2}).chat(messages, parity.sampling_params(), use_tqdm=False)
    assert offline.prompt_token_ids == transformers_ids

    reply = served_reply(base_url, messages)
    assert reply.usage.prompt_tokens == len(transformers_ids)
    assert reply.choices[0].message.content == offline.outputs[0].text
