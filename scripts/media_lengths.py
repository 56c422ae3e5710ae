"""Audio clips and videos of lengths the standard cases never use (one second of audio, a
four-frame video): clips of 50 ms (one audio token or none), 0.3, 7.3 and 30 s (a whole
window, no padding) and 45 s (cut with `truncation`), two clips of different lengths in
one prompt; videos of 1, 3 and 9 frames (an odd count against a temporal patch of 2, and
70 x 38 pixels, a multiple of no patch) and two of different lengths in one prompt. Each
sweep type whose processor takes the modality, through `hf-bridge validate`'s `run(...)`,
every stage against transformers, through hf_bridge.

    .venv/bin/python scripts/media_lengths.py --out MEDIA_LENGTHS.md          # all (about 25 minutes)
    .venv/bin/python scripts/media_lengths.py --types gemma3n --modalities audio   # printed only
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from mixed_modalities import DETAIL_CHARS, checkpoint, modalities, table_script_parser, write_table

AUDIO_TYPES = ("audioflamingo3", "gemma3n", "gemma4", "gemma4_unified", "glmasr", "musicflamingo", "nemotron_h_omni",
               "phi4_multimodal", "qwen2_5_omni", "qwen2_audio", "qwen3_asr", "qwen3_omni_moe")
"""Every audio type COVERAGE.md lists whose audio case hf_bridge passes."""
VIDEO_TYPES = ("cohere_compass", "cosmos3_edge", "ernie4_5_vl_moe", "exaone4_5", "glm46v", "glm4v", "glm4v_moe",
               "hyperclovax_vision_v2", "internvl", "llava_next_video", "llava_onevision", "minicpmv4_6", "minicpmv4_7",
               "minimax_m3_vl", "muse_glimmer", "perception_lm", "qwen2_5_omni", "qwen2_5_vl", "qwen2_vl", "qwen3_5",
               "qwen3_5_moe", "qwen3_omni_moe", "qwen3_vl", "qwen3_vl_moe", "smolvlm", "video_llama_3", "video_llava")
"""Every video type COVERAGE.md lists whose video case hf_bridge passes."""

SAMPLING_RATE, FPS = 16000, 2.0
CLIPS = {"50ms": 0.05, "0.3s": 0.3, "7.3s": 7.3, "30s": 30.0, "45s": 45.0}
VIDEOS = {"1_frame": (1, 64, 48), "3_frames": (3, 64, 48), "9_frames_70x38": (9, 70, 38)}
"""name -> (frames, width, height), written at `FPS`."""
CASES = {
    "audio": [("50ms", ["50ms"], None), ("0.3s", ["0.3s"], None), ("7.3s", ["7.3s"], None), ("30s", ["30s"], None),
              ("7.3s+30s", ["7.3s", "30s"], None), ("0.3s+1s", ["0.3s", "1s"], None),
              ("45s_truncation", ["45s"], {"truncation": True})],
    "video": [(name, [name], None) for name in VIDEOS] + [("3+9_frames", ["3_frames", "9_frames_70x38"], None)],
}
"""Per modality: (case, its items, mm_processor_kwargs)."""


def write_media(into: Path) -> None:
    """The clips as 16-bit WAV files, the videos as MP4 files, each of its name."""
    import wave

    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    for name, seconds in {**CLIPS, "1s": 1.0}.items():
        t = np.arange(int(seconds * SAMPLING_RATE)) / SAMPLING_RATE
        clip = 0.3 * np.sin(2 * np.pi * (220 + 200 * t) * t) + 0.05 * rng.standard_normal(t.size)  # a chirp: no two windows alike
        with wave.open(str(into / f"{name}.wav"), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLING_RATE)
            out.writeframes((np.clip(clip, -1, 1) * 32767).astype("<i2").tobytes())
    for name, (frames, width, height) in VIDEOS.items():
        writer = cv2.VideoWriter(str(into / f"{name}.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (width, height))
        for _ in range(frames):
            writer.write(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
        writer.release()


def cases_file(modality: str, media: Path) -> Path:
    """`hf-bridge validate`'s cases file of `modality`'s cases, its paths relative to `media`."""
    key, suffix = ("audios", "wav") if modality == "audio" else ("videos", "mp4")
    path = media / f"{modality}.jsonl"
    with path.open("w") as out:
        for name, items, kwargs in CASES[modality]:
            entry = {"name": name, "prompt": f"Describe the {modality}.", key: [f"{item}.{suffix}" for item in items]}
            out.write(json.dumps({**entry, **({"mm_processor_kwargs": kwargs} if kwargs else {})}) + "\n")
    return path


def verdicts(model_dir: Path, modality: str, media: Path) -> dict[str, str]:
    """Per case: pass, naming what transformers could not run; or each stage not passed."""
    from hf_bridge.validate.command import run
    from hf_bridge.validate.stages import case_cell

    report = run(model_dir, "hf_bridge", cases_file=cases_file(modality, media))
    return {name: case_cell((v for v in report.verdicts if v.case == name), DETAIL_CHARS) for name, _, _ in CASES[modality]}


def main() -> None:
    parser = table_script_parser(__doc__)
    parser.add_argument("--modalities", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--types", nargs="+", help="only these types (default: every type of each modality)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        scratch, media = args.scratch or Path(temporary), Path(temporary) / "media"
        media.mkdir()
        write_media(media)
        for modality in args.modalities:
            for name in AUDIO_TYPES if modality == "audio" else VIDEO_TYPES:
                if args.types and name not in args.types:
                    continue
                model_dir = checkpoint(name, scratch)
                if modality not in modalities(model_dir):
                    raise SystemExit(f"{name}'s processor takes no {modality}")
                for case, verdict in verdicts(model_dir, modality, media).items():
                    print(f"{name} / {case}: {verdict}", flush=True)
                    rows.append(f"| {name} | {case} | {verdict.replace('|', chr(92) + '|')} |")
    if args.out:
        write_table(args.out, "Audio clips and videos of other lengths", "media_lengths.py", __doc__,
                    "n/a: transformers itself raised on the case, so nothing was compared. A case that fails names every "
                    "stage that did not pass, and the first one's cause.", ("type", "case"), rows)


if __name__ == "__main__":
    main()
