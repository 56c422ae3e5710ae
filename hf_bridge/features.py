"""Run an HF model's own `get_<modality>_features` on one batch of items: no vLLM import.

hf_bridge's wrapper encodes every item through it (`mm_embedding.py`), and so does the GPU
check (`bench/encoder_graphs_gpu.py`), which captures exactly this code in a real
`torch.cuda.CUDAGraph` on a machine without vLLM. A model with no such entry, whose
forward encodes items inline (Qwen2-Audio), is run through that forward instead, up to
the embeddings it hands its decoder (`encode_inline`); so is one whose entry returns the
tower's rows and whose forward projects them further (Llama 4). An item whose one row the
entry cannot give alone is encoded beside a copy of itself (`_first_of_pair`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import weakref
from typing import Any

import torch

from . import LOGGER_NAME
from .side_features import SideFeatures, side_levels, widen

logger = logging.getLogger(LOGGER_NAME)


def join_items(values: list[Any]) -> Any:
    """One field of several items as one call takes it: tensors concatenated along their
    first dimension (as the HF processor lays out items of one size), other values listed."""
    if isinstance(values[0], torch.Tensor):
        return torch.cat([v if v.ndim else v[None] for v in values])
    return values[0] if len(values) == 1 else values


def encode(
    hf_model: torch.nn.Module,
    modality: str,
    fields: dict[str, Any],
    hidden_size: int,
    side_features: SideFeatures | None = None,
    num_embeds: int | None = None,
) -> torch.Tensor:
    """One row of width `hidden_size` per embedding position, items in order; with
    `side_features`, the multi-level features the decoder adds ride along as columns (and
    `side_features` keeps the decoder layers the output names for them).
    `num_embeds` (the items' embedding positions in all) is needed by a model that
    encodes inline (`encode_inline`), and to mend a call for one row (`_first_of_pair`)."""
    one_row = num_embeds == 1
    paired_at_once = one_row and modality in _ONE_ROW_IN_PAIRS.get(hf_model, ())
    if paired_at_once:
        with contextlib.suppress(Exception):  # else the item's own call says what is wrong with it
            return _first_of_pair(hf_model, modality, fields, hidden_size, side_features)
    try:
        return _encode(hf_model, modality, fields, hidden_size, side_features, num_embeds)
    except Exception as alone:  # noqa: BLE001 - transformers' own code, whatever it raises
        if not one_row or paired_at_once:
            raise
        try:
            rows = _first_of_pair(hf_model, modality, fields, hidden_size, side_features)
        except Exception:  # noqa: BLE001 - the item's own failure is the one to report
            raise alone from None
        _ONE_ROW_IN_PAIRS.setdefault(hf_model, set()).add(modality)
        logger.warning(
            "hf_bridge: %s.%s raised on a call for one embedding row (%s: %s); beside a copy of itself, the item "
            "encoded. hf_bridge encodes every one-row %s item so from now on, keeping the first copy's row",
            type(hf_model).__name__, features_entry_name(hf_model, modality) or "forward", type(alone).__name__, alone,
            modality)
        return rows


ONE_ROW_PAIR = 2
"""Copies of an item a one-row call is made for: the fewest that give more than one row."""

_ONE_ROW_IN_PAIRS: weakref.WeakKeyDictionary[torch.nn.Module, set[str]] = weakref.WeakKeyDictionary()
"""Per HF model, the modalities whose entry raised on a call for one embedding row, where
two copies of the item encoded: Mistral 3's `get_image_features` squeezes its projector's
one-row output to a vector, then splits that by the image's one row (an image of at most
28x28 pixels). Only such calls are paired: one of more rows runs as it comes."""


def _first_of_pair(
    hf_model: torch.nn.Module, modality: str, fields: dict[str, Any], hidden_size: int, side_features: SideFeatures | None,
) -> torch.Tensor:
    """The one item of `fields` encoded beside a copy of itself, and its own row kept."""
    pair = {k: join_items([v] * ONE_ROW_PAIR) for k, v in fields.items()}
    rows = _encode(hf_model, modality, pair, hidden_size, side_features, ONE_ROW_PAIR)
    if rows.shape[0] != ONE_ROW_PAIR:
        raise ValueError(f"{ONE_ROW_PAIR} copies of a one-row item gave {rows.shape[0]} rows")
    return rows[:1]


def _encode(
    hf_model: torch.nn.Module,
    modality: str,
    fields: dict[str, Any],
    hidden_size: int,
    side_features: SideFeatures | None,
    num_embeds: int | None,
) -> torch.Tensor:
    device = next(hf_model.parameters()).device
    fields = {k: v.to(device) if isinstance(v, torch.Tensor) and v.device != device else v for k, v in fields.items()}
    completed = modality in _COMPLETED_BY_FORWARD.get(hf_model, ()) and num_embeds is not None  # else the entry counts the rows
    if completed or encodes_inline(hf_model, hf_model.config, modality) or entry_reads_token_ids(hf_model, modality):
        return _inline(hf_model, modality, fields, num_embeds, side_features)
    get_features = features_entry(hf_model, modality)
    accepted = accepted_kwargs(get_features)
    kwargs = {k: v for k, v in fields.items() if accepted is None or k in accepted}
    kwargs = _unnamed_pixel_inputs(get_features, kwargs)
    output = get_features(**kwargs, return_dict=True)
    features = getattr(output, "pooler_output", None)
    if features is None:  # a tower with no pooling (Fuyu's patch projection)
        features = getattr(output, "last_hidden_state", output)
    levels = side_levels(output) if side_features is not None or features is None else []
    if features is None and levels:  # side features only: the HF model zeroes these tokens' embeddings (Granite 4 Vision)
        features = levels[0].new_zeros(levels[0].shape[0], hidden_size)
    if isinstance(features, torch.Tensor):
        features = [features]
    if features[0].shape[-1] != hidden_size and modality in feature_token_ids(hf_model.config):
        _COMPLETED_BY_FORWARD.setdefault(hf_model, set()).add(modality)
        return _inline(hf_model, modality, fields, num_embeds or sum(f.numel() // f.shape[-1] for f in features), side_features)
    rows = [f.reshape(-1, hidden_size) for f in features]
    rows = rows[0] if len(rows) == 1 else torch.cat(rows)  # one tensor: no copy
    if num_embeds is not None and rows.shape[0] < num_embeds and modality in feature_token_ids(hf_model.config) and not levels:
        _COMPLETED_BY_FORWARD.setdefault(hf_model, set()).add(modality)
        return _inline(hf_model, modality, fields, num_embeds, side_features)
    if side_features is None:
        placed = _rows_the_forward_places_instead(hf_model, modality, fields, rows, num_embeds) if not levels else None
        return rows if placed is None else placed
    side_features.remember(output)
    return widen(rows, levels)


_COMPLETED_BY_FORWARD: weakref.WeakKeyDictionary[torch.nn.Module, set[str]] = weakref.WeakKeyDictionary()
"""Per HF model, the modalities whose entry returns rows its forward completes before
placing them: of another width than the decoder's, which it projects (Llama 4 applies its
projector outside `get_image_features`), fewer than the item's positions, which it pads
(Gemma 3n's audio, to its 188 positions with rows of its audio embedder), or other rows
than it places (`_rows_the_forward_places_instead`): encoded inline, through that
forward, once seen."""

_ENTRY_CHECKED: weakref.WeakKeyDictionary[torch.nn.Module, set[str]] = weakref.WeakKeyDictionary()
"""Per HF model, the modalities whose entry's rows were checked against the rows its
forward places (`_rows_the_forward_places_instead`): once each."""

ENTRY_RTOL = 1e-3
"""How far, relative to the largest row value (at least 1), an entry's rows may lie from
the rows the forward places and still be taken as the same computation (validate's
encoder tolerance)."""


def _rows_the_forward_places_instead(
    hf_model: torch.nn.Module, modality: str, fields: dict[str, Any], rows: torch.Tensor, num_embeds: int | None,
) -> torch.Tensor | None:
    """The rows the HF model's forward places for these items, where they are not the
    rows its entry gave; None where they are, or cannot be had. Checked on a modality's
    first items whose forward can encode them (its config names their token), then never
    again. The forward may call the entry with arguments of its own: Gemma 3n's passes
    its audio entry the inverse of the processor's `input_features_mask`, then puts its
    padding row where that mask marks padding. A clip of 30 s, with no padding, gives
    the entry all 188 rows, the same count the forward places, yet other rows (the
    entry, handed the processor's mask, masks every frame)."""
    checked = _ENTRY_CHECKED.setdefault(hf_model, set())
    if num_embeds is None or modality in checked:
        return None
    checked.add(modality)
    if modality not in feature_token_ids(hf_model.config):
        return None
    try:
        placed = encode_inline(hf_model, modality, fields, num_embeds)
    except Exception:  # noqa: BLE001 - the forward cannot encode them alone: the entry is all there is
        return None
    scale = max(rows.abs().max().item(), placed.abs().max().item(), 1.0)
    if placed.shape == rows.shape and torch.allclose(placed.to(rows.dtype), rows, rtol=0.0, atol=ENTRY_RTOL * scale):
        return None
    _COMPLETED_BY_FORWARD.setdefault(hf_model, set()).add(modality)
    logger.info(
        "hf_bridge: %s.%s gave other rows for %s items than its forward places; hf_bridge encodes them through that "
        "forward from now on", type(hf_model).__name__, features_entry_name(hf_model, modality), modality)
    return placed.to(rows.dtype)


def _inline(hf_model: torch.nn.Module, modality: str, fields: dict[str, Any], num_embeds: int | None, side_features: SideFeatures | None) -> torch.Tensor:
    if num_embeds is None:
        raise ValueError(f"{type(hf_model).__name__} encodes {modality} items inline: their embedding count (num_embeds) is needed")
    if side_features is not None:
        raise ValueError(f"{type(hf_model).__name__} encodes {modality} items inline, which hands back no side features")
    return encode_inline(hf_model, modality, fields, num_embeds)


def features_entry_name(model: Any, modality: str) -> str | None:
    """The name of the HF model's (or model class's) `get_<modality>_features`; videos fall
    back to the image entry where the model has no video one: its forward encodes video
    frames as images (Perception LM). None where it has neither: its forward encodes such
    items inline (Qwen2-Audio: `encodes_inline`)."""
    names = (f"get_{modality}_features", "get_image_features") if modality == "video" else (f"get_{modality}_features",)
    return next((name for name in names if hasattr(model, name)), None)


def entry_reads_token_ids(model: Any, modality: str) -> bool:
    """Whether the HF model's (or model class's) entry for `modality` requires the prompt's
    token ids: Music Flamingo's `get_audio_features` times a clip's windows by its run of
    audio tokens. Only the forward, which holds them, can call it; each item is then
    encoded alone, its run its own."""
    return _entry_reads_token_ids(model if isinstance(model, type) else type(model), modality)


@functools.lru_cache(maxsize=None)
def _entry_reads_token_ids(model_class: type, modality: str) -> bool:  # asked on every encoder call
    name = features_entry_name(model_class, modality)
    if name is None:
        return False
    parameter = inspect.signature(getattr(model_class, name)).parameters.get("input_ids")
    return parameter is not None and parameter.default is parameter.empty


def features_entry(hf_model: torch.nn.Module, modality: str):
    """The HF model's entry that encodes `modality` (`features_entry_name`)."""
    name = features_entry_name(hf_model, modality)
    if name is None:
        raise AttributeError(f"{type(hf_model).__name__} has no get_{modality}_features: hf_bridge cannot encode its {modality} items")
    return getattr(hf_model, name)


def encoding_modality(hf_model: torch.nn.Module | type, typed: str, own: str, item_keys) -> str:
    """The modality whose entry on the HF model (or model class) encodes an item of
    modality `own` that its processor typed as `typed`: the typed one (InternVL types a
    video's frames as image tokens, hands them over as `pixel_values` and encodes them as
    images), unless that entry takes none of the item's fields (`item_keys`) where its own
    modality's entry takes some: Nemotron-H-Omni types a video's tokens as image tokens
    too, and encodes its `pixel_values_videos` with `get_video_features`."""
    if typed == own:
        return typed
    model_class = hf_model if isinstance(hf_model, type) else type(hf_model)
    return _encoding_modality(model_class, typed, own, frozenset(item_keys))


@functools.lru_cache(maxsize=None)
def _encoding_modality(model_class: type, typed: str, own: str, item_keys: frozenset[str]) -> str:
    def takes_the_item(modality: str) -> bool:
        name = features_entry_name(model_class, modality)
        if name is None:
            return False
        parameters = inspect.signature(getattr(model_class, name)).parameters.values()
        return any(p.name in item_keys for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))

    return own if takes_the_item(own) and not takes_the_item(typed) else typed


SUB_CONFIG_PREFIX = {"image": "vision"}
"""The sub-config a modality's tower is configured in, where not named for the modality."""


def feature_token_ids(config: Any) -> dict[str, int]:
    """The token the HF model fills with each modality's encoder rows, where its config
    names one (`image_token_id` / `image_token_index`, likewise video and audio): at its
    top level, else in the modality's own sub-config (Phi-4-multimodal's
    `vision_config.image_token_id`, `audio_config.audio_token_id`)."""
    found = {}
    for modality in ("image", "video", "audio"):
        levels = (config, getattr(config, f"{SUB_CONFIG_PREFIX.get(modality, modality)}_config", None))
        for level in levels:
            value = next((v for f in (f"{modality}_token_id", f"{modality}_token_index") if isinstance(v := getattr(level, f, None), int)), None)
            if value is not None:
                found[modality] = value
                break
    return found


def encodes_inline(model: Any, config: Any, modality: str) -> bool:
    """Whether the HF model (or model class) has no entry for `modality`, but its forward
    can encode such items inline: its config names the token it fills with their rows."""
    return features_entry_name(model, modality) is None and modality in feature_token_ids(config)


class _EmbedsHandedOver(Exception):
    def __init__(self, inputs_embeds: torch.Tensor | None, kwargs: dict[str, Any] | None = None):
        self.inputs_embeds = inputs_embeds
        self.kwargs = kwargs or {}


class _DecoderStandIn(torch.nn.Module):
    """Takes the decoder's place for one forward: whatever the forward asks of the decoder
    before calling it (its input embeddings) comes from the decoder; the call itself stops
    the forward there, handing over the embeddings it was given."""

    def __init__(self, decoder: torch.nn.Module):
        super().__init__()
        object.__setattr__(self, "decoder", decoder)  # not a child: no second registration

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["decoder"], name)

    def forward(self, *args: Any, inputs_embeds: torch.Tensor | None = None, **kwargs: Any) -> None:
        raise _EmbedsHandedOver(inputs_embeds, kwargs)


