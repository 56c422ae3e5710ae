"""Media files read as vLLM decodes them when it serves them (an `image_url`, a
`video_url`, an `input_audio`), so that what transformers is given beside vLLM, and
what `inspect` shows, is what a served request holds. No vLLM import: transformers'
side of a check runs in an interpreter vLLM has not touched (`clean_interpreter.py`);
`tests/test_validate.py` checks each reader against vLLM's own."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from .media_scale import pcm_as_unit_floats
from .probes import video_metadata


def read_image(path: str):
    """An image file as vLLM's server decodes an `image_url` (`ImageMediaIO`): turned as
    its EXIF orientation says, transparency laid over white, RGB; both sides get these
    pixels. `Image.open(path).convert("RGB")` had kept the orientation tag, which vLLM's
    parser applies to a PIL image and transformers' processors do not, so a phone photo
    reached the two sides turned differently; and it drops transparency (as transformers'
    `load_image` does), where a served image has it laid over white."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(path)
        image.load()
    except (UnidentifiedImageError, OSError) as error:  # a damaged file raises OSError on reading its pixels
        raise ValueError(f"{path}: not an image file PIL reads ({error})") from None
    return served_image(image)


def served_image(image):
    """A PIL image as vLLM serves it, from a file or handed to `LLM.generate`: turned as its
    EXIF orientation says, transparency laid over white, RGB."""
    from PIL import Image, ImageOps

    with contextlib.suppress(Exception):  # a damaged EXIF block leaves the image as it is, as vLLM's parser leaves it
        image = ImageOps.exif_transpose(image)
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        image = Image.new("RGB", rgba.size, (255, 255, 255))
        image.paste(rgba, mask=rgba.getchannel("A"))
    return image.convert("RGB")


def read_video(path: str) -> tuple[np.ndarray, dict[str, Any]]:
    """Every frame of a video file, RGB, as (frames, height, width, 3) uint8, and its
    metadata, as vLLM's OpenCV loader gives them with `num_frames=-1` (every frame; its
    default of 32 leaves a processor that samples frames nothing to sample). The frame
    rate is the file's: a processor sampling by time (Qwen3-VL's 2 a second) had read a
    30 fps clip as 15 times longer, and sampled it so on both sides."""
    import cv2

    capture = cv2.VideoCapture(path)
    fps = capture.get(cv2.CAP_PROP_FPS)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    capture.release()
    if not frames:
        raise ValueError(f"{path}: OpenCV read no frames (not a video, or a codec it lacks)")
    return np.stack(frames), video_metadata(len(frames), fps)


def read_audio(path: str, sampling_rate: int) -> np.ndarray:
    """An audio file as float32 mono samples at `sampling_rate`: `audio_samples`,
    resampled with scipy's polyphase filter, as vLLM resamples a clip where torchaudio is
    missing."""
    from math import gcd

    from scipy import signal

    samples, file_rate = audio_samples(path)
    if file_rate != sampling_rate:
        common = gcd(file_rate, sampling_rate)
        samples = signal.resample_poly(samples, sampling_rate // common, file_rate // common)
    return samples.astype(np.float32)


def audio_samples(path: str) -> tuple[np.ndarray, int]:
    """The file's samples as float64 mono in [-1, 1] (channels averaged, as vLLM's audio
    loader gives a clip), and its rate: WAV through scipy, other formats through
    soundfile where it is installed. Raises ValueError naming the fix."""
    if Path(path).suffix.lower() == ".wav":
        from scipy.io import wavfile

        try:
            file_rate, samples = wavfile.read(path)
        except ValueError as error:  # scipy's message does not name the file
            raise ValueError(f"{path}: not a WAV file scipy reads ({error})") from None
        if samples.dtype.kind in "iu":
            samples = pcm_as_unit_floats(samples)
    else:
        try:
            import soundfile
        except ImportError:
            raise ValueError(f"{path}: only WAV files are read without soundfile; convert it to WAV "
                             "(e.g. ffmpeg -i IN -ar 16000 OUT.wav) or pip install soundfile") from None
        try:
            samples, file_rate = soundfile.read(path, always_2d=False)
        except RuntimeError as error:  # soundfile's LibsndfileError
            raise ValueError(f"{path}: not an audio file soundfile reads ({error})") from None
    samples = np.asarray(samples, dtype=np.float64)
    if samples.size == 0:
        raise ValueError(f"{path}: the file holds no audio samples")
    return (samples.mean(axis=1) if samples.ndim == 2 else samples), int(file_rate)  # (frames, channels)
