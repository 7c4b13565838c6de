"""The camera a student was trained with (a pinhole and its lens distortion), checked against a real one.

The student learnt the world through one camera: its field of view decides where and how large a marker
appears. The artifact's manifest carries that camera (`policies.export`, `Artifact.camera`), so a deployment
compares the robot's calibrated camera (a ROS CameraInfo, `agent.nodes.encoder`) with it. The resolution
itself may differ (the encoder resizes every frame to the model's input); the fields of view, and so the
aspect ratio, and the distortion may not.
"""

from __future__ import annotations

import math

from pydantic import Field

from policies.config import Config

# A field of view differing by more is a mismatch: 2 deg is under 2 px at the edge of the 128 px wide
# student image (113.8 deg across, ~0.9 deg per px), and within the +-4% focal error the gap proxy trains on
# (sim/configs/proxy_gap.yaml, ~+-2.7 deg).
FOV_TOLERANCE_DEG = 2.0
# A plumb_bob coefficient differing by more is a mismatch: the gap proxy's k1 range spans 0.06 in these units.
DISTORTION_TOLERANCE = 0.05
PLUMB_BOB = "plumb_bob"  # ROS CameraInfo's name for Brown-Conrady (k1, k2, t1, t2, k3), OpenCV's default


class CameraModel(Config):
    """A pinhole camera with ROS CameraInfo's intrinsics and distortion (pixel centres at integers)."""

    width: int = Field(gt=0)  # image width, px
    height: int = Field(gt=0)  # image height, px
    fx: float = Field(gt=0)  # focal length along x, px
    fy: float = Field(gt=0)  # focal length along y, px
    cx: float  # principal point, px from the left pixel's centre
    cy: float  # principal point, px from the top pixel's centre
    distortion_model: str = PLUMB_BOB  # CameraInfo.distortion_model
    d: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)  # CameraInfo.D: plumb_bob (k1, k2, t1, t2, k3)

    @classmethod
    def from_vfov(cls, width: int, height: int, vfov_deg: float) -> CameraModel:
        """The camera of a render with square pixels and vertical field of view `vfov_deg` (MuJoCo's fovy)."""
        f = 0.5 * height / math.tan(math.radians(vfov_deg) / 2)
        return cls(width=width, height=height, fx=f, fy=f, cx=0.5 * (width - 1), cy=0.5 * (height - 1))

    @property
    def hfov_deg(self) -> float:
        """Horizontal field of view of the undistorted pinhole, degrees."""
        return math.degrees(2 * math.atan(0.5 * self.width / self.fx))

    @property
    def vfov_deg(self) -> float:
        """Vertical field of view of the undistorted pinhole, degrees."""
        return math.degrees(2 * math.atan(0.5 * self.height / self.fy))

    @property
    def distorted(self) -> bool:
        return any(abs(k) > 1e-9 for k in self.d)

    def describe(self) -> str:
        """One line: resolution, fields of view and distortion."""
        lens = f"{self.distortion_model} {_coefficients(self.d)}" if self.distorted else "no distortion"
        return (f"{self.width}x{self.height} px, {self.hfov_deg:.1f} x {self.vfov_deg:.1f} deg, "
                f"fx {self.fx:.1f} fy {self.fy:.1f} px, {lens}")  # fmt: skip


def mismatches(trained: CameraModel, seen: CameraModel) -> list[str]:
    """What differs between the camera the student was trained with and the one `seen`, each naming both
    values; empty when they agree within FOV_TOLERANCE_DEG and DISTORTION_TOLERANCE."""
    out = []
    for axis in ("hfov_deg", "vfov_deg"):
        want, got = getattr(trained, axis), getattr(seen, axis)
        if abs(want - got) > FOV_TOLERANCE_DEG:
            name = "horizontal" if axis == "hfov_deg" else "vertical"
            out.append(f"{name} field of view {got:.1f} deg, trained with {want:.1f} deg "
                       f"(tolerance {FOV_TOLERANCE_DEG:g} deg)")  # fmt: skip
    if trained.distorted or seen.distorted:
        same_model = trained.distortion_model == seen.distortion_model
        pad = max(len(trained.d), len(seen.d))
        want_d, got_d = (tuple(d) + (0.0,) * (pad - len(d)) for d in (trained.d, seen.d))
        apart = any(abs(a - b) > DISTORTION_TOLERANCE for a, b in zip(want_d, got_d, strict=True))
        if apart or not same_model:
            out.append(f"distortion {_lens(seen)}, trained with {_lens(trained)} "
                       f"(tolerance {DISTORTION_TOLERANCE:g} per coefficient)")  # fmt: skip
    return out


def _lens(camera: CameraModel) -> str:
    return f"{camera.distortion_model} {_coefficients(camera.d)}" if camera.distorted else "none"


def _coefficients(d: tuple[float, ...]) -> str:
    return "[" + ", ".join(f"{k:.3f}" for k in d) + "]"