class _FirstLayerStandIn(torch.nn.Module):
    """Takes a flat model's first decoder layer's place for one forward, handing over the
    hidden states it was given."""

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        raise _EmbedsHandedOver(hidden_states)


def encode_inline(hf_model: torch.nn.Module, modality: str, fields: dict[str, Any], num_embeds: int) -> torch.Tensor:
    """The rows the HF model's own forward places at `num_embeds` positions of its
    `modality` token (`feature_token_ids`), for a model whose forward encodes items
    inline, with no entry to call: the forward runs on a prompt of those positions alone,
    and stops where it hands its decoder the embeddings (the decoder never runs). `fields`
    are on the model's device (`encode` puts them there).

    The decoder is swapped for a stand-in rather than hooked: vLLM's compiled decoder
    classes are called without running module hooks.

    One row is taken from the item placed beside a copy of itself: to the forward, a
    prompt of one position looks like a decoding step, which some forwards pass on
    without placing any item (Qwen2-Audio's merges audio only where
    `input_ids.shape[1] != 1`, so a clip of one audio token, under 70 ms, would keep its
    token's own embedding)."""
    if num_embeds == 1:
        with contextlib.suppress(Exception):  # items that cannot be paired: placed alone
            pair = {k: join_items([v] * ONE_ROW_PAIR) for k, v in fields.items()}
            return _placed_rows(hf_model, modality, pair, ONE_ROW_PAIR)[:1]
    return _placed_rows(hf_model, modality, fields, num_embeds)


