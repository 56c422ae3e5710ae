"""Media a notebook holds in memory (a PIL image, a video's frames, audio samples), written
to files so that `hf-bridge validate`'s cases can name them: a case is plain parameters,
rebuilt in each worker's interpreter, and its references are cached by its files' bytes.
Each file holds the item as vLLM's parser hands it to the HF processor, losslessly, and is
named by its content, so a rerun with the same item finds its references cached. No vLLM
import (transformers' side reads these files too)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..cache_dirs import cache_dir
from ..media_files import read_video, served_image
from ..probes import video_metadata

MEDIA_DIR = "validate_media"
"""Under hf_bridge's cache directory (`cache_dirs.cache_dir`)."""
FRAMES_SUFFIX = ".frames.npz"
"""A video held in memory: its frames and its metadata (`read_video_file`)."""
PATH_TYPES = (str, os.PathLike)


def as_files(images: Any = (), videos: Any = (), audios: Any = (),
             sampling_rate: Callable[[], int] | None = None) -> tuple[list[str], list[str], list[str]]:
    """Each modality's items as file paths: a path stays as given, an item in memory is
    written to a file. A lone item (one path, image, video or clip) stands for a list of
    one. `sampling_rate()` (the feature extractor's) is the rate of bare audio samples, as
    vLLM takes them; asked only where there are some. Raises ValueError naming the item
    and the fix."""
    clips = _items(audios, single=_is_one_audio)
    bare = any(not isinstance(c, PATH_TYPES) and not (isinstance(c, tuple) and len(c) == 2) for c in clips)
    rate = sampling_rate() if bare and sampling_rate is not None else None
    return (
        [image_file(item, f"image {i}") for i, item in enumerate(_items(images, single=_is_one_image))],
        [video_file(item, f"video {i}") for i, item in enumerate(_items(videos, single=_is_one_video))],
        [audio_file(item, f"audio {i}", rate) for i, item in enumerate(clips)],
    )


def image_file(item: Any, name: str = "image") -> str:
    """A PIL image as vLLM's parser serves it (EXIF orientation applied, transparency over
    white, RGB), or a uint8 (height, width, 3) array as it is, saved as PNG."""
    from PIL import Image

    if isinstance(item, PATH_TYPES):
        return os.fspath(item)
    if isinstance(item, Image.Image):
        image = served_image(item)
    elif isinstance(item, np.ndarray) and item.dtype == np.uint8 and item.ndim == 3 and item.shape[-1] == 3:
        image = Image.fromarray(item)
    else:
        raise ValueError(f"{name} is {_described(item)}; give a file's path, a PIL image or a uint8 (height, width, 3) "
                         "array of RGB pixels (a torch tensor of 3 dimensions is an image's embeddings to vLLM)")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return _stored(buffer.getvalue(), ".png")


def video_file(item: Any, name: str = "video") -> str:
    """A video's frames (a uint8 (frames, height, width, 3) array, or a list of frames,
    stacked as vLLM's parser stacks them), or `(frames, metadata)` as vLLM takes it; frames
    without metadata get the metadata validate gives its own test videos (`probes.video_metadata`)."""
    if isinstance(item, PATH_TYPES):
        return os.fspath(item)
    frames, metadata = item if _is_with_metadata(item) else (item, None)
    if isinstance(frames, list):
        frames = np.array(frames)
    if hasattr(frames, "numpy") and not isinstance(frames, np.ndarray):  # a torch tensor's frames
        frames = frames.numpy()
    if not (isinstance(frames, np.ndarray) and frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[-1] == 3):
        raise ValueError(f"{name} has frames {_described(frames)}; give a file's path, a uint8 (frames, height, width, 3) "
                         "array of RGB frames, a list of RGB frames, or (frames, metadata)")
    metadata = video_metadata(len(frames)) if metadata is None else dict(metadata)
    buffer = io.BytesIO()
    np.savez(buffer, frames=frames, metadata=np.array(json.dumps(metadata, sort_keys=True, default=_plain)))
    return _stored(buffer.getvalue(), FRAMES_SUFFIX)


def audio_file(item: Any, name: str = "audio", sampling_rate: int | None = None) -> str:
    """`(samples, rate)`, or bare samples at `sampling_rate` (the feature extractor's, as
    vLLM takes them): 1-D float samples in [-1, 1], saved as a float32 WAV, which
    validate then reads and resamples as it reads an audio file."""
    from scipy.io import wavfile

    if isinstance(item, PATH_TYPES):
        return os.fspath(item)
    samples, rate = item if isinstance(item, tuple) and len(item) == 2 else (item, sampling_rate)
    if hasattr(samples, "numpy") and not isinstance(samples, np.ndarray):  # a torch tensor's samples
        samples = samples.numpy()
    samples = np.asarray(samples) if isinstance(samples, list) else samples
    if not (isinstance(samples, np.ndarray) and samples.ndim == 1 and samples.dtype.kind == "f" and samples.size):
        raise ValueError(f"{name} has samples {_described(samples)}; give a file's path, or 1-D float samples in [-1, 1] "
                         "(average the channels first), alone or as (samples, sampling_rate)")
    if not isinstance(rate, (int, np.integer)) or rate <= 0:
        raise ValueError(f"{name}'s sampling rate is {rate!r}; give (samples, sampling_rate), the rate in Hz as an int")
    buffer = io.BytesIO()
    wavfile.write(buffer, int(rate), samples.astype(np.float32))
    return _stored(buffer.getvalue(), ".wav")


def read_video_file(path: str) -> tuple[np.ndarray, dict[str, Any]]:
    """A video's frames and metadata: from a file `video_file` wrote, or as vLLM's loader
    reads a video file (`media_files.read_video`)."""
    if not path.endswith(FRAMES_SUFFIX):
        return read_video(path)
    with np.load(path) as held:
        return held["frames"], json.loads(str(held["metadata"]))


def _stored(content: bytes, suffix: str) -> str:
    """`content` in `cache_dir(MEDIA_DIR)`, named by its digest; written whole or not at all."""
    directory = cache_dir(MEDIA_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{hashlib.sha256(content).hexdigest()[:32]}{suffix}"
    if not path.is_file():
        with tempfile.NamedTemporaryFile(dir=directory, delete=False) as partial:
            partial.write(content)
        os.replace(partial.name, path)
    return str(path)


def _items(given: Any, single) -> list[Any]:
    if given is None:
        return []
    lone = isinstance(given, PATH_TYPES) or single(given) or not isinstance(given, Iterable)  # refused as an item, below
    return [given] if lone else list(given)


def _is_one_image(given: Any) -> bool:
    from PIL import Image

    return isinstance(given, Image.Image) or (isinstance(given, np.ndarray) and given.ndim <= 3)  # 4 dimensions: a batch, as vLLM reads it


def _is_one_video(given: Any) -> bool:
    return (isinstance(given, np.ndarray) and given.ndim == 4) or _is_with_metadata(given)


def _is_one_audio(given: Any) -> bool:
    return (isinstance(given, np.ndarray) and given.ndim == 1) or (isinstance(given, tuple) and len(given) == 2 and isinstance(given[1], (int, float, np.number)))


def _is_with_metadata(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict)


def _described(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"a {type(value).__module__.split('.')[0]} {type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__name__}"


def _plain(value: Any) -> Any:
    """A metadata value JSON lacks a form for: a NumPy scalar or array as its Python value."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"video metadata value {value!r} ({type(value).__name__}) is not JSON; give numbers, strings and lists")
