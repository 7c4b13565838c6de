"""What a teacher sees of the privileged state: all of it, or only what the student's camera could see.

A teacher that acts on facts the student can never observe (where a marker behind the robot is, its own
world pose) teaches actions the student cannot imitate: measured on the default robot, the student alone
errs most while its target has not yet been in view, and turning in place until it is (a scripted
search) lifted it from 72% to 83% (`../README.md`, "imitable teacher"). With a `ViewConfig` the teacher's
input keeps the fields that are always observable (speed, yaw rate, ...), and each object's fields only
while the object is inside the camera's horizontal field of view; everything else reads 0. The
buffer's entries keep the whole privileged state; the teacher's input and the predictor's target (what the
teacher sees, `OnlineDistillation.normalise`) go through the view, so a teacher trained with it acts on
exactly what it was trained on, and the gate's error measures how well the student knows what it sees.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from policies.config import Config


class ViewObject(Config):
    """A thing the camera may see: its robot-frame position fields and the fields it makes visible."""

    x: str  # field of the object's forward offset (robot frame, x forward), m
    y: str  # field of its left offset, m
    radius_m: float = Field(0.0, ge=0)  # its half-width: seen while any of it is inside the cone, m
    fields: list[str] = Field(default_factory=list)  # zeroed with x and y while it is out of view


class ViewConfig(Config):
    """The camera's view of the privileged state, in the robot's field names (`RobotSpec`)."""

    half_fov_deg: float = Field(gt=0, le=180)  # half the camera's horizontal field of view, deg
    keep: list[str] = Field(default_factory=list)  # always seen (the IMU's speed and yaw rate, ...)
    objects: list[ViewObject] = Field(default_factory=list)  # seen while in the field of view


class TeacherView:
    """privileged (N, Dq) -> the same shape, each field outside the view zeroed."""

    def __init__(self, cfg: ViewConfig, fields: tuple[str, ...] | list[str]) -> None:
        col = {name: i for i, name in enumerate(fields)}
        named = [*cfg.keep, *(f for o in cfg.objects for f in (o.x, o.y, *o.fields))]
        if unknown := sorted(set(named) - set(col)):
            raise ValueError(f"teacher view names fields the robot does not have: {unknown}")
        self.half_fov = np.radians(cfg.half_fov_deg)
        self.keep = np.zeros(len(fields), dtype=bool)  # (Dq,)
        self.keep[[col[f] for f in cfg.keep]] = True
        self.objects = [
            (col[o.x], col[o.y], o.radius_m, [col[f] for f in (o.x, o.y, *o.fields)]) for o in cfg.objects
        ]
        # the same per object as arrays, so a call is a few whole-array operations (it runs per decision)
        self._ix = np.array([ix for ix, *_ in self.objects], np.int64)  # (O,)
        self._iy = np.array([iy for _, iy, *_ in self.objects], np.int64)  # (O,)
        self._radius = np.array([r for _, _, r, _ in self.objects], np.float64)  # (O,)
        self._covers = np.zeros((len(self.objects), len(fields)), dtype=bool)  # (O, Dq): fields it shows
        for j, (*_, cols) in enumerate(self.objects):
            self._covers[j, cols] = True

    def visible(self, privileged: np.ndarray) -> np.ndarray:
        """(N, Dq) -> (N, O) bool: each object inside the horizontal field of view."""
        x = privileged[:, self._ix].astype(np.float64)  # (N, O)
        y = privileged[:, self._iy].astype(np.float64)  # (N, O)
        dist = np.hypot(x, y)
        # the angle the object's half-width covers; an object the camera sits inside counts as seen
        spread = np.arcsin(np.clip(self._radius / np.maximum(dist, 1e-9), 0.0, 1.0))
        return (dist > 0) & (np.abs(np.arctan2(y, x)) <= self.half_fov + spread)

    def __call__(self, privileged: np.ndarray) -> np.ndarray:
        privileged = np.asarray(privileged)
        seen = self.visible(privileged)  # (N, O)
        mask = self.keep | (seen[:, :, None] & self._covers).any(axis=1)  # (N, Dq)
        return np.where(mask, privileged, 0).astype(privileged.dtype)
