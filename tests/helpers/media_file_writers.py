"""Media files as users have them, written from the harness's deterministic test images."""

from __future__ import annotations

from pathlib import Path

ORIENTATION_TAG = 0x0112
TURNED_CLOCKWISE = 6
"""EXIF orientation: rotate 90 degrees clockwise to display (how phones save portraits)."""


def write_turned_photo(path: Path) -> None:
    """A 120x60 JPEG whose EXIF says to show it turned: 60x120 as displayed."""
    from hf_bridge.validate.parity import test_image

    photo = test_image(120, 60, seed=5)
    exif = photo.getexif()
    exif[ORIENTATION_TAG] = TURNED_CLOCKWISE
    photo.save(path, exif=exif, quality=95)


def write_clip(path: Path, fps: float, num_frames: int) -> None:
    """An MP4 (mp4v) of `num_frames` 112x112 test images at `fps`."""
    import cv2
    import numpy as np

    from hf_bridge.validate.parity import test_image

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (112, 112))
    for i in range(num_frames):
        writer.write(np.asarray(test_image(112, 112, seed=10 + i))[:, :, ::-1])
    writer.release()
