"""Video frames of a robot's episodes, and the MP4 file they go into.

A frame is the student's camera image as the student sees it beside the third-person view
(`sim.third_person`), with a band of text below saying what happened (who acted, the skill and its
parameters). The camera image is enlarged by a whole factor with nearest-neighbour sampling, so each of its
pixels stays a visible square: a smoothed image would show detail the student never had.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from PIL.ImageFont import FreeTypeFont

MACROBLOCK = 16  # H.264 codes 16x16 blocks: frame sides are padded to a multiple (no encoder rescale)
TEXT_PX = 15  # the overlay's font size, px
LINE_PX = 20  # the overlay's line spacing, px


class FrameSink(Protocol):
    """Where frames go: an MP4 file (`Mp4Writer`) or a window."""

    def append(self, frame: np.ndarray) -> None: ...

    def close(self) -> None: ...


@functools.cache
def _font() -> FreeTypeFont:
    """PIL's own font at `TEXT_PX`, loaded once."""
    from PIL import ImageFont

    return ImageFont.load_default(size=TEXT_PX)


def compose(view: np.ndarray, camera: np.ndarray | None, lines: Sequence[str]) -> np.ndarray:
    """One frame: `camera` enlarged to about the view's height, left of `view`, with `lines` below.

    Shapes: view (H, W, 3) uint8, camera (h, w, 3) uint8 or None (a policy without a camera) ->
    (max(H, k h) + text band, k w + W, 3) uint8 with k = max(1, H // h), each side padded to a multiple of
    `MACROBLOCK` with black.
    """
    from PIL import Image, ImageDraw

    panels = [view]
    if camera is not None:
        k = max(1, view.shape[0] // camera.shape[0])
        panels.insert(0, camera.repeat(k, axis=0).repeat(k, axis=1))  # (k h, k w, 3), nearest
    height = max(p.shape[0] for p in panels)
    top = np.concatenate([_pad(p, height, p.shape[1]) for p in panels], axis=1)  # (height, sum of widths, 3)
    band = np.zeros((LINE_PX * len(lines) + 6, top.shape[1], 3), dtype=np.uint8)
    image = Image.fromarray(band)
    draw = ImageDraw.Draw(image)
    for row, text in enumerate(lines):
        draw.text((6, 3 + LINE_PX * row), text, fill=(255, 255, 255), font=_font())
    frame = np.concatenate([top, np.asarray(image)], axis=0)  # (height + band, width, 3)
    return _pad(frame, _round_up(frame.shape[0]), _round_up(frame.shape[1]))


def _round_up(n: int) -> int:
    return -(-n // MACROBLOCK) * MACROBLOCK


def _pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """`image` (h, w, 3) in the top-left corner of a black (height, width, 3)."""
    h, w = image.shape[:2]
    return np.pad(image, ((0, height - h), (0, width - w), (0, 0)))


def mp4_path(path: str | Path) -> Path:
    """A video's path, checked before anything runs: it ends in .mp4 and its folder exists (made here) and
    can be written."""
    path = Path(path)
    if path.suffix.lower() != ".mp4":
        raise ValueError(f"video {path}: expected a file ending in .mp4")
    if path.is_dir():
        raise ValueError(f"video {path}: is a directory; name the .mp4 file to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"video {path}: cannot create its folder {path.parent}: {err.strerror}") from None
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"video {path}: its folder {path.parent} cannot be written")
    return path


class Mp4Writer:
    """Frames into an H.264 MP4 (imageio with its ffmpeg), at `fps` frames a second."""

    def __init__(self, path: str | Path, fps: float) -> None:
        import imageio.v2 as imageio

        self.path = mp4_path(path)
        # yuv420p: the pixel format every player decodes; quality 8 of 10 keeps the overlay's text sharp
        self._writer = imageio.get_writer(
            self.path, format="FFMPEG", mode="I", fps=fps, codec="libx264", pixelformat="yuv420p", quality=8,
            macro_block_size=MACROBLOCK,
        )  # fmt: skip

    def append(self, frame: np.ndarray) -> None:
        """Add one frame. Shape: (H, W, 3) uint8, the same for every frame of the file."""
        self._writer.append_data(frame)

    def close(self) -> None:
        """Finish the file (ffmpeg writes its index at the end)."""
        self._writer.close()
