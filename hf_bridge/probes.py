"""What an HF processor does with one item, learnt by calling it: no vLLM import.

hf_bridge places items by processing each one alone inside a probe made of the
placeholder text the model's chat template emits (`placeholders.expansion_from_probe`),
and learns the tokens a processor adds outside the expansions from blank-item probes
(`frame.py`). `ProcessorProbe` holds that logic once, for every caller:

- vLLM's processing info (`processing.py`), which calls the processor through vLLM's
  context;
- the plugin's routing at engine start (`plugin.py`), which decides whether hf_bridge
  can place a checkpoint's items at all before choosing its model class;
- `inspect` and the tests.

A processor that cannot be probed for one modality never takes the others down:
`failures` names each modality hf_bridge cannot place, with the processor's own error,
and callers switch exactly those modalities off.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any, TypeVar

from . import errors, frame, numbering, pixel_sides, placeholders, text_step

T = TypeVar("T")

MODALITIES = ("image", "video", "audio")
MODALITY_TYPE_IDS = {"image": 1, "video": 2, "audio": 3}
"""The codes transformers' `create_mm_token_type_ids` types each modality's tokens with."""
HF_DATA_KEYS = {"image": ("images",), "video": ("videos", "video_metadata"), "audio": ("audio",)}
"""The keyword(s) under which `ProcessorMixin.__call__` takes each modality's data."""

PROBE_SENTINEL = "hello"
"""Plain text after a probe's placeholder: where the processor's additions end up shows
which belong after items and which at the end of the prompt (`frame.py`)."""

BLANK_SHAPES = {
    "image": ((112, 112, 1), (224, 224, 1), (448, 448, 1), (56, 56, 1), (28, 28, 1)),
    "video": ((112, 112, 4), (112, 112, 8), (224, 224, 16), (56, 56, 2), (112, 112, 1)),
    "audio": ((1, 1, 1),),
}
"""(width, height, frames) of the blank items a modality is probed with, in order of
preference: the first one the processor accepts is used. A processor may refuse some
(an image larger than it pads to, fewer frames than it samples); videos are also tried
with as many frames as the video processor asks for (`frames_asked_for`)."""

FIXED_SIDES_PROBE = (896, 448)
"""(width, height) of the larger blank items, wide then tall, that the pixel sides a
processor fixes are learnt with, beside its usual blank (`pixel_sides.py`)."""

MAX_BLANK_FRAMES = 256
"""Blank videos hold at most this many frames: probes must stay cheap at engine start."""

VIDEO_FPS = 2.0
"""The frame rate blank and test videos claim, for processors that sample frames by time."""

AUDIO_SECONDS = 1.0
"""The length of a blank clip (any length a feature extractor takes)."""


DEFAULT_SAMPLING_RATE = 16_000
"""Hz, for a feature extractor that names no `sampling_rate` (speech models' usual rate)."""


def audio_extractor(processor: Any) -> Any:
    """The processor's audio sub-processor (`feature_extractor`, or `audio_processor`), if any."""
    return getattr(processor, "feature_extractor", None) or getattr(processor, "audio_processor", None)


def audio_sampling_rate(processor: Any) -> int:
    """The rate, in Hz, the feature extractor takes audio at: vLLM resamples each request's
    clip to it, and a clip sampled at it reaches transformers and vLLM alike."""
    rate = getattr(audio_extractor(processor), "sampling_rate", None)
    return int(rate) if isinstance(rate, (int, float)) and rate > 0 else DEFAULT_SAMPLING_RATE


def longest_audio_seconds(processor: Any) -> float:
    """The longest clip the feature extractor takes whole (`stated_audio_seconds`), where it
    says; else `AUDIO_SECONDS`."""
    stated = stated_audio_seconds(processor)
    return AUDIO_SECONDS if stated is None else stated


def stated_audio_seconds(processor: Any) -> float | None:
    """The longest clip the feature extractor says it takes whole: Whisper-style `n_samples`
    or `chunk_length`, or the `max_length` in samples its call cuts to by default (Gemma 3n's)."""
    extractor = audio_extractor(processor)
    rate = getattr(extractor, "sampling_rate", None)
    samples = getattr(extractor, "n_samples", None)
    if not isinstance(samples, int) and extractor is not None:
        samples = _default_max_length(type(extractor))
    if isinstance(samples, int) and isinstance(rate, int) and rate > 0:
        return samples / rate
    chunk = getattr(extractor, "chunk_length", None)
    return float(chunk) if isinstance(chunk, (int, float)) and chunk > 0 else None


@cache
def _default_max_length(extractor_type: type) -> object:
    """The `max_length` default of the feature extractor's call (read once per class: each
    audio item that misses the processor cache asks)."""
    max_length = inspect.signature(extractor_type.__call__).parameters.get("max_length")
    return max_length.default if max_length is not None else None


Call = Callable[[Mapping[str, object], Mapping[str, object]], Any]
"""`call(data, hf_kwargs)`: the HF processor called on `data`, returning a `BatchFeature`."""


class ProbeError(ValueError):
    """hf_bridge cannot place items of one modality for this processor."""


@dataclass(frozen=True)
class BlankShape:
    width: int
    height: int
    frames: int = 1


