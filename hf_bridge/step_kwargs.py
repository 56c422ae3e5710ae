"""Arguments hf_bridge hands an HF module on every step, beside vLLM's (no vLLM import)."""

from __future__ import annotations

from typing import Callable

import torch


def hand_step_kwargs(module: torch.nn.Module, step_kwargs: Callable[[int], dict[str, object]]) -> None:
    """Every call of `module` given `inputs_embeds` also gets `step_kwargs(num_tokens)`,
    over what the HF caller passed for them (None).

    The instance's `forward` is wrapped rather than hooked: vLLM's compile decorator
    replaces `__call__` and calls `forward` directly, so module hooks never run.
    """
    forward = module.forward

    def forward_with_step_kwargs(*args, **kwargs):
        embeds = kwargs.get("inputs_embeds")
        if embeds is not None:
            kwargs.update(step_kwargs(embeds.shape[-2]))
        return forward(*args, **kwargs)

    module.forward = forward_with_step_kwargs


COMPILE_SWITCH = "do_not_compile"
"""vLLM's compile decorator's own switch: a decorated module that sets it runs eagerly."""


def keep_eager(module: torch.nn.Module) -> bool:
    """Switch vLLM's compile decorator off for `module` (its graph would read step arguments
    once, at tracing, or cannot trace a branch on them); True where it was compiled until now."""
    if getattr(module, COMPILE_SWITCH, True) is not False:
        return False
    setattr(module, COMPILE_SWITCH, True)
    return True
