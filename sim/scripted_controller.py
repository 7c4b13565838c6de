"""Hand-written marker-tour controller on the privileged state: proves the task solvable, and is a baseline.

Per env: aim at the current marker; when an obstacle lies on the straight path, aim at a waypoint beside it
(on the side away from the walls); turn in place when the aim is far off the heading, otherwise drive along
a pure-pursuit arc, slower near hazards.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.robot_interface import RobotSpec
from sim.robots.diffbot import constants as C

_PASS_M = C.OBSTACLE_RADIUS_M + C.ROBOT_RADIUS_M + 0.15  # waypoint distance from an obstacle centre, m
_BLOCK_M = C.OBSTACLE_RADIUS_M + C.ROBOT_RADIUS_M + 0.08  # path-to-centre distance that counts as blocked, m
_TURN_RAD = 0.6  # heading error above which the robot turns in place, rad


class ScriptedController:
    """Privileged state (N, Dq) -> action (skill (N,), params (N, P)) for the DiffBot contract."""

    def __init__(self, spec: RobotSpec) -> None:
        fields = spec.privileged_fields
        self._col = {name: i for i, name in enumerate(fields)}
        self._obstacles = sum(f.startswith("obstacle") and f.endswith("_gap_m") for f in fields)
        c = spec.contract
        self._drive, self._turn = c.skill_id("drive"), c.skill_id("turn_in_place")
        self._defaults = c.layout.defaults
        slots = (("drive", "speed", 0), ("drive", "curvature", 1), ("turn_in_place", "turn_rate", 0))
        self._slots = {name: c.layout.slices[c.skill_id(s)].start + k for s, name, k in slots}

    def act(self, privileged: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One action per env. Shapes: privileged (N, Dq) -> skill (N,) int64, params (N, P)."""
        col = lambda name: privileged[:, self._col[name]].astype(np.float64)  # noqa: E731
        aim = np.stack([col("target_dx_m"), col("target_dy_m")], axis=1)  # (N, 2) robot frame
        aim = self._avoid(aim, col)
        err = np.arctan2(aim[:, 1], aim[:, 0])
        dist = np.maximum(np.linalg.norm(aim, axis=1), 0.3)
        gaps = [col(f"obstacle{k}_gap_m") for k in range(self._obstacles)] + [col("wall_gap_m")]
        near = np.min(np.stack(gaps), axis=0)
        turn = np.abs(err) > _TURN_RAD
        params = np.tile(self._defaults, (len(aim), 1))
        params[:, self._slots["speed"]] = np.clip(0.5 * np.clip(near / 0.3, 0.4, 1.0), 0.1, 0.5)
        params[:, self._slots["curvature"]] = np.clip(2.0 * np.sin(err) / dist, -2.5, 2.5)
        params[:, self._slots["turn_rate"]] = np.clip(3.0 * err, -1.5, 1.5)
        return np.where(turn, self._turn, self._drive).astype(np.int64), params

    def _avoid(self, aim: np.ndarray, col: Callable[[str], np.ndarray]) -> np.ndarray:
        """Replace the aim (N, 2) by a waypoint beside the nearest obstacle blocking the straight path."""
        length = np.maximum(np.linalg.norm(aim, axis=1), 1e-6)
        ahead = aim / length[:, None]  # (N, 2) unit vector to the target
        left = np.stack([-ahead[:, 1], ahead[:, 0]], axis=1)
        best = np.full(len(aim), np.inf)  # along-path distance of the nearest blocking obstacle
        out = aim.copy()
        yaw = np.arctan2(col("sin_yaw"), col("cos_yaw"))
        pos = np.stack([col("x_m"), col("y_m")], axis=1)
        for k in range(self._obstacles):
            o = np.stack([col(f"obstacle{k}_dx_m"), col(f"obstacle{k}_dy_m")], axis=1)  # (N, 2)
            along, side = np.sum(o * ahead, axis=1), np.sum(o * left, axis=1)
            blocking = (along > 0) & (along < length) & (np.abs(side) < _BLOCK_M) & (along < best)
            # pass on the side away from the obstacle, unless that side is cramped against a wall
            sign = np.where(side > 0, -1.0, 1.0)
            first = o + sign[:, None] * _PASS_M * left
            other = o - sign[:, None] * _PASS_M * left
            cramped = _wall_gap(pos, yaw, first) < C.ROBOT_RADIUS_M + 0.1
            waypoint = np.where(cramped[:, None], other, first)
            out = np.where(blocking[:, None], waypoint, out)
            best = np.where(blocking, along, best)
        return out


def _wall_gap(pos: np.ndarray, yaw: np.ndarray, point: np.ndarray) -> np.ndarray:
    """(N,) distance from a robot-frame point (N, 2) to the nearest wall, m."""
    c, s = np.cos(yaw), np.sin(yaw)
    world = pos + np.stack([c * point[:, 0] - s * point[:, 1], s * point[:, 0] + c * point[:, 1]], axis=1)
    return C.ARENA_HALF_SIZE_M - np.abs(world).max(axis=1)
