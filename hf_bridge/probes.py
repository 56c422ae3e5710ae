"""What an HF processor does with one item, learnt by calling it: no vLLM import.

hf_bridge places items by processing each one alone inside a probe made of the
placeholder text the model's chat template emits (`placeholders.expansion_from_probe`),
and learns the tokens a processor adds outside the expansions from blank-item probes
(`frame.py`). `ProcessorProbe` (`processor_probe.py`, with `probe_frames.py` and
`probe_layouts.py`) holds that logic once, for every caller:

- vLLM's processing info (`processing.py`), which calls the processor through vLLM's
  context;
- the plugin's routing at engine start (`plugin.py`), which decides whether hf_bridge
  can place a checkpoint's items at all before choosing its model class;
- `inspect` and the tests.

This module holds what it is built from: the modalities, blank items, token types, a
video's metadata, an audio clip's lengths.

A processor that cannot be probed for one modality never takes the others down:
`failures` names each modality hf_bridge cannot place, with the processor's own error,
and callers switch exactly those modalities off.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from . import errors, placeholders

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
        f"for the first: {type(cause).__name__}: {first_line(cause)}"
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


def kwargs_key(hf_kwargs: Mapping[str, object]) -> str:
    """One string per set of processor kwargs, for what is learnt under them."""
    return repr(sorted(hf_kwargs.items()))


def root_cause(exc: BaseException) -> BaseException:
    """The processor's own error under the wrappers (vLLM's "Failed to apply ...")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
