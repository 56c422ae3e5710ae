"""Visual features that reach the decoder by a path other than the input embeddings.

Qwen3-VL's vision tower returns, besides its output embeddings, features from
intermediate layers (`deepstack_features` on the encoder output); the HF model adds
level `i` to the hidden states of decoder layer `i` at the visual positions, through
the text model's `visual_pos_masks` / `deepstack_visual_embeds` arguments. Granite 4
Vision's returns only such levels, each named with the decoder layer it goes to
(`(layer, features)` pairs); its HF model zeroes the image tokens' input embeddings and
adds each level before its layer, through `vision_mask` / `deepstack_features` (a dict
by layer). These names are transformers conventions shared by the models that do this
(`DECODER_CONVENTIONS`), so hf_bridge keys on them, not on an architecture.

vLLM moves one embedding row per placeholder token from the encoder to the decoder. So
each item's side features travel as extra columns of its embedding rows (`widen`), are
split off again where vLLM merges embeddings into the prompt (`SideFeatures.split`),
and are handed to the text model for the step as a full-length buffer: zeros at text
positions, so adding them there changes nothing, and every shape depends only on the
number of tokens in the step (`SideFeatures.decoder_kwargs`).
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass

import torch

from . import LOGGER_NAME
from .step_kwargs import hand_step_kwargs, keep_eager

logger = logging.getLogger(LOGGER_NAME)

ENCODER_FIELD = "deepstack_features"
"""The encoder output field holding per-level side features (a list over levels)."""


@dataclass(frozen=True)
class DecoderConvention:
    """How a text model's forward takes side features."""

    mask_arg: str
    features_arg: str
    by_layer: bool
    """Features as a dict by decoder layer, layers named by the encoder output; else a
    list, level `i` added at layer `i`."""


DECODER_CONVENTIONS = (
    DecoderConvention("visual_pos_masks", "deepstack_visual_embeds", by_layer=False),  # Qwen3-VL
    DecoderConvention("vision_mask", "deepstack_features", by_layer=True),  # Granite 4 Vision
)
DECODER_MASK_ARG, DECODER_FEATURES_ARG = DECODER_CONVENTIONS[0].mask_arg, DECODER_CONVENTIONS[0].features_arg


def _is_layer_pair(level) -> bool:
    return isinstance(level, tuple) and len(level) == 2 and isinstance(level[0], int)


def side_levels(output) -> list[torch.Tensor]:
    """The encoder output's side features, one `[rows, hidden]` tensor per level."""
    levels = getattr(output, ENCODER_FIELD, None)
    if not levels:
        return []
    levels = [level[1] if _is_layer_pair(level) else level for level in levels]
    return [torch.cat(list(level)) if isinstance(level, (list, tuple)) else level for level in levels]


def level_layers(output) -> list[int] | None:
    """The decoder layer each level goes to, where the encoder output names them (Granite
    4 Vision's `(layer, features)` pairs); None where level `i` goes to layer `i`."""
    levels = getattr(output, ENCODER_FIELD, None)
    return [level[0] for level in levels] if levels and all(_is_layer_pair(level) for level in levels) else None


def widen(rows: torch.Tensor, levels: list[torch.Tensor]) -> torch.Tensor:
    """Embedding rows with each level's features appended as extra columns."""
    return torch.cat([rows, *(level.reshape(rows.shape[0], -1) for level in levels)], dim=-1) if levels else rows


def decoder_convention(language_model: torch.nn.Module) -> DecoderConvention | None:
    params = inspect.signature(language_model.forward).parameters
    return next((c for c in DECODER_CONVENTIONS if c.mask_arg in params and c.features_arg in params), None)


INTERMEDIATE_KEY = "hf_bridge_side_features"
"""The side features' entry in the tensors one pipeline rank sends the next."""


def _deepstack_settings(config) -> list:
    """The `deepstack_*` settings of the vision config (Qwen3-VL) or of the model's
    (Granite 4 Vision's `deepstack_layer_map`), transformers' name for side features."""
    vision = getattr(config, "vision_config", None)
    return [value for level in (vision, config) for name, value in vars(level or object()).items() if "deepstack" in name]


def has_side_features(config) -> bool:
    """Whether the vision tower feeds the decoder features besides its embeddings (an
    embedding input cannot carry them)."""
    return any(_deepstack_settings(config))