def _placed_rows(hf_model: torch.nn.Module, modality: str, fields: dict[str, Any], num_embeds: int) -> torch.Tensor:
    accepted = accepted_kwargs(hf_model.forward)
    kwargs = {k: v for k, v in fields.items() if accepted is None or k in accepted}
    device = next(hf_model.parameters()).device
    input_ids = torch.full((1, num_embeds), feature_token_ids(hf_model.config)[modality], device=device)
    if hf_model.get_decoder() is hf_model:
        _check_layers_take_embeddings_as_given(hf_model)
    embeds = _embeds_handed_over(hf_model, input_ids, kwargs)
    if embeds is None:
        raise ValueError(f"{type(hf_model).__name__}'s forward handed its decoder no inputs_embeds: hf_bridge cannot encode its {modality} items")
    return embeds[0]


def _embeds_handed_over(hf_model: torch.nn.Module, input_ids: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor | None:
    handed = handed_to_decoder(hf_model, input_ids, kwargs)
    return None if handed is None else handed.get("inputs_embeds")


def handed_to_decoder(hf_model: torch.nn.Module, input_ids: torch.Tensor, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """What the HF model's forward hands on from its embedding step (`inputs_embeds`, and
    the decoder's other keyword arguments): to its decoder child, or, in a flat model that
    is its own decoder (Phi-4-multimodal), to its first decoder layer (its hidden states
    only). `forward` is called, not the module: vLLM's compile decorator replaces the
    decoder class's `__call__` (a flat model's own), and would trace this call."""
    decoder = hf_model.get_decoder()
    if decoder is hf_model:
        name, stand_in = decoder_layers_name(hf_model), torch.nn.ModuleList([_FirstLayerStandIn()])
    else:
        name = next((n for n, child in hf_model.named_children() if child is decoder), None)
        if name is None:
            raise ValueError(f"{type(hf_model).__name__} encodes items inline and has no decoder child to stop its forward at")
        stand_in = _DecoderStandIn(decoder)
    kept = getattr(hf_model, name)
    setattr(hf_model, name, stand_in)
    try:
        with _evaluating(hf_model):
            hf_model.forward(input_ids=input_ids, **kwargs)
    except _EmbedsHandedOver as handed:
        return {**handed.kwargs, "inputs_embeds": handed.inputs_embeds}
    finally:
        setattr(hf_model, name, kept)
    return None


@contextlib.contextmanager
def _evaluating(model: torch.nn.Module):
    """`model` in eval mode, each module's own mode restored after. vLLM switches a model to
    eval mode only once loading returns, after `process_weights_after_loading`, where
    hf_bridge asks the forward: in training mode, a tower's batch norm (Parakeet's) would
    fold the blank items into its running statistics, and dropout would draw."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def decoder_layers_name(model: torch.nn.Module) -> str:
    """The child of `model` (a decoder, or a flat model that is its own) holding its decoder
    layers: the list of as many modules as its config names layers."""
    count = model.config.get_text_config().num_hidden_layers
    for name, child in model.named_children():
        if isinstance(child, torch.nn.ModuleList) and len(child) == count:
            return name
    raise ValueError(f"{type(model).__name__} has no list of {count} decoder layers among its children")


_CHECKED_FLAT: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def _check_layers_take_embeddings_as_given(hf_model: torch.nn.Module) -> None:
    """A flat model's first layer must receive the embeddings unchanged for a prompt with
    no media (no scaling in between, as vLLM hands the forward the rows `encode` returns
    as its `inputs_embeds`); checked once per model on one token."""
    if hf_model in _CHECKED_FLAT:
        return
    table = hf_model.get_input_embeddings().weight
    ids = table.detach().abs().sum(-1).argmax().reshape(1, 1)  # a row no scaling leaves as it is (not padding's zeros)
    handed = _embeds_handed_over(hf_model, ids, {})
    if handed is None or not torch.equal(handed, hf_model.get_input_embeddings()(ids)):
        raise ValueError(
            f"{type(hf_model).__name__} encodes media inside its forward, and changes the token embeddings before "
            "its first decoder layer, so hf_bridge cannot take the embeddings that forward builds; serve it with "
            "vLLM's native implementation (model_impl=\"vllm\") where vLLM has one."
        )
    _CHECKED_FLAT.add(hf_model)


def _unnamed_pixel_inputs(fn, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with required inputs of `fn` that the processor names differently
    filled, in order, with its floating-point fields that `fn` does not name.

    Fuyu's processor returns `image_patches`, which its HF forward hands on to
    `get_image_features(pixel_values)` positionally.
    """
    named, required = _parameters(fn)
    missing = [name for name in required if name not in kwargs]
    if not missing:
        return kwargs
    spare = [k for k, v in kwargs.items() if k not in named and isinstance(v, torch.Tensor) and v.is_floating_point()]
    out = {k: v for k, v in kwargs.items() if k not in spare[: len(missing)]}
    out.update({name: kwargs[key] for name, key in zip(missing, spare)})
    return out


def _parameters(fn) -> tuple[frozenset[str], tuple[str, ...]]:
    """(every parameter name, the required ones passable by name) of `fn`."""
    return _function_parameters(getattr(fn, "__func__", fn), hasattr(fn, "__func__"))


@functools.lru_cache(maxsize=None)
def _function_parameters(fn, bound: bool) -> tuple[frozenset[str], tuple[str, ...]]:
    # cached per function, not per bound method: a bound method would keep its model alive
    params = dict(list(inspect.signature(fn).parameters.items())[1 if bound else 0 :])
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = tuple(n for n, p in params.items() if p.default is inspect.Parameter.empty and p.kind in kinds)
    return frozenset(params), required


def accepted_kwargs(fn) -> frozenset[str] | None:
    """Named parameters of `fn`, or None if it takes `**kwargs` (then pass everything)."""
    return _functionaccepted_kwargs(getattr(fn, "__func__", fn))


@functools.lru_cache(maxsize=None)
def _functionaccepted_kwargs(fn) -> frozenset[str] | None:
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)