def needs_video_metadata(processor: Any, kwargs: Mapping[str, object] = {}) -> bool:
    """Whether the video processor samples frames, and so needs each video's metadata
    (vLLM then requires videos as `(frames, metadata)` pairs): as the call's `kwargs` ask
    (`do_sample_frames`, or within `videos_kwargs`), else as it was saved."""
    videos_kwargs = kwargs.get("videos_kwargs")
    asked = kwargs.get("do_sample_frames", videos_kwargs.get("do_sample_frames") if isinstance(videos_kwargs, Mapping) else None)
    if asked is not None:
        return bool(asked)
    return bool(getattr(getattr(processor, "video_processor", None), "do_sample_frames", False))


def samples_by_time(processor: Any, kwargs: Mapping[str, object] = {}) -> bool:
    """Whether the video processor samples frames by time (an `fps`, no `num_frames`), as
    transformers' `BaseVideoProcessor.sample_frames` reads them: that needs each video's
    metadata (its frame rate and frame count), where a number of frames needs none."""
    if not needs_video_metadata(processor, kwargs):
        return False
    videos_kwargs = kwargs.get("videos_kwargs") if isinstance(kwargs.get("videos_kwargs"), Mapping) else {}
    saved = getattr(processor, "video_processor", None)

    def setting(name: str) -> object:
        return kwargs.get(name, videos_kwargs.get(name, getattr(saved, name, None)))

    return setting("num_frames") is None and setting("fps") is not None


def video_metadata_asked(processor: Any, media: Mapping[str, Any], kwargs: Mapping[str, object]) -> dict[str, Any]:
    """The processor argument asking its video processor for each video's metadata, where
    `media` holds videos it samples frames of: the processor's placeholder step may read it
    without asking itself (Cosmos3-Edge's and MUSE-Glimmer's `replace_video_token`; Qwen3-VL's
    asks in its defaults): as the call samples, or as the processor was saved to, where the
    call sends frames sampled already (vLLM's loader and its profiling dummy say
    `do_sample_frames: False`). Nothing where the caller's `kwargs` already say."""
    samples = needs_video_metadata(processor, kwargs) or needs_video_metadata(processor)
    if "videos" not in media or not samples or {"return_metadata", "videos_kwargs"} & kwargs.keys():
        return {}
    return {"videos_kwargs": {"return_metadata": True}}


def without_asked_metadata(output: Any, kwargs: Mapping[str, object]) -> Any:
    """`output` without the video metadata `video_metadata_asked` asked for (not a model
    input), as transformers' own `ProcessorMixin.__call__` drops it; a processor with a
    `__call__` of its own (MiniCPM-V 4.6's) may not."""
    if not kwargs.get("return_metadata") and "video_metadata" in output:
        del output["video_metadata"]
    return output


def call_reading_one_videos_metadata(call: Callable[[dict[str, Any]], Any], media: dict[str, Any]) -> Any:
    """`call(media)`; where the processor fails reading one video's metadata given as a list
    of one dict (an `AttributeError` or `TypeError`, which vLLM's call wraps in a
    `ValueError`), `call` with it as transformers' `VideoMetadata`, the layout
    Nemotron-H-Omni's processor reads (`video_metadata.fps`), as transformers'
    `VideoMetadataType` allows. The first error where that fails too."""
    try:
        return call(media)
    except Exception as exc:
        metadata = media.get("video_metadata")
        misread = (AttributeError, TypeError)
        if not (isinstance(exc, misread) or isinstance(exc.__cause__, misread)) or not (
                isinstance(metadata, list) and len(metadata) == 1 and isinstance(metadata[0], Mapping)):
            raise
        from transformers.video_utils import VideoMetadata

        try:
            return call({**media, "video_metadata": VideoMetadata(**metadata[0])})
        except Exception:  # noqa: BLE001 - the list's error is the one to report
            raise exc  # noqa: B904


def video_metadata(num_frames: int, fps: float = VIDEO_FPS) -> dict[str, Any]:
    """A video's metadata as vLLM's loader reports it for every frame of a video of
    `fps` frames a second (a blank or test video claims `VIDEO_FPS`; a file whose rate
    OpenCV cannot read, 0, lasts 0 s there too)."""
    return {
        "fps": fps,
        "duration": num_frames / fps if fps > 0 else 0.0,
        "total_num_frames": num_frames,
        "frames_indices": list(range(num_frames)),
        "video_backend": "opencv",
    }


def processor_modalities(processor: Any) -> list[str]:
    """The modalities the processor has a sub-processor for (as vLLM's in-tree backend reads them)."""
    found = []
    if getattr(processor, "audio_processor", None) is not None or getattr(processor, "feature_extractor", None) is not None:
        found.append("audio")
    if hasattr(processor, "image_processor"):
        found.append("image")
    if hasattr(processor, "video_processor"):
        found.append("video")
    return found


def frames_asked_for(processor: Any) -> int | None:
    """The frame count the video processor samples to or requires at least, if it says."""
    video_processor = getattr(processor, "video_processor", None)
    asked = [getattr(video_processor, name, None) for name in ("num_frames", "min_frames")]
    asked = [n for n in asked if isinstance(n, int) and n > 0]
    return max(asked) if asked else None


