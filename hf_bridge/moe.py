"""hf_bridge's experts on vLLM's fused-MoE layer, for every head (generation, pooling).

`HFBridgeMoEMixin` is vLLM's `MoEMixin` with what HF MoE checkpoints need beyond it: an
experts-per-token count kept under another name, a router's renormalization measured
where the config does not name it (`routing.py`), experts stored transposed, and experts
that cannot take vLLM's routing, whose block vLLM's own router would route otherwise,
that compute another gated MLP than its fused layer, or differ in width from the others,
kept as transformers wrote them; so are all experts on the CPU with LoRA enabled, where
vLLM's LoRA on the fused layer needs Triton kernels.
"""

from __future__ import annotations

from contextlib import contextmanager

from vllm.config.utils import getattr_iter
from vllm.logger import init_logger
from vllm.model_executor.models.transformers.fusers.moe import MoEBlockFuser
from vllm.model_executor.models.transformers.moe import MoEMixin
from vllm.model_executor.models.transformers.utils import maybe_per_layer
from vllm.model_executor.models.utils import extract_layer_index
from vllm.platforms import current_platform
from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

from . import LOGGER_NAME, errors
from .kept_modules import (EXPERTS_NAME, WIDTH_ATTRIBUTE, Site, experts_looping_over_hits, experts_modules, experts_of_another_width,
                           experts_with_another_gated_mlp, experts_without_routing, kept_out)
from .routing import name_renormalization
from .step_kwargs import keep_eager

logger = init_logger(LOGGER_NAME)

VLLM_TOP_K_FIELDS = ("num_experts_per_tok", "top_k")
"""The experts-per-token fields vLLM's `MoEMixin` reads."""
VLLM_WIDTH_FIELDS = ("moe_intermediate_size", "intermediate_size")
"""The experts-width fields vLLM's `MoEMixin` reads, first found first."""
CPU_ROUTER_SCORING = "softmax"
"""The one scoring vLLM's CPU router computes for an ungrouped router it routes itself."""
TOP_K_FIELDS = ("moe_k",)
"""An experts-per-token field that neither vLLM's `MoEMixin` nor vLLM's config reader
(`ModelArchConfigConvertorBase`, which knows Aria's `moe_topk` and Gemma 4's
`top_k_experts`) reads: Ernie 4.5's `moe_k`."""


def experts_routed_otherwise(sites: list[Site], text_config) -> list[tuple[Site, str]]:
    """(site, why) for the `sites` of `experts` whose whole block vLLM would replace by its
    own router and fused layer (its `MoEBlockFuser` matched the block's gate), where that
    router would not route as the block does. Kept, the block routes in transformers."""
    return [(site, why) for site in sites if (why := _why_routed_otherwise(site[0], text_config))]


def _why_routed_otherwise(block, text_config) -> str:
    """Why vLLM's own router would not route `block` as transformers does ("" where it would):
    the block holds tensors of its own, which vLLM's rewritten block drops (LFM2-MoE hands
    its gate the block's `expert_bias`); or, on the CPU, its gate scores by sigmoid without
    expert groups, which vLLM's CPU router does not take (it asserts softmax)."""
    fuser = MoEBlockFuser.match(block, EXPERTS_NAME)
    if fuser is None:
        return ""
    own = [name for name, _ in (*block.named_parameters(recurse=False), *block.named_buffers(recurse=False))]
    if own:
        return f"its block holds {', '.join(own)}, which vLLM's router would not read"
    grouped = getattr(text_config, "n_group", None) is not None and getattr(text_config, "topk_group", None) is not None
    if current_platform.is_cpu() and fuser.scoring_func != CPU_ROUTER_SCORING and not grouped:
        return f"its gate scores by {fuser.scoring_func} without expert groups; vLLM's CPU router takes {CPU_ROUTER_SCORING} only"
    return ""