def configured_levels(config) -> int:
    """How many levels the vision tower emits, from its config (the `deepstack_*` list
    settings): the width the pipeline ranks exchange must be fixed."""
    lists = [v for v in _deepstack_settings(config) if isinstance(v, (list, tuple))]
    return len(lists[0]) if lists else 0


class SideFeatures:
    """Carries one step's side features from `embed_input_ids` to the text model.

    Under pipeline parallelism the features are computed on the first rank and travel
    with the intermediate tensors (`send`, `receive`); each rank adds only the levels of
    the decoder layers it holds (`owned_levels`), since the HF text model would otherwise
    add a level after a layer that is missing on this rank (vLLM's `PPMissingLayer`).
    """

    def __init__(self, hidden_size: int, owned_levels: range | None = None, convention: DecoderConvention = DECODER_CONVENTIONS[0]):
        self.hidden_size = hidden_size
        self.owned_levels = owned_levels
        self.convention = convention
        self.level_layers: list[int] | None = None
        """The decoder layer of each level, where the encoder output names them (`remember`)."""
        self._pending: torch.Tensor | None = None

    def remember(self, output) -> None:
        """Keep the decoder layers an encoder output names for its levels (fixed per model)."""
        self.level_layers = level_layers(output) or self.level_layers

    def send(self, num_tokens: int, levels: int, like: torch.Tensor) -> torch.Tensor:
        """This step's features for the next rank (zeros where there are none)."""
        buffer = self._pending
        if buffer is None:
            return like.new_zeros(num_tokens, self.hidden_size * levels)
        return buffer[:num_tokens]

    def receive(self, buffer: torch.Tensor) -> None:
        self._pending = buffer

    def split(self, embeddings, is_multimodal: torch.Tensor | None, num_tokens: int):
        """Strip side columns off `embeddings`; keep them, placed at their tokens, for the
        step. An item without them (Qwen3-Omni's audio, beside its images and video in a
        prompt or a step) gets zeros there, which add nothing: transformers adds side
        features at visual positions only."""
        self._pending = None
        if not embeddings or is_multimodal is None:
            return embeddings
        width = max(e.shape[-1] for e in embeddings)
        if width == self.hidden_size:
            return embeddings
        main = [e[:, : self.hidden_size] for e in embeddings]
        side = torch.cat([e.new_zeros(e.shape[0], width - self.hidden_size) if e.shape[-1] == self.hidden_size
                          else e[:, self.hidden_size :] for e in embeddings])
        buffer = side.new_zeros(num_tokens, side.shape[-1])
        buffer[is_multimodal] = side
        self._pending = buffer
        return main

    def decoder_kwargs(self, num_tokens: int) -> dict[str, object]:
        """`visual_pos_masks` over every token, and each level at full length (zeros at text)."""
        buffer, self._pending = self._pending, None
        if buffer is None:
            return {}
        if buffer.shape[0] < num_tokens:  # a runner may pad the step; padding gets zeros
            buffer = torch.cat([buffer, buffer.new_zeros(num_tokens - buffer.shape[0], buffer.shape[1])])
        levels = list(buffer[:num_tokens].split(self.hidden_size, dim=-1))
        if self.convention.by_layer:
            if self.level_layers is None or len(self.level_layers) != len(levels):
                raise RuntimeError(f"hf_bridge has {len(levels)} side-feature levels but no decoder layer named for each: {self.level_layers}")
            # a dict, as the HF model builds it: a later level for the same layer replaces an earlier one
            mask = torch.ones(1, num_tokens, 1, dtype=torch.bool, device=buffer.device)
            return {self.convention.mask_arg: mask, self.convention.features_arg: dict(zip(self.level_layers, levels))}
        if self.owned_levels is not None:  # another rank adds the others (see the class)
            levels = [level if i in self.owned_levels else torch.zeros_like(level) for i, level in enumerate(levels)]
        mask = torch.ones(1, num_tokens, dtype=torch.bool, device=buffer.device)
        return {self.convention.mask_arg: mask, self.convention.features_arg: levels}

    def install(self, language_model: torch.nn.Module) -> None:
        """Hand the features to the text model on its next call (the HF model passes None)."""
        hand_step_kwargs(language_model, self.decoder_kwargs)
        # vLLM's compile decorator traces `forward` once, on a profiling step without side
        # features, and replays that graph without re-checking Python state: the features
        # would never reach the decoder. Its own switch keeps this decoder eager.
        if keep_eager(language_model):
            logger.info("hf_bridge runs %s eagerly: its side features change from step to step", type(language_model).__name__)
