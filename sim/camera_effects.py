"""What a real robot camera does to the picture that a simulator's pinhole render does not.

Each effect stands for a measured property of a small wide-angle robot camera (figures and sources at each
field of `LensConfig`): white balance that misjudges the room's light, a focal length off its nominal value,
the barrel distortion and vignetting of a lens ~114 deg wide, motion blur from the robot's own turning over
the exposure, and JPEG compression at a streaming quality. All are drawn per episode and env except the
blur, which follows the yaw rate at each frame. With every field at its default the image passes unchanged.

The geometric effects (focal error, distortion) are one inverse map per episode, applied with bilinear
interpolation; the distortion is renormalised so that the image's horizontal edges keep the rendered field of
view (the renderer has no pixels beyond it). Shapes: images (H, W, 3) uint8 RGB.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from pydantic import Field, model_validator

from policies.camera_model import CameraModel
from policies.config import Config


class LensConfig(Config):
    """Camera and lens effects; each off at its default, so each can be switched on alone."""

    # Correlated colour temperature of the room's light, K, drawn uniformly: 2700 K (warm-white LED or
    # incandescent) to 6500 K (daylight through windows, cool-white LED); CIE standard illuminants A and D65.
    # [0, 0] = off (the render's white light).
    light_temperature_k: tuple[float, float] = (0.0, 0.0)
    # Camera auto-white-balance error: std of the camera's estimate of that temperature, relative (0.1 = 10%,
    # i.e. ~400 K at 4000 K; consumer AWB errors of a few hundred kelvin, e.g. Cheng et al., JOSA A 2014).
    white_balance_error: float = Field(0.0, ge=0, le=0.5)
    # Focal length error, relative, drawn uniformly in [-e, e]: a lens of nominal focal length off by a few
    # percent (M12 lens tolerances ~±5%); +e magnifies. Pixels beyond the render repeat its edge.
    focal_error: float = Field(0.0, ge=0, le=0.2)
    # Radial distortion coefficients (Brown-Conrady k1, k2 on the normalised image radius, drawn uniformly):
    # wide-angle M12 lenses of 110-120 deg calibrate to k1 ~ -0.25..-0.35 (barrel), k2 ~ 0.05..0.1 (OpenCV
    # calibrations of such lenses, e.g. the Raspberry Pi camera with its 120 deg lens).
    k1: tuple[float, float] = (0.0, 0.0)
    k2: tuple[float, float] = (0.0, 0.0)
    # Vignetting: relative illumination at the image corners, drawn uniformly (1 = none). Wide-angle M12
    # lenses specify 40-60% at the corner before the camera's lens-shading correction, ~70-90% after.
    corner_illumination: tuple[float, float] = (1.0, 1.0)
    # Exposure time, s, drawn uniformly per episode: indoor auto-exposure at 30 fps runs 8-33 ms. The robot's
    # yaw rate over it smears the image horizontally by yaw_rate * exposure * focal_px pixels. 0 = off.
    exposure_s: tuple[float, float] = (0.0, 0.0)
    # JPEG quality the camera streams at, drawn uniformly (integers); 0 = no compression. UVC cameras in MJPEG
    # mode stream at ~70-90; ROS image_transport's compressed default is 95.
    jpeg_quality: tuple[int, int] = (0, 0)

    @model_validator(mode="after")
    def _ranges(self) -> LensConfig:
        for name, lo_bound, hi_bound in (
            ("light_temperature_k", 0.0, 20000.0), ("k1", -1.0, 1.0), ("k2", -1.0, 1.0),
            ("corner_illumination", 0.05, 1.0), ("exposure_s", 0.0, 0.2), ("jpeg_quality", 0, 100),
        ):  # fmt: skip
            low, high = getattr(self, name)
            if not lo_bound <= low <= high <= hi_bound:
                raise ValueError(f"{name} = {(low, high)}: need {lo_bound} <= low <= high <= {hi_bound}")
        low, high = self.light_temperature_k
        if high > 0 and low < 1000:
            raise ValueError(f"light_temperature_k = {(low, high)}: need 1000 K <= low, or [0, 0] for off")
        if self.jpeg_quality[1] > 0 and self.jpeg_quality[0] < 1:
            raise ValueError(f"jpeg_quality = {self.jpeg_quality}: need 1 <= low, or [0, 0] for off")
        return self

    @property
    def geometric(self) -> bool:
        return self.focal_error > 0 or self.k1 != (0.0, 0.0) or self.k2 != (0.0, 0.0)


@dataclass(frozen=True)
class LensDraw:
    """One episode's camera, drawn from a `LensConfig`."""

    gains: np.ndarray  # (3,) RGB gains of the white-balance cast, green = 1
    focal_scale: float  # 1 + focal error
    k1: float
    k2: float
    corner_illumination: float
    exposure_s: float
    jpeg_quality: int  # 0 = none


