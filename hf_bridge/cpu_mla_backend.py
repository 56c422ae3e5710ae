"""vLLM's CPU latent-attention (MLA) backend for a float32 model (thin vLLM glue).

On a CPU with AMX tiles, vLLM 0.32 picks its AMX MLA backend for every MLA model, whatever
its dtype; that backend packs the absorbed weights for bfloat16, float16 or int8 kernels
and refuses float32 ones (`invalid weight input features 16`, or `expect weight to be
bfloat16, float16, int8, ...`), so a float32 MLA model (DeepSeek-V3's decoder, Kimi-K2.5)
could not start there, under the in-tree backend alike. vLLM's reference CPU MLA backend
computes in float32, and is what vLLM picks on a CPU without AMX. hf_bridge asks for it
where vLLM would have picked AMX for a float32 model, unless the user chose a backend.
"""

from __future__ import annotations

import torch
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.v1.attention.backends.registry import AttentionBackendEnum

logger = init_logger(__name__)


def reference_mla_for_float32(vllm_config) -> None:
    """vLLM's config hook step: `attention_config.backend` CPU_MLA for a float32 MLA model
    on a CPU where vLLM would pick its AMX backend."""
    model_config = vllm_config.model_config
    if not (current_platform.is_cpu() and getattr(model_config, "use_mla", False) and model_config.dtype == torch.float32):
        return
    if vllm_config.attention_config.backend is not None or not torch.cpu._is_amx_tile_supported():
        return
    vllm_config.attention_config.backend = AttentionBackendEnum.CPU_MLA
    logger.info("hf_bridge: %s computes latent attention in float32 on vLLM's CPU_MLA backend: the AMX backend vLLM "
                "prefers on this CPU takes bfloat16, float16 or int8 weights only", model_config.hf_config.model_type)
