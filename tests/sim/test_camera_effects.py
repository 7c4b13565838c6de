"""The gap proxy's camera: each effect does what its figure says, and nothing when it is off."""

from __future__ import annotations

import numpy as np
import pytest

from policies.config import ConfigError
from sim.camera_effects import CameraEffects, LensConfig, LensDraw, kelvin_to_rgb, nominal_camera

H, W, HFOV = 32, 64, np.radians(113.8)


def draw(**changes: object) -> LensDraw:
    """A camera that changes nothing, then `changes`."""
    base = {"gains": np.ones(3), "focal_scale": 1.0, "k1": 0.0, "k2": 0.0, "corner_illumination": 1.0,
            "exposure_s": 0.0, "jpeg_quality": 0}  # fmt: skip
    return LensDraw(**{**base, **changes})


def through(image: np.ndarray, d: LensDraw, yaw_rate: float = 0.0) -> np.ndarray:
    lens = CameraEffects(LensConfig(), H, W, HFOV)
    return lens.processing(lens.optics(image.astype(np.float32), d, lens.remap(d), yaw_rate), d)


def columns() -> np.ndarray:
    """Each pixel's value is its column (x4, to fill 0-255): where a pixel samples from shows directly."""
    return np.broadcast_to((np.arange(W) * 4)[None, :, None], (H, W, 3)).astype(np.uint8)


def test_a_camera_that_changes_nothing_passes_the_frame_unchanged() -> None:
    image = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    assert np.array_equal(through(image, draw()), image)
    assert not CameraEffects(LensConfig(), H, W, HFOV).active


def test_barrel_distortion_magnifies_the_centre_and_keeps_the_horizontal_edges() -> None:
    out = through(columns(), draw(k1=-0.3, k2=0.05)).astype(int)[H // 2, :, 0] // 4  # source column per pixel
    centre = (W - 1) / 2
    quarter = int(centre + W / 4)  # an output pixel halfway out: it shows a point nearer the centre
    assert abs(out[quarter] - centre) < abs(quarter - centre) - 2
    assert abs(out[0] - 0) <= 1 and abs(out[-1] - (W - 1)) <= 1  # the rendered field of view is kept
    assert np.all(np.diff(out) >= 0)  # no fold-over


def test_a_longer_focal_length_zooms_in() -> None:
    out = through(columns(), draw(focal_scale=1.1)).astype(int)[H // 2, :, 0] // 4
    assert out[0] > 1 and out[-1] < W - 2  # the edges now show points inside the render


def test_vignetting_darkens_the_corners_to_the_configured_share() -> None:
    grey = np.full((H, W, 3), 200, np.uint8)
    out = through(grey, draw(corner_illumination=0.5)).astype(float)
    assert out[H // 2, W // 2, 0] == pytest.approx(200, abs=2)
    assert out[0, 0, 0] == pytest.approx(100, abs=2)


def test_white_balance_casts_the_light_the_camera_misjudged() -> None:
    assert np.allclose(kelvin_to_rgb(6500.0), 1.0, atol=0.05)  # D65 is near white
    warm, cool = kelvin_to_rgb(2700.0), kelvin_to_rgb(6500.0)
    assert warm[0] > cool[0] and warm[2] < cool[2]
    lens = CameraEffects(
        LensConfig(light_temperature_k=(2700.0, 2700.0), white_balance_error=0.3), H, W, HFOV
    )
    gains = np.array([lens.draw(np.random.default_rng(s)).gains for s in range(50)])  # (50, 3)
    assert np.allclose(gains[:, 1], 1.0) and gains[:, 0].std() > 0.02  # a cast, different per episode
    exact = CameraEffects(LensConfig(light_temperature_k=(2700.0, 2700.0)), H, W, HFOV)
    np.testing.assert_allclose(exact.draw(np.random.default_rng(0)).gains, 1.0)  # judged right: no cast


def test_motion_blur_follows_the_yaw_rate_over_the_exposure() -> None:
    stripes = np.zeros((H, W, 3), np.uint8)
    stripes[:, ::4] = 255  # vertical lines 4 px apart
    lens = CameraEffects(LensConfig(), H, W, HFOV)
    still = through(stripes, draw(exposure_s=0.1), yaw_rate=0.0)
    turning = through(stripes, draw(exposure_s=0.1), yaw_rate=2.0)  # 2 rad/s x 100 ms x f px
    assert np.array_equal(still, stripes)
    assert 2 * 0.1 * lens.focal_px > 4  # a blur as long as the stripes' period at this small camera
    assert turning.astype(float)[:, 8:-8].std() < 0.6 * stripes.astype(float).std()
    assert np.array_equal(turning[0], turning[-1])  # horizontal only: every row alike


def test_jpeg_compression_changes_the_frame_within_its_quality() -> None:
    rng = np.random.default_rng(1)
    image = np.repeat(np.repeat(rng.integers(0, 256, (H // 4, W // 4, 3), dtype=np.uint8), 4, 0), 4, 1)
    out = through(image, draw(jpeg_quality=80))
    mse = np.mean((out.astype(float) - image) ** 2)
    assert mse > 0 and 10 * np.log10(255**2 / mse) > 20  # lossy, but a picture of the same thing (PSNR)
    assert out.dtype == np.uint8 and out.shape == image.shape


@pytest.mark.parametrize(
    "field, value",
    [("k1", [0.1, -0.1]), ("corner_illumination", [0.0, 1.0]), ("jpeg_quality", [0, 80]),
     ("light_temperature_k", [500, 6500]), ("exposure_s", [0.0, 1.0]), ("focal_error", -0.1)],
)  # fmt: skip
def test_bad_lens_values_are_refused_naming_the_field(field: str, value: object) -> None:
    from sim.real_robot_proxy import ProxyConfig

    with pytest.raises(ConfigError, match=field):
        ProxyConfig.from_dict({"lens": {field: value}})


def test_the_nominal_camera_is_the_lens_middle_draw_as_plumb_bob() -> None:
    """Projecting each render pixel through the stated CameraInfo (K, D) lands it on the output pixel that
    the lens's remap samples it for: the manifest and /camera/camera_info describe the frames as drawn."""
    cfg = LensConfig(k1=(-0.35, -0.2), k2=(0.03, 0.1))
    vfov = np.degrees(2 * np.arctan(np.tan(HFOV / 2) * H / W))
    camera = nominal_camera(cfg, H, W, vfov)
    lens = CameraEffects(cfg, H, W, HFOV)
    remap = lens.remap(draw(k1=sum(cfg.k1) / 2, k2=sum(cfg.k2) / 2))
    rows, cols = np.mgrid[0:H, 0:W]
    render_f = 0.5 * W / np.tan(HFOV / 2)  # the render's pinhole
    x, y = (remap.cols - camera.cx) / render_f, (remap.rows - camera.cy) / render_f  # undistorted
    r2 = x**2 + y**2
    k1, k2 = camera.d[:2]
    radial = 1 + k1 * r2 + k2 * r2**2
    assert np.allclose(camera.cx + camera.fx * x * radial, cols, atol=1e-3)
    assert np.allclose(camera.cy + camera.fy * y * radial, rows, atol=1e-3)
    assert camera.distortion_model == "plumb_bob" and camera.d[2:] == (0.0, 0.0, 0.0)
    assert nominal_camera(LensConfig(), H, W, vfov).d == (0.0,) * 5  # no lens: the render's pinhole
