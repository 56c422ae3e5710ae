"""Prompts given as embeddings (`enable_prompt_embeds`): the tokens of the same prompt's ids,
or a refusal at start where the decoder reads something looked up by token id.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hf_bridge import errors
from hf_bridge.validate import parity

HELPER = Path(__file__).parent / "helpers" / "hf_prompt_embeds.py"


def hf_prompt_embeds(model_dir, case: str, tmp_path) -> dict:
    import torch

    out = tmp_path / f"{Path(model_dir).name}-{case}.pt"
    done = subprocess.run([sys.executable, str(HELPER), str(model_dir), case, str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out)


@pytest.mark.engine
def test_a_prompt_given_as_embeddings_gives_the_tokens_of_its_ids(zoo, engines, tmp_path):
    """Gemma 3 scales its embeddings inside its embedding module: the prompt embeddings are
    what that module returns, as transformers takes them."""
    for name in ("llava", "gemma3"):
        model_dir = zoo(name)
        saved = hf_prompt_embeds(model_dir, "text_only", tmp_path)
        llm = engines.get(model_dir, enable_prompt_embeds=True)
        params = parity.sampling_params()
        params.prompt_logprobs = None  # vLLM gives none for a prompt of embeddings
        from_ids, from_embeds = (llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
                                 for prompt in ({"prompt_token_ids": saved["ids"]}, {"prompt_embeds": saved["embeds"]}))
        assert list(from_embeds.token_ids) == list(from_ids.token_ids), name
        for token, a, b in zip(from_ids.token_ids, from_ids.logprobs, from_embeds.logprobs):
            assert abs(a[token].logprob - b[token].logprob) <= parity.ATOL, name


@pytest.mark.engine
def test_prompt_embeds_are_refused_where_the_decoder_reads_token_ids(gemma4_variant):
    """Gemma 4's decoder adds per-layer embeddings looked up by token id, and vLLM hands the
    model id 0 at each embedded position. Served, a prompt sent as its exact embeddings gave
    other tokens than its ids (measured: 154, 351, 336 against 380, 19, 365). The engine now
    refuses to start (vLLM's in-tree backend does not start Gemma 4 at all)."""
    from helpers.engine_start import start_engine

    done = start_engine(gemma4_variant("kv_shared"), enable_prompt_embeds=True)
    refusal = errors.prompt_embeds_without_token_ids("Gemma4Model", ["per-layer token embeddings"])
    assert done.returncode != 0 and refusal in done.stderr, done.stderr[-3000:]
