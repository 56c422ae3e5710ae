"""The pixel sides an HF processor gives an item's pixel tensors, where it gives every item
the same ones. Pure functions over shapes: no torch, no vLLM.

A processor that resizes every image (or tile, or frame) to one size does so because the
vision encoder takes no other: CLIP's and SigLIP's position tables raise on another
("Input image size (300*400) doesn't match model (224*224)"), and InternVL's or
Idefics3's placeholders hold one tile's worth of features. Processor kwargs can change that
size (`do_resize=False`, `size`, `crop_size`), and a request's kwargs reach the encoder in
the engine's worker, where such an error stops the engine. Fixed sides are learnt by
processing items of different sizes and aspect ratios, small and large (Idefics2's
processor gives small images one size, larger ones their own): sides the processor keeps
whatever the input are fixed by the processor.

Only tensors laid out as images, `(..., channels, height, width)` with `IMAGE_CHANNELS`
channels, have pixel sides: a patch count padded to a budget (Gemma 4's, LFM2-VL's) is
not one, and kwargs change it for models built to take any budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

IMAGE_CHANNELS = (1, 3)
"""Channel counts of a tensor laid out as images: grayscale or RGB."""

Shapes = Mapping[str, Sequence[int]]
"""A processor output's tensor shapes, by key."""

Sides = tuple[int, int]


def tensor_shapes(output: Mapping[str, object]) -> dict[str, tuple[int, ...]]:
    """The shapes of a processor output's arrays (tensors or numpy), by key."""
    return {key: tuple(value.shape) for key, value in output.items() if hasattr(value, "shape")}


def pixel_sides(shape: Sequence[int]) -> Sides | None:
    """(height, width) of a tensor laid out as images; None for any other tensor."""
    if len(shape) >= 4 and shape[-3] in IMAGE_CHANNELS:
        return int(shape[-2]), int(shape[-1])
    return None


def fixed_sides(outputs: Sequence[Shapes]) -> dict[str, Sides]:
    """The keys whose pixel sides are the same in every output (for items of different
    sizes and aspect ratios), with those sides."""
    first, *others = outputs
    fixed = {}
    for key, shape in first.items():
        sides = pixel_sides(shape)
        if sides is not None and all(key in other and pixel_sides(other[key]) == sides for other in others):
            fixed[key] = sides
    return fixed


def changed_sides(fixed: Mapping[str, Sides], shapes: Shapes) -> dict[str, tuple[Sides | None, Sides]]:
    """Keys of `shapes` whose pixel sides differ from the `fixed` ones: key -> (sides, fixed);
    sides are None where the tensor is no longer laid out as images."""
    changed = {}
    for key, sides in fixed.items():
        if key in shapes and (got := pixel_sides(shapes[key])) != sides:
            changed[key] = (got, sides)
    return changed
