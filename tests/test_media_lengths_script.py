"""`scripts/media_lengths.py` gives `hf-bridge validate` the lengths it names: each clip
lasts its seconds and each video holds its frames, as validate and vLLM's loader read
them, and every case of its cases files is one validate takes."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import media_lengths  # noqa: E402


def test_the_media_hold_the_lengths_their_cases_name(tmp_path):
    from hf_bridge.media_files import audio_samples, read_video
    from hf_bridge.validate.command import cases_from_file

    media_lengths.write_media(tmp_path)
    for name, seconds in media_lengths.CLIPS.items():
        samples, rate = audio_samples(str(tmp_path / f"{name}.wav"))
        assert (rate, samples.shape) == (media_lengths.SAMPLING_RATE, (round(seconds * rate),))
    for name, (frames, width, height) in media_lengths.VIDEOS.items():
        video, metadata = read_video(str(tmp_path / f"{name}.mp4"))
        assert video.shape == (frames, height, width, 3) and metadata["fps"] == media_lengths.FPS
    for modality, cases in media_lengths.CASES.items():
        read = cases_from_file(media_lengths.cases_file(modality, tmp_path))
        assert [(c.name, c.num_audios + c.num_videos) for c in read] == [(name, len(items)) for name, items, _ in cases]
        assert {c.name: c.mm_processor_kwargs for c in read}["45s_truncation" if modality == "audio" else "1_frame"] == (
            {"truncation": True} if modality == "audio" else {})
