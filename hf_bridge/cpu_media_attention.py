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
"""

from __future__ import annotations

import dataclasses

import torch
from vllm.model_executor.layers.attention import Attention
from vllm.v1.attention.backends.cpu_attn import (
    CPUAttentionBackend,
    CPUAttentionBackendImpl,
    CPUAttentionMetadata,
    CPUAttentionMetadataBuilder,
)

from .media_spans import media_spans


@dataclasses.dataclass
class MediaPass:
    """The step's non-causal pass: which query rows it recomputes, and its metadata."""

    rows: torch.Tensor
    metadata: CPUAttentionMetadata


@dataclasses.dataclass
class CPUMediaAttentionMetadata(CPUAttentionMetadata):
    """vLLM's CPU metadata for the causal pass, and the media pass if the step has one."""

    media_pass: MediaPass | None = None


class CPUMediaAttentionMetadataBuilder(CPUAttentionMetadataBuilder):
    def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False) -> CPUMediaAttentionMetadata:
        causal = super().build(common_prefix_len, common_attn_metadata, fast_build)
        metadata = CPUMediaAttentionMetadata(**{f.name: getattr(causal, f.name) for f in dataclasses.fields(causal)})
        if common_attn_metadata.mm_req_doc_ranges:
            metadata.media_pass = self._media_pass(common_prefix_len, common_attn_metadata)
        return metadata

    def _media_pass(self, common_prefix_len, common) -> MediaPass | None:
        num_reqs = common.num_reqs
        spans = media_spans(
            common.query_start_loc_cpu[: num_reqs + 1].tolist(),
            common.seq_lens[:num_reqs].tolist(),
            common.mm_req_doc_ranges,
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
        return MediaPass(rows=rows, metadata=super().build(common_prefix_len, span_batch))


class CPUMediaAttentionBackendImpl(CPUAttentionBackendImpl):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None, output_block_scale=None):
        super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale, output_block_scale)
        media_pass = getattr(attn_metadata, "media_pass", None)
        if media_pass is not None:
            # Decoder attention reads keys and values from the cache, already written.
            recomputed = output.new_empty((media_pass.rows.numel(), *output.shape[1:]))
            super().forward(layer, query[media_pass.rows], key, value, kv_cache, media_pass.metadata, recomputed)
            output[media_pass.rows] = recomputed
        return output


class CPUMediaAttentionBackend(CPUAttentionBackend):
    """vLLM's CPU attention, plus attention both ways within each media item."""

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
