"""Bidirectional attention within media items on vLLM's CPU attention backend.

vLLM computes the item ranges of a model it marks `is_mm_prefix_lm` and hands them to the
attention builder, but its CPU backend ignores them (`supports_mm_prefix()` is false, and
`CpuPlatform` selects it whatever backend is asked for), so on a CPU such a model ran
causally and its image tokens differed from transformers. This backend is vLLM's CPU
backend with one more pass: after the causal kernel, the queries inside an item
(`media_spans.py`) are computed again by the same kernel, non-causally, over their
sequence cut at the item's end, and replace the causal rows. The key cache, the kernel,
the sliding window and softcap stay vLLM's; the extra pass costs a prefill step about
one more attention over its image tokens, and decoding steps nothing.

Items must be prefilled whole for their early tokens to see their later ones, as vLLM's
GPU platforms force for such models (`disable_chunked_mm_input`); on the CPU, where vLLM
does not, `bidirectional.KeepMediaItemsWhole` does. Imported only on a CPU platform.

For a model whose whole prompt attends both ways (`bidirectional.attends_across_prompt`:
PaliGemma's prefix), each request's range is its prompt (`media_spans.prompt_ranges`).
vLLM hands attention builders no prompt lengths, so `expose_prompt_lengths` wraps the CPU
model runner's `_build_attention_metadata` (a private method, and hf_bridge's one patch
here) to lend the builders its batch's prompt lengths while it builds.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools

import numpy as np
import torch
from vllm.model_executor.layers.attention import Attention
from vllm.v1.attention.backends.cpu_attn import (
    CPUAttentionBackend,
    CPUAttentionBackendImpl,
    CPUAttentionMetadata,
    CPUAttentionMetadataBuilder,
)

from .bidirectional import attends_across_prompt, prompt_escapes_window
from .media_spans import media_spans, prompt_ranges

NO_WINDOW = -1
"""vLLM's CPU attention's `sliding_window` for a layer without one."""
PROMPT_LENGTHS: contextvars.ContextVar[np.ndarray | None] = contextvars.ContextVar("hf_bridge_prompt_lengths", default=None)
"""The prompt length of each row of the batch whose attention metadata is being built."""


def expose_prompt_lengths(runner_cls) -> None:
    """Lend `PROMPT_LENGTHS` to the attention builders while `runner_cls` builds their
    metadata (vLLM's CPU model runner; idempotent)."""
    build = runner_cls._build_attention_metadata
    if getattr(build, "hf_bridge", False):
        return

    @functools.wraps(build)
    def build_with_prompt_lengths(runner, *args, **kwargs):
        token = PROMPT_LENGTHS.set(runner.input_batch.num_prompt_tokens)
        try:
            return build(runner, *args, **kwargs)
        finally:
            PROMPT_LENGTHS.reset(token)

    build_with_prompt_lengths.hf_bridge = True  # type: ignore[attr-defined]
    runner_cls._build_attention_metadata = build_with_prompt_lengths


@dataclasses.dataclass
class MediaPass:
    """The step's non-causal pass: which query rows it recomputes, and its metadata;
    `unwindowed` where the rows see their whole span on sliding-window layers too
    (`bidirectional.prompt_escapes_window`)."""

    rows: torch.Tensor
    metadata: CPUAttentionMetadata
    unwindowed: bool = False


@dataclasses.dataclass
class CPUMediaAttentionMetadata(CPUAttentionMetadata):
    """vLLM's CPU metadata for the causal pass, and the media pass if the step has one."""

    media_pass: MediaPass | None = None


class CPUMediaAttentionMetadataBuilder(CPUAttentionMetadataBuilder):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.attends_across_prompt = attends_across_prompt(vllm_config.model_config.hf_config)
        self.prompts_escape_window = self.attends_across_prompt and prompt_escapes_window(vllm_config.model_config.hf_config)
        if self.attends_across_prompt:
            from vllm.v1.worker.cpu_model_runner import CPUModelRunner

            expose_prompt_lengths(CPUModelRunner)

    def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False) -> CPUMediaAttentionMetadata:
        causal = super().build(common_prefix_len, common_attn_metadata, fast_build)
        metadata = CPUMediaAttentionMetadata(**{f.name: getattr(causal, f.name) for f in dataclasses.fields(causal)})
        ranges = self._ranges(common_attn_metadata)
        if ranges:
            metadata.media_pass = self._media_pass(common_prefix_len, common_attn_metadata, ranges)
        return metadata

    def _ranges(self, common) -> dict[int, list[tuple[int, int]]] | None:
        """The step's bidirectional ranges: vLLM's item ranges, or each request's prompt."""
        if not self.attends_across_prompt:
            return common.mm_req_doc_ranges
        prompt_lengths = PROMPT_LENGTHS.get()
        if prompt_lengths is None:
            raise RuntimeError("hf_bridge: the CPU model runner lent no prompt lengths to the attention builder "
                               "(expose_prompt_lengths); its prompts would attend causally.")
        return prompt_ranges(prompt_lengths[: common.num_reqs].tolist())

    def _media_pass(self, common_prefix_len, common, ranges) -> MediaPass | None:
        num_reqs = common.num_reqs
        spans = media_spans(
            common.query_start_loc_cpu[: num_reqs + 1].tolist(),
            common.seq_lens[:num_reqs].tolist(),
            ranges,
        )
        if spans is None:
            return None
        query_start_loc = torch.tensor(spans.query_start_loc, dtype=common.query_start_loc_cpu.dtype)
        # vLLM's own build, for a batch of one pseudo-request per span, non-causal.
        span_batch = dataclasses.replace(
            common,
            query_start_loc=query_start_loc.to(common.query_start_loc.device),
            query_start_loc_cpu=query_start_loc,
            seq_lens=torch.tensor(spans.seq_lens, dtype=common.seq_lens.dtype, device=common.seq_lens.device),
            num_reqs=len(spans.requests),
            num_actual_tokens=len(spans.rows),
            max_query_len=spans.max_query_len,
            max_seq_len=max(spans.seq_lens),
            block_table_tensor=common.block_table_tensor[spans.requests],
            causal=False,
            mm_req_doc_ranges=None,
        )
        rows = torch.tensor(spans.rows, dtype=torch.long, device=common.query_start_loc.device)
        return MediaPass(rows=rows, metadata=super().build(common_prefix_len, span_batch), unwindowed=self.prompts_escape_window)