@dataclass(frozen=True)
class Remap:
    """The lens for one episode: each output pixel's source column and row in the render (H, W) float32,
    None when the geometry is untouched, and the vignetting gain (H, W, 1) float32."""

    cols: np.ndarray | None
    rows: np.ndarray | None
    gain: np.ndarray


def kelvin_to_rgb(kelvin: float) -> np.ndarray:
    """Linear-ish RGB (3,) of a black body at `kelvin`, green = 1 (Tanner Helland's fit to Mitchell
    Charity's black-body table, 1000-40000 K)."""
    t = kelvin / 100.0
    r = 255.0 if t <= 66 else 329.698727446 * (t - 60) ** -0.1332047592
    g = 99.4708025861 * np.log(t) - 161.1195681661 if t <= 66 else 288.1221695283 * (t - 60) ** -0.0755148492
    b = 255.0 if t >= 66 else (0.0 if t <= 19 else 138.5177312231 * np.log(t - 10) - 305.0447927307)
    rgb = np.clip([r, g, b], 1.0, 255.0)
    return rgb / rgb[1]


def nominal_camera(cfg: LensConfig, height: int, width: int, vfov_deg: float) -> CameraModel:
    """The camera of the lens's middle draw (no focal error, k1 and k2 at the middle of their ranges) on a
    render of vertical field of view `vfov_deg`, as ROS CameraInfo states it (plumb_bob).

    `CameraEffects.remap` distorts radii r in half-widths as r (1 + k1 r^2 + k2 r^4) / (1 + k1 + k2). With
    t = tan(hfov / 2), r = x / t for the normalised coordinate x of a pinhole of focal f: that is plumb_bob
    with k1 / t^2, k2 / t^4 and focal f / (1 + k1 + k2).
    """
    render = CameraModel.from_vfov(width, height, vfov_deg)
    k1, k2 = sum(cfg.k1) / 2, sum(cfg.k2) / 2
    if k1 == 0.0 and k2 == 0.0:
        return render
    t = 0.5 * width / render.fx
    f = render.fx / (1.0 + k1 + k2)
    return CameraModel(width=width, height=height, fx=f, fy=f, cx=render.cx, cy=render.cy,
                       d=(k1 / t**2, k2 / t**4, 0.0, 0.0, 0.0))  # fmt: skip


