"""The trained camera against a seen one: each mismatch beyond its tolerance is named with both values."""

from __future__ import annotations

import math

import pytest

from policies.camera_model import DISTORTION_TOLERANCE, FOV_TOLERANCE_DEG, CameraModel, mismatches

TRAINED = CameraModel.from_vfov(128, 64, 75.0)


def with_hfov(camera: CameraModel, hfov_deg: float) -> CameraModel:
    """`camera` with its focal lengths set for a horizontal field of view of `hfov_deg`."""
    f = 0.5 * camera.width / math.tan(math.radians(hfov_deg) / 2)
    return camera.model_copy(update={"fx": f, "fy": f})


def test_the_render_camera_sees_its_vertical_fov_and_the_aspects_horizontal_one() -> None:
    assert TRAINED.vfov_deg == pytest.approx(75.0)
    want = math.degrees(2 * math.atan(2 * math.tan(math.radians(37.5))))  # 2:1 aspect, square pixels
    assert TRAINED.hfov_deg == pytest.approx(want) and TRAINED.fx == TRAINED.fy


def test_the_same_camera_at_another_resolution_matches() -> None:
    scaled = CameraModel(width=1280, height=640, fx=TRAINED.fx * 10, fy=TRAINED.fy * 10, cx=639.5, cy=319.5)
    assert mismatches(TRAINED, scaled) == []


def test_a_field_of_view_beyond_the_tolerance_is_named_with_both_values() -> None:
    inside = with_hfov(TRAINED, TRAINED.hfov_deg - 0.9 * FOV_TOLERANCE_DEG)
    assert mismatches(TRAINED, inside) == []
    outside = with_hfov(TRAINED, TRAINED.hfov_deg - 1.5 * FOV_TOLERANCE_DEG)
    [problem, *_] = mismatches(TRAINED, outside)
    assert problem.startswith(f"horizontal field of view {outside.hfov_deg:.1f} deg, trained with "
                              f"{TRAINED.hfov_deg:.1f} deg")  # fmt: skip


def test_distortion_differing_in_model_or_coefficients_is_named() -> None:
    barrel = TRAINED.model_copy(update={"d": (-0.12, 0.01, 0.0, 0.0, 0.0)})
    near = barrel.model_copy(update={"d": (-0.12 + 0.5 * DISTORTION_TOLERANCE, 0.01, 0.0, 0.0, 0.0)})
    assert mismatches(barrel, near) == []
    assert mismatches(barrel, TRAINED) == [
        f"distortion none, trained with plumb_bob [-0.120, 0.010, 0.000, 0.000, 0.000] (tolerance "
        f"{DISTORTION_TOLERANCE:g} per coefficient)"
    ]
    fisheye = barrel.model_copy(update={"distortion_model": "equidistant", "d": (-0.12, 0.01, 0.0, 0.0)})
    assert "distortion equidistant" in mismatches(barrel, fisheye)[0]
