"""Pixels sent already scaled to [0, 1], where the HF processor scales them again.

transformers' image and video processors multiply every input by `rescale_factor` (1/255)
when `do_rescale` is set, whatever its dtype, and transformers 5 no longer warns: a float
image within [0, 1] (torchvision's `ToTensor`, `array / 255`) reaches the model nearly
black, in transformers and in every vLLM backend alike. Whether a processor does so is
measured on the item itself, not assumed: the item processed again at 255 times its values
gives the output the sender meant, and a processor that reads such floats as [0, 1] gives
it for both. Pure functions: no vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PIXEL_KEYS = {"image": "images", "video": "videos"}
"""Where an item's pixels sit in the processor's keyword layout, by modality."""
SUB_PROCESSORS = {"image": "image_processor", "video": "video_processor"}
FULL_SCALE = 255
"""The value of a full pixel in the 0-255 range the processors' `rescale_factor` undoes."""
APART = 0.25
"""How far, relative to the meant output's largest value, the two outputs must part to
count as scaled twice: resizing floats and integers rounds apart by about 1%, scaling
twice moves every value by its whole size."""


def rescales(processor: Any, modality: str, kwargs: Mapping[str, object]) -> bool:
    """Whether the processor's `modality` part scales pixels down: neither the call's kwargs
    nor its saved config turn `do_rescale` off (pixels the sender scaled on purpose)."""
    asked = kwargs.get("do_rescale")
    saved = getattr(getattr(processor, SUB_PROCESSORS.get(modality, ""), None), "do_rescale", None)
    return (saved if asked is None else asked) is not False


def scaled_up(modality: str, item: Mapping[str, list]) -> dict[str, list] | None:
    """`item` with its pixels at 255 times their values where they are floats within
    [0, 1], not all zero; None for any other item."""
    key = PIXEL_KEYS.get(modality)
    if key is None or not item.get(key):
        return None
    (pixels,) = item[key]
    if not _unit_range(pixels):
        return None
    return {**item, key: [pixels * FULL_SCALE]}


def scaled_twice(sent: Mapping[str, Any], meant: Mapping[str, Any]) -> bool:
    """Whether the processor output for the pixels as sent parts from the one for them at
    255 times their values (`scaled_up`), in any floating tensor both hold alike."""
    import torch

    for key, value in sent.items():
        other = meant.get(key)
        if (isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor) and value.is_floating_point()
                and value.shape == other.shape and other.numel()):
            if (value - other).abs().max() > APART * other.abs().max():
                return True
    return False


def _unit_range(pixels: Any) -> bool:
    import numpy as np
    import torch

    if isinstance(pixels, torch.Tensor):
        if not pixels.is_floating_point() or not pixels.numel():
            return False
        low, high = pixels.min().item(), pixels.max().item()
    elif isinstance(pixels, np.ndarray):
        if not np.issubdtype(pixels.dtype, np.floating) or not pixels.size:
            return False
        low, high = float(pixels.min()), float(pixels.max())
    else:
        return False  # PIL images and lists of frames hold integers
    return 0 <= low and 0 < high <= 1