class CameraEffects:
    """Draws a camera per episode and applies it to frames of one fixed size."""

    def __init__(self, cfg: LensConfig, height: int, width: int, hfov_rad: float) -> None:
        self.cfg, self.h, self.w = cfg, height, width
        self.focal_px = 0.5 * width / np.tan(0.5 * hfov_rad)  # pinhole focal length of the render, px
        # Normalised coordinates of every output pixel centre: x in [-1, 1] across the width.
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
        self._cx, self._cy = 0.5 * (width - 1), 0.5 * (height - 1)
        half = 0.5 * width
        self._x, self._y = (xs - self._cx) / half, (ys - self._cy) / half  # (H, W) each
        self._r2 = self._x**2 + self._y**2
        self._corner_r2 = float(self._r2.max())

    @property
    def active(self) -> bool:
        c = self.cfg
        return (c.light_temperature_k[1] > 0 or c.geometric or c.corner_illumination != (1.0, 1.0)
                or c.exposure_s[1] > 0 or c.jpeg_quality[1] > 0)  # fmt: skip

    def draw(self, rng: np.random.Generator) -> LensDraw:
        c = self.cfg
        gains = np.ones(3)
        if c.light_temperature_k[1] > 0:
            light = rng.uniform(*c.light_temperature_k)
            judged = light * (1.0 + c.white_balance_error * rng.standard_normal())
            # The camera divides by what it thinks the light is: the cast is light / judged, green = 1.
            gains = kelvin_to_rgb(light) / kelvin_to_rgb(float(np.clip(judged, 1000.0, 40000.0)))
        quality = int(rng.integers(c.jpeg_quality[0], c.jpeg_quality[1] + 1)) if c.jpeg_quality[1] else 0
        return LensDraw(
            gains=gains,
            focal_scale=1.0 + rng.uniform(-c.focal_error, c.focal_error),
            k1=rng.uniform(*c.k1),
            k2=rng.uniform(*c.k2),
            corner_illumination=rng.uniform(*c.corner_illumination),
            exposure_s=rng.uniform(*c.exposure_s),
            jpeg_quality=quality,
        )

    def remap(self, draw: LensDraw) -> Remap | None:
        """Where each output pixel samples the render, and the vignetting's gain there; None when neither
        moves nor darkens a pixel."""
        geometric = draw.focal_scale != 1.0 or draw.k1 != 0.0 or draw.k2 != 0.0
        if not geometric and draw.corner_illumination == 1.0:
            return None
        gain = 1.0 - (1.0 - draw.corner_illumination) * self._r2 / self._corner_r2  # (H, W)
        if not geometric:
            return Remap(None, None, gain[..., None].astype(np.float32))
        # Distorted radius r_d = r_u (1 + k1 r_u^2 + k2 r_u^4) / (1 + k1 + k2): the horizontal edge (r = 1)
        # stays put. Invert for r_u by fixed-point iteration (converges for |k| < 0.5 on r <= ~1.2).
        norm = 1.0 + draw.k1 + draw.k2
        r_d = np.sqrt(self._r2)
        r_u = r_d.copy()
        for _ in range(20):
            r_u = r_d * norm / (1.0 + draw.k1 * r_u**2 + draw.k2 * r_u**4)
        scale = np.divide(r_u, r_d, out=np.ones_like(r_d), where=r_d > 0) / draw.focal_scale
        half = 0.5 * self.w
        rows = (self._cy + self._y * scale * half).astype(np.float32)  # (H, W) source row of each pixel
        cols = (self._cx + self._x * scale * half).astype(np.float32)
        return Remap(cols, rows, gain[..., None].astype(np.float32))

    def optics(self, image: np.ndarray, draw: LensDraw, remap: Remap | None, yaw_rate: float) -> np.ndarray:
        """Motion blur at `yaw_rate` rad/s over the exposure, then the lens: focal error and distortion
        (bilinear, the render's edge repeated beyond it) and vignetting (`remap(draw)`).
        Shape: (H, W, 3) float32 in, same out."""
        out = image
        blur_px = abs(yaw_rate) * draw.exposure_s * self.focal_px
        if blur_px > 0.5:
            out = cv2.filter2D(out, -1, _box_kernel(blur_px), borderType=cv2.BORDER_REPLICATE)
        if remap is not None:
            if remap.cols is not None:
                out = cv2.remap(
                    out, remap.cols, remap.rows, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
                )
            out = out * remap.gain
        return out

    def processing(self, image: np.ndarray, draw: LensDraw) -> np.ndarray:
        """White balance cast, then 8 bits, then JPEG. Shape: (H, W, 3) float32 in, uint8 out."""
        out = np.clip(np.rint(image * draw.gains.astype(np.float32)), 0, 255).astype(np.uint8)
        if draw.jpeg_quality:
            # RGB in, RGB out: OpenCV's codec takes BGR, so the channels are swapped on the way in and out.
            ok, buf = cv2.imencode(".jpg", out[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, draw.jpeg_quality])
            out = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]
        return np.ascontiguousarray(out)


def _box_kernel(length_px: float) -> np.ndarray:
    """A horizontal averaging kernel (1, K) `length_px` long, its fractional end weighted, K odd."""
    n = int(np.floor(length_px))
    weights = np.r_[np.ones(n), length_px - n] if length_px - n > 1e-6 else np.ones(n)
    k = len(weights) | 1  # odd, so the blur is centred
    kernel = np.zeros((1, k), dtype=np.float32)
    kernel[0, : len(weights)] = weights / weights.sum()
    return kernel
