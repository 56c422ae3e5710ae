"""Which standard cases a checkpoint can run: those whose modality its processor has."""

from __future__ import annotations

from pathlib import Path

CASES = {"one_image": "image", "two_images": "image", "text_only": "text", "video": "video", "audio": "audio"}
"""Each standard case (`parity.standard_cases`), with the modality the processor needs for it."""
VALIDATE_CASES = {**CASES, "odd_aspect": "image", "large_image": "image"}
"""`hf-bridge validate`'s built-in cases: the standard ones and `parity.shape_cases`."""
IMAGE_SIDE = 64
"""Side of the synthetic test images for a checkpoint outside the zoo (processors resize
them as they would any image)."""


def cases_of(model_dir: str | Path, table: dict[str, str] = CASES) -> list[str]:
    """The cases of `table` whose modality the checkpoint's saved processor has (text always)."""
    model_dir = Path(model_dir)
    saved = " ".join(p.read_text() for p in model_dir.glob("*.json") if "processor" in p.name or "preprocessor" in p.name)
    has = {
        "text": True,
        "image": "image_processor" in saved or (model_dir / "preprocessor_config.json").exists(),
        "video": "video_processor" in saved or (model_dir / "video_preprocessor_config.json").exists(),
        "audio": "feature_extractor" in saved or "audio_processor" in saved,
    }
    return [c for c, modality in table.items() if has[modality]]


