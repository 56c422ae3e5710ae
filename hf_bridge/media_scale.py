"""Media sent at another scale than the HF processor takes, where it would run silently:

- pixels already scaled to [0, 1] (torchvision's `ToTensor`, `array / 255`), where the
  image or video processor multiplies by `rescale_factor` (1/255) again, whatever the dtype;
- audio as integer PCM samples (`scipy.io.wavfile.read`'s int16), or floats at their
  scale (such a clip resampled by vLLM), where the feature extractor takes floats within
  [-1, 1].

transformers 5 no longer warns of either, and the model saw a nearly black image, or heard a
clip 32768 times louder, in transformers and in every vLLM backend alike. Whether a
processor misreads an item is measured on the item itself, not assumed: processed again at
the scale meant, it gives the output the sender meant, and a processor that reads the
sent scale itself (a feature extractor that normalizes each clip) gives it for both.
Pure functions: no vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .probes import HF_DATA_KEYS

SUB_PROCESSORS = {"image": "image_processor", "video": "video_processor"}
FULL_SCALE = 255
"""The value of a full pixel in the 0-255 range the processors' `rescale_factor` undoes."""
PCM_FLOOR = 256
"""A float clip reaching past this holds PCM values: clipped audio in [-1, 1] overshoots by
a little, and 8-bit PCM is unsigned, read as floats by no loader."""
PCM_FULL_SCALES = (2**15, 2**31)
"""16- and 32-bit PCM's full scale, which a float clip's loudest sample picks between."""
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


def at_meant_scale(modality: str, item: Mapping[str, list]) -> dict[str, list] | None:
    """`item` at the scale its processor takes, where it was sent at another: pixels that
    are floats within [0, 1], not all zero, at 255 times their values; PCM audio samples as
    floats within [-1, 1]. None for any other item."""
    media = sent_media(modality, item)
    if media is None:
        return None
    key = media_key(modality)
    if modality == "audio":
        meant = _clip_at_unit_scale(media)
        return None if meant is None else {**item, key: [meant]}
    if not _unit_range(media):
        return None
    return {**item, key: [media * FULL_SCALE]}


def media_key(modality: str) -> str | None:
    """Where an item's pixels or samples sit in the processor's keyword layout."""
    keys = HF_DATA_KEYS.get(modality)
    return keys[0] if keys else None


def sent_media(modality: str, item: Mapping[str, list]) -> Any:
    """The item's one image, video or clip as sent; None where its layout holds none."""
    key = media_key(modality)
    return item[key][0] if key is not None and item.get(key) else None


def parts_from(sent: Mapping[str, Any], meant: Mapping[str, Any]) -> bool:
    """Whether the processor output for the item as sent parts from the one for it at the
    scale meant (`at_meant_scale`), in any floating tensor both hold alike."""
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


def pcm_as_unit_floats(samples: Any) -> Any:
    """Integer PCM samples as floats within [-1, 1], as soundfile and torchaudio read a
    clip: full scale is the type's range; unsigned (8-bit) is centred on half of it."""
    half_range = 2.0 ** (8 * samples.dtype.itemsize - 1)
    return (samples - half_range * (samples.dtype.kind == "u")) / half_range


def _clip_at_unit_scale(samples: Any) -> Any:
    """A clip of PCM samples (integers, or floats reaching past `PCM_FLOOR`) as floats
    within [-1, 1]; None for a clip of floats in that range."""
    import numpy as np

    if not isinstance(samples, np.ndarray) or not samples.size:
        return None
    if samples.dtype.kind in "iu":
        return pcm_as_unit_floats(samples).astype(np.float32)
    if samples.dtype.kind != "f" or (peak := float(np.abs(samples).max())) <= PCM_FLOOR:
        return None
    return (samples / next((scale for scale in PCM_FULL_SCALES if peak <= scale), PCM_FULL_SCALES[-1])).astype(np.float32)