class HFBridgeMoEMixin(MoEMixin):
    """Goes first in a class's bases, before hf_bridge's model, as vLLM puts `MoEMixin`
    first in its own `TransformersMultiModalMoE...` classes."""

    def recursive_replace(self):
        if name_top_k(self.text_config) is None:
            vllm_config = self.model_config.hf_config  # another object where hf_bridge built from transformers' own
            loaded_as = None if self.config is vllm_config else type(vllm_config).__name__
            raise ValueError(errors.experts_without_top_k(self.model_config.get_num_experts(), VLLM_TOP_K_FIELDS + TOP_K_FIELDS,
                                                          self.text_config, loaded_as))
        kept = list(experts_without_routing(self.model))
        if kept:
            logger.info("hf_bridge keeps transformers' %s: its forward takes no routing (top-k ids and weights), "
                        "which vLLM's fused-MoE layer is called with", type(kept[0][2]).__name__)
        otherwise_gated = [site for site in experts_with_another_gated_mlp(self.model) if site not in kept]
        if otherwise_gated:
            logger.info("hf_bridge keeps transformers' %s: its gated MLP is not silu(gate) * up, the one vLLM's "
                        "fused-MoE layer computes", type(otherwise_gated[0][2]).__name__)
            kept += otherwise_gated
        routed_otherwise = experts_routed_otherwise([site for site in experts_modules(self.model) if site not in kept], self.text_config)
        if routed_otherwise:
            (_, _, experts), why = routed_otherwise[0]
            logger.info("hf_bridge keeps transformers' %s: vLLM would route its block in vLLM's own router, which "
                        "would not route as its block does (%s)", type(experts).__name__, why)
            kept += [site for site, _ in routed_otherwise]
        if self.vllm_config.lora_config is not None and current_platform.is_cpu():
            adapted = [site for site in experts_modules(self.model) if site not in kept]
            if adapted:
                logger.info("hf_bridge keeps transformers' %s: vLLM's LoRA on its fused-MoE layer runs Triton kernels, "
                            "which its CPU build does not have", type(adapted[0][2]).__name__)
            kept += adapted
        fused = [site for site in experts_modules(self.model) if site not in kept]
        width, other_width = experts_of_another_width(fused) if self._width_misread(fused) else (None, [])
        if other_width:
            logger.info("hf_bridge keeps transformers' %s at %s: its experts are %d wide, not the %d of most "
                        "experts here, which vLLM's fused-MoE layers take", type(other_width[0][2]).__name__,
                        ", ".join(sorted({type(parent).__name__ for parent, _, _ in other_width})),
                        getattr(other_width[0][2], WIDTH_ATTRIBUTE), width)
            kept += other_width
        renormalized = name_renormalization(self.model, self.text_config)
        if renormalized is not None:
            logger.info("hf_bridge measured %s's router: its top-k weights are %srenormalized (norm_topk_prob=%s, "
                        "which the config does not name)", type(self.model).__name__, "" if renormalized else "not ", renormalized)
        # read before vLLM's layer replaces them: HF experts that store (in, out) per expert, fused
        # (kept ones load as transformers stores them: GPT-OSS's)
        kept_ids = {id(module) for _, _, module in kept}
        self.transposed_experts = frozenset(
            f"model.{name}." for name, module in self.model.named_modules()
            if getattr(module, "is_transposed", False) and id(module) not in kept_ids
        )
        looping = experts_looping_over_hits(kept)
        if looping:
            for module in self.model.modules():
                if keep_eager(module):
                    logger.info("hf_bridge runs %s eagerly: transformers' %s, kept, loop over the experts their tokens "
                                "hit, a count vLLM's full-graph compile cannot trace", type(module).__name__,
                                type(looping[0][2]).__name__)
        with kept_out(kept), experts_width_read(self.text_config, width):
            super().recursive_replace()

    def _width_misread(self, sites) -> bool:
        """Whether vLLM's `MoEMixin` would build some of these experts at another width than
        they declare: it reads the config's width, indexing a list by layer (Ernie 4.5 VL's
        `moe_intermediate_size=[1536, 512]` is per modality, not per layer)."""
        configured = getattr_iter(self.text_config, list(VLLM_WIDTH_FIELDS), None)
        names = {id(module): f"model.{name}" for name, module in self.model.named_modules()}
        for _, _, module in sites:
            declared = getattr(module, WIDTH_ATTRIBUTE, None)
            if not isinstance(declared, int):
                continue
            try:
                read = maybe_per_layer(configured, extract_layer_index(names[id(module)]) if isinstance(configured, list) else 0)
            except (IndexError, ValueError, AssertionError):  # a list shorter than the depth; no layer index
                return True
            if read != declared:
                return True
        return False

    def _vllm_layout(self, weights):
        """Experts declared `is_transposed` (Aria's grouped GEMM: experts x in x out) turned
        to the experts x out x in that vLLM's fused-MoE loader reads. Judged by the name
        vLLM's mapping gives (a checkpoint may keep its own names: Aria's `experts.fc1`)."""
        prefixes = tuple(self.transposed_experts)
        for name, tensor in weights:
            mapped = self.hf_to_vllm_mapper.apply_list([name]) if prefixes and tensor.ndim == 3 else []
            transposed = bool(mapped) and mapped[0].startswith(prefixes)
            yield name, tensor.transpose(1, 2) if transposed else tensor


@contextmanager
def experts_width_read(text_config, width: int | None):
    """vLLM's `MoEMixin` reads `width` while it replaces the experts: the width the experts
    themselves declare (`experts_of_another_width`), not a config list it would index by
    layer. The HF model is built already, so only vLLM's layers read it."""
    field = next((f for f in VLLM_WIDTH_FIELDS if getattr(text_config, f, None) is not None), None)
    if width is None or field is None:
        yield
        return
    stored, missing = vars(text_config), object()
    configured = stored.get(field, missing)
    stored[field] = width  # past a strict config's type check (a list, for Ernie 4.5 VL)
    try:
        yield
    finally:
        if configured is missing:
            del stored[field]
        else:
            stored[field] = configured


def name_top_k(text_config) -> int | None:
    """The experts-per-token count vLLM's MoE layer reads, given to `num_experts_per_tok`
    where the config keeps it under another name (the HF model is built already; only
    vLLM's layer reads it); None where the config names none."""
    named = next((getattr(text_config, f) for f in VLLM_TOP_K_FIELDS if getattr(text_config, f, None) is not None), None)
    if named is None:
        named = ModelArchConfigConvertorBase(text_config, text_config).get_num_experts_per_token() or next(
            (getattr(text_config, f) for f in TOP_K_FIELDS if isinstance(getattr(text_config, f, None), int)), None)
        if named:
            text_config.num_experts_per_tok = named
    return named or None