def blank_shapes(processor: Any, modality: str) -> list[BlankShape]:
    """The blank shapes `modality` is probed with, in order (see `BLANK_SHAPES`)."""
    shapes = [BlankShape(*shape) for shape in BLANK_SHAPES[modality]]
    if modality == "video" and (frames := frames_asked_for(processor)) and frames <= MAX_BLANK_FRAMES:
        shapes.append(BlankShape(112, 112, frames))
    return shapes


def first_accepted_shape(processor: Any, modality: str, attempt: Callable[[BlankShape], T]) -> tuple[BlankShape, T]:
    """The first of `blank_shapes` for which `attempt` returns, and what it returned. A
    `ProbeError` or `PlaceholderError` (the processor ran, and its output cannot be read)
    ends the search; any other error is the processor refusing that blank, and the next
    shape is tried. Where it refuses them all, the `ProbeError` names its error for the first."""
    first_error: Exception | None = None
    shapes = blank_shapes(processor, modality)
    for shape in shapes:
        try:
            return shape, attempt(shape)
        except (ProbeError, placeholders.PlaceholderError):
            raise
        except Exception as exc:  # noqa: BLE001 - the processor refused this blank item
            first_error = first_error or exc
    cause = root_cause(first_error) if first_error else ValueError("no blank item")
    raise ProbeError(
        f"{type(processor).__name__} refused every blank {modality} hf_bridge probes it with "
        f"({', '.join(f'{s.width}x{s.height}' + (f'x{s.frames} frames' if modality == 'video' else '') for s in shapes)}); "
        f"for the first: {type(cause).__name__}: {_first_line(cause)}"
    )


def blank_items(
    processor: Any, modality: str, count: int, shape: BlankShape, seconds: float = AUDIO_SECONDS, fill: int = 0,
    kwargs: Mapping[str, object] = {},
) -> dict[str, list]:
    """`count` blank items of `modality`, keyed as `ProcessorMixin.__call__` takes them;
    clips last `seconds`. Every pixel holds `fill` (0-255) in each channel, every sample
    `fill / 255`. Videos come with their metadata where a call with `kwargs` (the engine's
    and the request's) samples frames."""
    import numpy as np
    from PIL import Image

    if modality == "image":
        return {"images": [Image.new("RGB", (shape.width, shape.height), (fill,) * 3) for _ in range(count)]}
    if modality == "video":
        videos = [np.full((shape.frames, shape.height, shape.width, 3), fill, dtype=np.uint8) for _ in range(count)]
        items: dict[str, list] = {"videos": videos}
        if needs_video_metadata(processor, kwargs):
            items["video_metadata"] = [video_metadata(shape.frames) for _ in range(count)]
        return items
    if modality == "audio":
        rate = audio_sampling_rate(processor)
        return {"audio": [np.full(int(rate * seconds), fill / 255, dtype=np.float32) for _ in range(count)]}
    raise ValueError(f"hf_bridge cannot make a blank {modality} item to probe the processor with")


def token_type_ids(out: Any, processor: Any, config: Any = None):
    """The processor's multimodal token types (Gemma3 calls them `token_type_ids`), else
    transformers' `create_mm_token_type_ids` over its ids (`listed_token_types`). Where
    those type nothing, the tokens the model `config` scatters features by are typed
    (`config_token_types`)."""
    import numpy as np

    type_ids = out.get("mm_token_type_ids", out.get("token_type_ids"))
    # `ProcessorMixin` types by the ids a processor lists: listing none (Janus), it returns zeros
    zeros_for_want_of_ids = (type_ids is not None and not _listed_token_ids(processor) and bool(named_token_ids(processor))
                             and not np.asarray(type_ids).any())
    if type_ids is None or zeros_for_want_of_ids:
        type_ids = listed_token_types(out["input_ids"], processor)
    if (type_ids is None or not np.asarray(type_ids).any()) and config is not None:
        type_ids = config_token_types(out["input_ids"], config) if type_ids is None else np.maximum(
            np.asarray(type_ids), config_token_types(out["input_ids"], config))
    if type_ids is None:
        raise ProbeError(errors.no_token_types(processor))
    return type_ids


def config_token_types(input_ids: Any, config: Any):
    """Each modality's code where the ids hold the token the model config names for it
    (`image_token_id`, ...: what the HF forward's `get_placeholder_mask` scatters features
    by), for a processor that types a marker its own expansion replaces: Ovis2's types
    `<image>`, which it expands to `<IMG_ATOM>` runs between indicator tokens."""
    import numpy as np

    ids = np.asarray(input_ids)
    types = np.zeros_like(ids)
    for modality, token_id in config_token_ids(config).items():
        types[ids == token_id] = MODALITY_TYPE_IDS[modality]
    return types


def config_token_ids(config: Any) -> dict[str, int]:
    """Per modality, the token id the model config names (`image_token_id`, else
    `image_token_index`)."""
    found = {}
    for modality in MODALITIES:
        for name in (f"{modality}_token_id", f"{modality}_token_index"):
            value = getattr(config, name, None)
            if isinstance(value, int):
                found[modality] = value
                break
    return found


def _listed_token_ids(processor: Any) -> list[int]:
    """The multimodal token ids a processor lists as `ProcessorMixin` reads them (`image_token_ids`, ...)."""
    return [i for m in MODALITIES for i in (getattr(processor, f"{m}_token_ids", None) or ()) if i is not None]


