"""Input checks shared by every runtime backend, run before any model sees the data.

A model fed a BGR, CHW, float or NaN-laden input still returns numbers; these checks turn such mistakes
into a ValueError that names the input, the expected form and what was received.
"""

from __future__ import annotations

import numpy as np
from PIL import Image


def check_image(image: object, height: int, width: int) -> np.ndarray:
    """RGB frame(s) -> batched uint8. Shape: (H, W, 3) or (B, H, W, 3) -> (B, H, W, 3)."""
    arr = _array("image", image)
    if arr.dtype != np.uint8:
        raise ValueError(f"image: expected dtype uint8 (raw 0..255 RGB), got {arr.dtype}")
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[1:] != (height, width, 3):
        raise ValueError(
            f"image: expected shape ({height}, {width}, 3) or (B, {height}, {width}, 3), HWC RGB; "
            f"got {arr.shape} (resize with policies.preprocessing.resize_rgb, or check the channel order)"
        )
    return np.ascontiguousarray(arr)


def check_imu(imu: object, window: int) -> np.ndarray:
    """IMU window(s) -> batched float32, all finite. Shape: (W, 6) or (B, W, 6) -> (B, W, 6)."""
    arr = _array("imu", imu)
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"imu: expected a real numeric array, got dtype {arr.dtype}")
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1:] != (window, 6):
        raise ValueError(
            f"imu: expected shape ({window}, 6) or (B, {window}, 6), oldest sample first; got {arr.shape}"
        )
    arr = arr.astype(np.float32)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"imu: non-finite value (NaN/Inf) at index {tuple(int(i) for i in bad)}")
    return arr


def check_skill(skill: object, num_skills: int) -> np.ndarray:
    """Active skill id(s) -> (B,) int64 in [0, num_skills)."""
    arr = np.atleast_1d(_array("skill", skill))
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"skill: expected integer id(s), got dtype {arr.dtype} shape {arr.shape}")
    if np.any((arr < 0) | (arr >= num_skills)):
        raise ValueError(
            f"skill: id {arr[(arr < 0) | (arr >= num_skills)][0]} out of range [0, {num_skills - 1}]"
        )
    return arr.astype(np.int64)


def check_scalar(name: str, value: object, low: float, high: float) -> np.ndarray:
    """Per-sample scalar (progress, step) -> (B,) float32, finite and within [low, high]."""
    arr = np.atleast_1d(_array(name, value)).astype(np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a scalar or shape (B,), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: non-finite value {arr[~np.isfinite(arr)][0]}")
    if np.any((arr < low) | (arr > high)):
        raise ValueError(f"{name}: value {arr[(arr < low) | (arr > high)][0]} outside [{low}, {high}]")
    return arr.astype(np.float32)


def check_batch(**arrays: np.ndarray) -> int:
    """All inputs must share one batch size; return it."""
    sizes = {name: a.shape[0] for name, a in arrays.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"inputs disagree on batch size: {sizes}")
    return next(iter(sizes.values()))


def resize_rgb(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize one uint8 RGB frame with bilinear filtering. Shape: (h, w, 3) -> (height, width, 3)."""
    arr = _array("image", image)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"image: expected one (h, w, 3) uint8 RGB frame, got {arr.dtype} {arr.shape}")
    if arr.shape[:2] == (height, width):
        return arr
    return np.asarray(Image.fromarray(arr).resize((width, height), Image.BILINEAR))


def _array(name: str, value: object) -> np.ndarray:
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: cannot be read as an array: {err}") from None