class CPUMediaAttentionBackendImpl(CPUAttentionBackendImpl):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None, output_block_scale=None):
        super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale, output_block_scale)
        media_pass = getattr(attn_metadata, "media_pass", None)
        if media_pass is not None:
            # Decoder attention reads keys and values from the cache, already written.
            recomputed = output.new_empty((media_pass.rows.numel(), *output.shape[1:]))
            window = self.sliding_window
            if media_pass.unwindowed:
                self.sliding_window = NO_WINDOW
            try:
                super().forward(layer, query[media_pass.rows], key, value, kv_cache, media_pass.metadata, recomputed)
            finally:
                self.sliding_window = window
            output[media_pass.rows] = recomputed
        return output


class CPUMediaAttentionBackend(CPUAttentionBackend):
    """vLLM's CPU attention, plus attention both ways within each media item."""

    takes_prompts_whole = True
    """A whole prompt attending both ways (`bidirectional.attends_across_prompt`) is given too."""

    @classmethod
    def supports_mm_prefix(cls) -> bool:
        return True

    @staticmethod
    def get_impl_cls() -> type[CPUMediaAttentionBackendImpl]:
        return CPUMediaAttentionBackendImpl

    @staticmethod
    def get_builder_cls() -> type[CPUMediaAttentionMetadataBuilder]:
        return CPUMediaAttentionMetadataBuilder


class CPUMediaAttention(Attention):
    """vLLM's `Attention` layer on `CPUMediaAttentionBackend`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, attn_backend=CPUMediaAttentionBackend, **kwargs)