def listed_token_types(input_ids: Any, processor: Any):
    """Token types for a processor whose own `__call__` ignores `return_mm_token_type_ids`
    (Idefics2's) but which lists its multimodal tokens (`image_token_ids`, ...) as
    `ProcessorMixin` reads them: transformers' `create_mm_token_type_ids`, which types
    the listed tokens only; the expansions cover the untyped markers around them. Where
    it lists none, the tokens it names by their text (`named_token_ids`) are typed with
    the same codes. None where it does neither."""
    import numpy as np

    create = getattr(processor, "create_mm_token_type_ids", None)
    if not _listed_token_ids(processor):
        named = named_token_ids(processor)
        if not named:
            return None
        ids = np.asarray(input_ids)
        types = np.zeros_like(ids)
        for modality, token_id in named.items():
            types[ids == token_id] = MODALITY_TYPE_IDS[modality]
        return types
    if create is None:
        return None
    try:
        return np.asarray(create(input_ids))
    except TypeError:  # a processor's own override needs what its `__call__` passes (Idefics3's)
        return None


def named_token_ids(processor: Any) -> dict[str, int]:
    """Per modality, the id of the token a processor names by its text alone (Janus's
    `image_token = "<|image_token|>"`), where its tokenizer holds that text as one token;
    none where two modalities would share an id."""
    tokenizer = getattr(processor, "tokenizer", None)
    found = {}
    for modality in MODALITIES:
        token = getattr(processor, f"{modality}_token", None)
        token_id = tokenizer.convert_tokens_to_ids(token) if tokenizer is not None and isinstance(token, str) and token else None
        # an unknown token maps to the unknown id, which maps back to another text
        if isinstance(token_id, int) and tokenizer.convert_ids_to_tokens(token_id) == token:
            found[modality] = token_id
    return found if len(set(found.values())) == len(found) else {}


def chat_template_placeholder(processor: Any, modality: str) -> str | None:
    """The text the chat template emits for one item of `modality`, if it has a template.

    A template may number the items it writes ("Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>",
    Qwen2-Audio's): the placeholder is then the processor's `<modality>_token`, where every
    item's text holds it, and the numbering stays prompt text. Taken whole, the first
    item's text was not found for the second item, and a request with two was refused."""
    one = _template_item_texts(processor, modality, 1)
    if one is None:
        return None
    several = _template_item_texts(processor, modality, 2)
    token = getattr(processor, f"{modality}_token", None)
    if several is not None and len(set(several)) > 1 and isinstance(token, str) and all(token in t for t in several):
        return token
    return one[0]


def _template_item_texts(processor: Any, modality: str, count: int) -> list[str] | None:
    """What the chat template writes for each of `count` items of `modality` in one message,
    between text markers; None where it writes nothing for one, or has no template."""
    if getattr(processor, "chat_template", None) is None:
        return None
    marker = "HFBRIDGEMARKER"
    message = [{"type": "text", "text": marker}]
    for _ in range(count):
        message += [{"type": modality}, {"type": "text", "text": marker}]
    try:
        rendered = processor.apply_chat_template([{"role": "user", "content": message}], tokenize=False)
    except Exception:  # a template that cannot render an item has no placeholder for it
        return None
    parts = rendered.split(marker)
    if len(parts) != count + 2 or not all(part.strip() for part in parts[1:-1]):
        return None
    return [part.strip() for part in parts[1:-1]]


