"""Whether an HF MoE router renormalizes its top-k weights, measured on the router itself
(no vLLM import).

vLLM's fused-MoE layer takes an HF block's router over: it reads the router's weight and
redoes the routing (score, top-k), renormalizing the top-k weights to sum to one where
the config says `norm_topk_prob`, and by default where it says nothing and top-k > 1.
Routers that keep the scores as they are, in a config without that field (DeepSeek-OCR-2's
DeepSeek-V2 text model: softmax, then top-k, no renormalization), were renormalized: its
prompt log-probs came out 0.43 apart from transformers from the first token on.

So hf_bridge runs a copy of one router on random rows and reads what it does: top-k
weights whose sum is the same for every row are renormalized (to one, or to the
`routed_scaling_factor` applied after it); sums that vary with the row are not.
"""

from __future__ import annotations

import copy

import torch

from .kept_modules import EXPERTS_NAME

RENORMALIZE_FIELD = "norm_topk_prob"
"""The config field vLLM's `MoEMixin` reads for renormalization."""
ROUTER_STATE = frozenset({"weight", "e_score_correction_bias"})
"""A router vLLM's fuser takes over holds its weight and at most a score-correction bias."""
PROBE_ROWS = 16


def routers(model: torch.nn.Module):
    """The children of MoE blocks (modules with `experts`) that vLLM's fuser could take as routers."""
    for module in model.modules():
        if not isinstance(getattr(module, EXPERTS_NAME, None), torch.nn.Module):
            continue
        for name, child in module.named_children():
            state = {n for n, _ in child.named_parameters(recurse=False)} | {n for n, _ in child.named_buffers(recurse=False)}
            if name != EXPERTS_NAME and "weight" in state and state <= ROUTER_STATE:
                yield child


def renormalizes(router: torch.nn.Module, hidden_size: int, seed: int = 0) -> bool | None:
    """Whether `router`'s top-k weights are renormalized; None where its output is not the
    (logits, top-k weights, top-k ids) transformers' routers return."""
    probe = copy.deepcopy(router).to_empty(device="cpu").float()  # the model's may be on the meta device
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in [*probe.named_parameters(recurse=False), *probe.named_buffers(recurse=False)]:
            tensor.copy_(torch.randn(tensor.shape, generator=generator) if name == "weight" else torch.zeros(tensor.shape))
        try:
            output = probe(torch.randn(PROBE_ROWS, hidden_size, generator=generator))
        except Exception:  # noqa: BLE001 - a router of another form: vLLM's default stands
            return None
    if not (isinstance(output, tuple) and len(output) == 3):
        return None
    weights, ids = output[1], output[2]
    if not (torch.is_tensor(weights) and torch.is_tensor(ids) and weights.is_floating_point() and not ids.is_floating_point()):
        return None
    sums = weights.reshape(PROBE_ROWS, -1).sum(-1)
    return bool(torch.allclose(sums, sums[:1].expand_as(sums), rtol=1e-4, atol=1e-6))


def name_renormalization(model: torch.nn.Module, text_config) -> bool | None:
    """Set `norm_topk_prob` on a config that names none to what the model's routers do;
    the value set, or None where it was named or no router could be measured."""
    if getattr(text_config, RENORMALIZE_FIELD, None) is not None:
        return None
    one_per_class = {type(router): router for router in routers(model)}.values()  # every layer's router does the same
    found = next((r for r in (renormalizes(router, text_config.hidden_size) for router in one_per_class) if r is not None), None)
    if found is not None:
        setattr(text_config, RENORMALIZE_FIELD, found)
    return found