class ProcessorProbe:
    """Learns, by calling an HF processor, where its items go in a prompt.

    `call(data, hf_kwargs)` runs the processor (vLLM's context does it for the engine);
    `default_kwargs` are the processor kwargs frames are learnt with; `merge(hf_kwargs)`
    gives the kwargs a call reaches the processor with (vLLM's context merges the engine's
    into nested `videos_kwargs` too), by default the defaults updated by `hf_kwargs`.
    """

    def __init__(self, processor: Any, tokenizer: Any, config: Any, call: Call, default_kwargs: Mapping[str, object] = {},
                 merge: Callable[[Mapping[str, object]], Mapping[str, object]] | None = None):
        self.processor = processor
        self.tokenizer = tokenizer
        self.config = config
        self.call = call
        self.default_kwargs = dict(default_kwargs)
        self.merge = merge or (lambda hf_kwargs: {**self.default_kwargs, **hf_kwargs})
        self._placeholder_ids: dict[str, list[int]] = {}
        self._frames: dict[str, frame.PromptFrame] = {}
        self._blank_shapes: dict[str, BlankShape] = {}
        self.writes_prompt: set[str] = set()
        """Modalities whose prompts the processor lays out from their text alone (`text_step.py`)."""
        self._cores: dict[tuple[str, str], tuple[int, ...]] = {}
        self._number_windows: dict[tuple[str, str, int], numbering.NumberWindow | None] = {}
        self._stacks_along_rows: dict[str, bool] = {}
        self._fixed_sides: dict[tuple[str, str], dict[str, pixel_sides.Sides]] = {}
        self._blank_lengths: dict[tuple, int] = {}

    # -- placeholders -------------------------------------------------------------------

    @cached_property
    def placeholder_texts(self) -> dict[str, str]:
        """What a prompt holds for one item of each modality: what the chat template
        emits for it, else the processor's `<modality>_token`."""
        out = {}
        for modality in MODALITIES:
            text = chat_template_placeholder(self.processor, modality)
            if text is None:
                text = getattr(self.processor, f"{modality}_token", None)
            if text is not None:
                out[modality] = text
        return out

    def placeholder_text(self, modality: str) -> str:
        if modality not in self.placeholder_texts:
            raise ProbeError(
                f"{type(self.processor).__name__} has no placeholder for {modality} "
                f"(no chat template entry and no `{modality}_token`), so hf_bridge cannot "
                f"tell where a {modality} goes in the prompt"
            )
        return self.placeholder_texts[modality]

    def item_text(self, modality: str) -> str:
        """What a prompt writes for one item: its placeholder, or nothing where the
        processor inserts each item itself (Fuyu's, at the start)."""
        return "" if self.frame(modality).inserts_item else self.placeholder_text(modality)

    def placeholder_ids(self, modality: str) -> list[int]:
        """`placeholder_text` as token ids (encoded once; every request looks for them)."""
        if modality not in self._placeholder_ids:
            text = self.placeholder_text(modality)
            self._placeholder_ids[modality] = self.tokenizer.encode(text, add_special_tokens=False)
        return self._placeholder_ids[modality]

    def embed_token_candidates(self, modality: str) -> list[int]:
        """Tokens the checkpoint names as holding embeddings, most authoritative first.

        The model config comes first (`config_token_ids`): it is what the HF forward
        scatters features by (`get_placeholder_mask`). Processors' own `image_token_id` can
        name a marker instead (Gemma3's is its begin-of-image token). The other modalities'
        tokens follow, for processors that expand one modality into another's tokens.
        """
        named = config_token_ids(self.config)
        candidates: list[int] = []
        for m in (modality, *(m for m in MODALITIES if m != modality)):
            for value in (named.get(m), getattr(self.processor, f"{m}_token_id", None)):
                if isinstance(value, int) and value not in candidates:
                    candidates.append(value)
        return candidates

    # -- one item -----------------------------------------------------------------------

    def probe(self, modality: str, item: Mapping[str, list], hf_kwargs: Mapping[str, object]):
        """Process one item alone; return the processor's output and its expansion."""
        prompt_frame = self.frame(modality)
        text = self.item_text(modality)
        probe_ids = self.tokenizer.encode(text)
        span = self._placeholder_span(modality, probe_ids, prompt_frame)
        out = self.call_one_item(text, item, hf_kwargs)
        ids = out["input_ids"][0].tolist()
        types = token_type_ids(out, self.processor, self.config)[0].tolist()
        ids, types = frame.strip_frame(prompt_frame, ids, types)
        expansion = placeholders.expansion_from_probe(
            modality, probe_ids, span, ids, types, self.embed_token_candidates(modality)
        )
        if modality in self.writes_prompt:
            expansion = self._core(modality, expansion, hf_kwargs)
        return out, expansion

    def _core(self, modality: str, expansion: placeholders.Expansion, hf_kwargs: Mapping[str, object]) -> placeholders.Expansion:
        """The item's core (`text_step.typed_core`): under the same processor kwargs, the
        same for every item, since the processor writes it without the item."""
        core = text_step.typed_core(expansion)
        known = self._cores.setdefault((modality, kwargs_key(hf_kwargs)), core.token_ids)
        if core.token_ids != known:
            raise placeholders.PlaceholderError("the processor expanded this item otherwise than the text alone")
        return core

    def core(self, modality: str, hf_kwargs: Mapping[str, object]) -> tuple[int, ...]:
        """The core every item of a modality the processor writes prompts for takes under
        `hf_kwargs` (`writes_prompt`), read off a blank item's probe the first time."""
        key = (modality, kwargs_key(hf_kwargs))
        if key not in self._cores:
            self.probe(modality, self.blank(modality, hf_kwargs=hf_kwargs), hf_kwargs)
        return self._cores[key]

    def written_prompt(self, prompt: list[int], counts: Mapping[str, int], hf_kwargs: Mapping[str, object]) -> list[int]:
        """`prompt` as the processor writes it from its text (`text_step.py`), each item's
        core folded back into its placeholder, for vLLM's prompt update to expand:
        `counts` holds the items of each modality it writes prompts for."""
        text = self.tokenizer.decode(prompt, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if self.tokenizer.encode(text, add_special_tokens=False) != list(prompt):
            raise ValueError(errors.prompt_ids_not_text(self.processor))
        out = self.call({"text": text}, {**hf_kwargs, "add_special_tokens": False})  # the prompt holds its own specials
        written = out["input_ids"][0].tolist()
        for modality, count in counts.items():
            written = text_step.fold_cores(written, self.core(modality, hf_kwargs), self.placeholder_ids(modality), count)
        return written

    # -- items together ---------------------------------------------------------------

    def stacks_items_along_rows(self, modality: str) -> bool:
        """Whether the processor lays two items out, processed together, as their one-item
        outputs concatenated along the first dimension, key by key: the layout hf_bridge
        joins items of one shape in for one encoder call (`split.batch_groups`). MiniCPM-V
        packs its images along the last dimension instead, so its items are encoded one
        at a time. A processor that refuses two items gives no layout to keep: True."""
        if modality not in self._stacks_along_rows:
            self._stacks_along_rows[modality] = self._learn_stacking(modality)
        return self._stacks_along_rows[modality]

    def _learn_stacking(self, modality: str) -> bool:
        import torch

        from .split import item_data_keys

        text = self.item_text(modality)
        try:
            alone = self.call_one_item(text, self.blank(modality), self.default_kwargs)
            together = self.call_one_item(text * 2, self.blank(modality, 2), self.default_kwargs)
        except Exception:  # noqa: BLE001 - one item per prompt (Fuyu): nothing to join
            return True
        for key in item_data_keys(list(alone.keys())):
            one, two = alone[key], together.get(key)
            if isinstance(one, torch.Tensor) and one.ndim and not _joined_as_stacked(two, torch.cat([one, one])):
                return False
        return True

    # -- pixel sides ------------------------------------------------------------------

    def fixed_pixel_sides(self, modality: str, hf_kwargs: Mapping[str, object]) -> dict[str, pixel_sides.Sides]:
        """The pixel sides the processor gives every item of `modality` under `hf_kwargs`,
        by key (`pixel_sides.py`): learnt once per kwargs from its usual blank item and
        larger ones, wide and tall; none where it takes fewer than two of them."""
        key = (modality, kwargs_key(hf_kwargs))
        if key not in self._fixed_sides:
            self._fixed_sides[key] = self._learn_fixed_sides(modality, hf_kwargs)
        return self._fixed_sides[key]

    def _learn_fixed_sides(self, modality: str, hf_kwargs: Mapping[str, object]) -> dict[str, pixel_sides.Sides]:
        if modality not in ("image", "video"):
            return {}
        shape = self.blank_shape(modality)
        sizes = [(shape.width, shape.height),
                 (max(FIXED_SIDES_PROBE[0], 2 * shape.width), max(FIXED_SIDES_PROBE[1], shape.height)),
                 (max(FIXED_SIDES_PROBE[1], shape.width), max(FIXED_SIDES_PROBE[0], 2 * shape.height))]
        outputs = []
        for width, height in sizes:
            try:
                out, _ = self.probe(modality, self.blank(modality, width=width, height=height, hf_kwargs=hf_kwargs), hf_kwargs)
            except Exception:  # noqa: BLE001 - a processor may refuse a size: the others tell
                continue
            outputs.append(pixel_sides.tensor_shapes(out))
            if not pixel_sides.fixed_sides(outputs):  # no tensor laid out as images (flat patches), or sides that follow
                return {}
        return pixel_sides.fixed_sides(outputs) if len(outputs) > 1 else {}

    # -- numbered items ---------------------------------------------------------------

    def number_window(self, modality: str, index: int, hf_kwargs: Mapping[str, object]) -> numbering.NumberWindow | None:
        """Where the processor writes the index of the item at `index` into its expansion
        (`numbering.py`); None where it writes none. Learnt from blank items processed
        together, once per index; a processor that leaves the second item unnumbered is
        taken to number none."""
        if index == 0 or modality in self.writes_prompt or self.frame(modality).inserts_item:
            return None
        key = kwargs_key(hf_kwargs)
        if index > 1 and self._number_window(modality, 1, hf_kwargs, key) is None:
            return None
        return self._number_window(modality, index, hf_kwargs, key)

    def _number_window(self, modality: str, index: int, hf_kwargs: Mapping[str, object], key: str) -> numbering.NumberWindow | None:
        if (modality, key, index) not in self._number_windows:
            self._number_windows[modality, key, index] = numbering.number_window(
                self.probe(modality, self.blank(modality, hf_kwargs=hf_kwargs), hf_kwargs)[1].token_ids,
                self._blank_expansion_at(modality, index, hf_kwargs),
            )
        return self._number_windows[modality, key, index]

    def _blank_expansion_at(self, modality: str, index: int, hf_kwargs: Mapping[str, object]) -> list[int]:
        """The expansion of the blank item at `index` among `index + 2`, each placeholder
        followed by the sentinel: the text between the sentinels around it is that
        expansion alone (the frame adds tokens at the start and after the last item only)."""
        count = index + 2
        text = (self.placeholder_text(modality) + PROBE_SENTINEL) * count
        try:
            ids = self.call_one_item(text, self.blank(modality, count, hf_kwargs=hf_kwargs), hf_kwargs)["input_ids"][0].tolist()
        except Exception:  # noqa: BLE001 - a processor that takes one item per prompt (Fuyu) numbers none
            return list(self.probe(modality, self.blank(modality, hf_kwargs=hf_kwargs), hf_kwargs)[1].token_ids)
        sentinel = self.tokenizer.encode(PROBE_SENTINEL, add_special_tokens=False)
        starts = placeholders.find_all_sublists(ids, sentinel)
        if len(starts) != count:
            raise placeholders.PlaceholderError(f"the processor dropped or changed the text between {count} placeholders")
        return ids[starts[index - 1] + len(sentinel):starts[index]]

    def _placeholder_span(self, modality: str, probe_ids: list[int], prompt_frame: frame.PromptFrame) -> tuple[int, int]:
        if prompt_frame.inserts_item:  # the processor puts the item before everything
            return (0, 0)
        target = self.placeholder_ids(modality)
        start = placeholders.find_sublist(probe_ids, target)
        if start is None:
            raise ProbeError(f"{self.placeholder_text(modality)!r} does not tokenize to the same ids inside and outside a prompt")
        return (start, start + len(target))

    def call_one_item(self, text: str, item: Mapping[str, list], hf_kwargs: Mapping[str, object]):
        """Call the processor on one item, flat (`videos=[v]`) or per sample (`[[v]]`).

        Processors disagree on the layout of media lists (SmolVLM counts a flat
        video's frames as videos); the per-sample layout is what every processor
        accepts for a batch of one, so it is tried when the flat one is refused.
        The token types are hf_bridge's to ask for, over a request's own
        `return_mm_token_type_ids` (an output the model never gets), which would
        otherwise reach the call twice.
        """
        merged = self.merge(hf_kwargs)
        asked = {"return_mm_token_type_ids": True, **video_metadata_asked(self.processor, item, merged)}
        hf_kwargs = {k: v for k, v in hf_kwargs.items() if k not in asked}
        try:
            flat = call_reading_one_videos_metadata(lambda media: self.call({"text": text, **media, **asked}, hf_kwargs), dict(item))
            return without_asked_metadata(flat, merged)
        except ValueError as flat_error:
            nested = {"text": [text], **{k: [v] for k, v in item.items()}, **asked}
            try:
                return without_asked_metadata(self.call(nested, hf_kwargs), merged)
            except ValueError:
                raise flat_error  # noqa: B904 - its cause is the processor's own error

    def blank(
        self, modality: str, count: int = 1, width: int | None = None, height: int | None = None,
        frames: int | None = None, seconds: float = AUDIO_SECONDS, hf_kwargs: Mapping[str, object] = {},
    ):
        """`count` blank items of the shape this processor accepts (see `BLANK_SHAPES`),
        with any of its sides (a clip's length) replaced, for a call with the request's
        `hf_kwargs`."""
        shape = self.blank_shape(modality)
        shape = BlankShape(width or shape.width, height or shape.height, frames or shape.frames)
        return blank_items(self.processor, modality, count, shape, seconds, kwargs=self.merge(hf_kwargs))

    @cached_property
    def pad_tokens_added(self) -> int:
        """How many more of the tokenizer's pad token the default kwargs give a probe's text
        than the same call with padding off: the sentinel alone, or where the processor
        refuses text alone, a blank item of the first modality it takes. 0 where no call
        runs both ways."""
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            return 0
        calls = [lambda kw: self.call({"text": PROBE_SENTINEL}, kw)]
        calls += [lambda kw, m=m: self.call_one_item(self.placeholder_text(m), self.blank(m), kw)
                  for m in processor_modalities(self.processor)]
        for call in calls:
            try:
                padded, plain = call({}), call({"padding": False})
            except Exception:  # noqa: BLE001 - try the next layout
                continue
            return padded["input_ids"][0].tolist().count(pad) - plain["input_ids"][0].tolist().count(pad)
        return 0

    def blank_placeholder_length(
        self, modality: str, width: int | None = None, height: int | None = None,
        frames: int | None = None, seconds: float = AUDIO_SECONDS,
    ) -> int:
        """Placeholder length of one blank item of these sides (a clip of these seconds),
        under the default kwargs. Kept here, once per processor: vLLM runs its size searches
        three times at engine start, each on a processing info of its own, and a video
        model processed the same blank videos three times (18 s of Nemotron-H-Omni's 42 s)."""
        key = (modality, width, height, frames, seconds)
        if key not in self._blank_lengths:
            item = self.blank(modality, 1, width, height, frames, seconds)
            self._blank_lengths[key] = len(self.probe(modality, item, self.default_kwargs)[1])
        return self._blank_lengths[key]

    def blank_shape(self, modality: str) -> BlankShape:
        if modality not in self._blank_shapes:
            self.frame(modality)
        return self._blank_shapes[modality]

    # -- the prompt frame ---------------------------------------------------------------

    def frame(self, modality: str) -> frame.PromptFrame:
        """What the processor adds to prompts with `modality` items, outside their expansions."""
        if modality not in self._frames:
            self._frames[modality] = self._learn_frame(modality)
        return self._frames[modality]

    def _learn_frame(self, modality: str) -> frame.PromptFrame:
        """Probe with blank items, placeholder then sentinel text (see `frame.py`), in the
        first blank shape the processor accepts (`first_accepted_shape`)."""

        def learn(shape: BlankShape) -> frame.PromptFrame:
            try:
                return self._learn_frame_with(modality, shape)
            except placeholders.PlaceholderError:
                if not self._writes_prompt_alone(modality, shape):
                    raise  # the processor ran: its output is what cannot be read
                self.writes_prompt.add(modality)
                return frame.PromptFrame()  # its text step writes everything

        shape, learnt = first_accepted_shape(self.processor, modality, learn)
        self._blank_shapes[modality] = shape
        return learnt

    def _learn_frame_with(self, modality: str, shape: BlankShape) -> frame.PromptFrame:
        sentinel_text = PROBE_SENTINEL
        sentinel = self.tokenizer.encode(sentinel_text, add_special_tokens=False)
        hf_kwargs = self.default_kwargs
        placeholder = self.placeholder_text(modality)
        one_blank = blank_items(self.processor, modality, 1, shape, kwargs=hf_kwargs)
        placeholder_probe = self.tokenizer.encode(placeholder)
        text_before = placeholder_probe[: placeholders.find_sublist(placeholder_probe, self.placeholder_ids(modality)) or 0]
        try:
            one = self.call_one_item(placeholder + sentinel_text, one_blank, hf_kwargs)
            inserts = False
        except Exception as explicit_error:  # noqa: BLE001 - any refusal means: try without a placeholder
            try:
                one = self.call_one_item(sentinel_text, one_blank, hf_kwargs)
            except Exception:  # noqa: BLE001 - neither layout: the item itself is refused
                raise explicit_error  # noqa: B904 - keeps the processor's own error as its cause
            if not any(token_type_ids(one, self.processor, self.config)[0].tolist()):  # it did not insert the item either
                raise explicit_error
            inserts = True
        two = None
        if not inserts:
            try:
                two_blank = blank_items(self.processor, modality, 2, shape, kwargs=hf_kwargs)
                two = self.call_one_item((placeholder + sentinel_text) * 2, two_blank, hf_kwargs)["input_ids"][0].tolist()
            except Exception:  # noqa: BLE001 - a processor may take one item per prompt (Fuyu)
                two = None
        return frame.frame_from_probes(
            one["input_ids"][0].tolist(), token_type_ids(one, self.processor, self.config)[0].tolist(), two, sentinel, text_before, inserts
        )

    def _writes_prompt_alone(self, modality: str, shape: BlankShape) -> bool:
        """Whether the processor's ids for the frame probes' texts (one item, two items)
        are the same without the items as with blank ones: it lays them out from the
        text alone (`text_step.py`)."""
        placeholder = self.placeholder_text(modality) + PROBE_SENTINEL
        for count in (1, 2):
            text = placeholder * count
            try:
                with_items = self.call_one_item(text, blank_items(self.processor, modality, count, shape, kwargs=self.default_kwargs), self.default_kwargs)
                alone = self.call({"text": text}, self.default_kwargs)
            except Exception:  # noqa: BLE001 - it cannot run one of them: not what it does
                return False
            if with_items["input_ids"][0].tolist() != alone["input_ids"][0].tolist():
                return False
        return True

    @cached_property
    def text_only_frame(self) -> frame.PromptFrame | None:
        """What the processor adds to a prompt without items (Chameleon's separator,
        Emu3's BOS), read off its ids for the sentinel alone. Empty where it adds nothing
        or refuses text alone (PaliGemma's: transformers cannot run such a prompt either);
        None where it rewrites the text itself, which no frame can say."""
        try:
            out = self.call({"text": PROBE_SENTINEL}, self.default_kwargs)
        except Exception:  # noqa: BLE001 - a processor that needs items has no text-only layout
            return frame.PromptFrame()
        return frame.text_only_frame(out["input_ids"][0].tolist(), self.tokenizer.encode(PROBE_SENTINEL))

    # -- what can be placed -------------------------------------------------------------

    @cached_property
    def failures(self) -> dict[str, str]:
        """Modality -> why hf_bridge cannot place its items, for each modality the
        processor has a sub-processor for and hf_bridge cannot probe. Empty: all placeable."""
        out = {}
        for modality in processor_modalities(self.processor):
            try:
                self.probe(modality, self.blank(modality), self.default_kwargs)
            except Exception as exc:  # noqa: BLE001 - any failure switches the modality off
                out[modality] = f"{type(exc).__name__}: {_first_line(exc)}"
        return out

    def placeable(self) -> list[str]:
        return [m for m in processor_modalities(self.processor) if m not in self.failures]

    def iter_items(self, modality: str, hf_data: Mapping[str, Any]) -> Iterator[dict[str, list]]:
        """Each item of `modality` in `hf_data` (the processor's keyword layout), alone."""
        present = [k for k in HF_DATA_KEYS[modality] if hf_data.get(k) is not None]
        if not present:
            return
        for i in range(len(hf_data[present[0]])):
            yield {k: [hf_data[k][i]] for k in present}


def _joined_as_stacked(together: Any, stacked: Any) -> bool:
    """`together` holds `stacked`'s values in its order: equal, or equal once the first
    two dimensions are merged (Idefics3 puts a prompt's images in its second dimension,
    and its model merges the two)."""
    import torch

    if not isinstance(together, torch.Tensor) or together.numel() != stacked.numel():
        return False
    if together.shape == stacked.shape:
        return torch.equal(together, stacked)
    return together.ndim >= 2 and stacked.ndim >= 2 and torch.equal(together.flatten(0, 1), stacked.flatten(0, 1))


def kwargs_key(hf_kwargs: Mapping[str, object]) -> str:
    """One string per set of processor kwargs, for what is learnt under them."""
    return repr(sorted(hf_kwargs.items()))


def root_cause(exc: BaseException) -> BaseException:
    """The processor's own error under the wrappers (vLLM's "Failed to apply ...")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
