"""The default task: visit coloured floor markers in a fixed colour order without touching a hazard.

Backend-agnostic and vectorised over N envs: a backend supplies the true base pose, velocity and bumper
state after each control period; the task samples layouts, keeps score, ends episodes, computes the
reward terms (one named method each, weights in `TaskConfig.rewards`, mujoco_playground style) and builds
the privileged state the teacher sees. The colour order is fixed, so `progress` (markers reached / M)
tells a student which colour is next without any goal input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.config import SimConfig, TaskConfig
from sim.robot_interface import Outcome, TaskStatus
from sim.robots.diffbot import constants as C

_SPAWN_MARGIN_M = 0.35  # least distance from the start pose to a wall, m
_MARKER_MARGIN_M = 0.4  # least distance from a marker centre to a wall, m
_PASSAGE_M = 0.1  # free width beyond the robot's diameter left between obstacles and walls, m
_MAX_LAYOUT_TRIES = 200


@dataclass(frozen=True)
class Layout:
    """An episode's arena. Shapes: markers (M, 2) xy in visiting order; obstacles (O, 2); start (3,)."""

    markers: np.ndarray  # m
    obstacles: np.ndarray  # m
    start: np.ndarray  # x m, y m, yaw rad


@dataclass(frozen=True)
class _StepInfo:
    """Per-env quantities of one control step that the reward terms read. Each array has shape (N,)."""

    active: np.ndarray  # bool: the env was stepped
    gain: np.ndarray  # m gained towards the marker that was current at the start of the step
    turn: np.ndarray  # rad by which the heading error to that marker shrank
    reached: np.ndarray  # bool: a marker was reached
    success: np.ndarray  # bool
    collision: np.ndarray  # bool
    switched: np.ndarray  # bool: the skill changed
    inside: np.ndarray  # 0..1: how far inside `clearance_m` of the nearest hazard


def privileged_fields(num_obstacles: int) -> tuple[str, ...]:
    """Names of the privileged state columns; robot-frame vectors are x forward, y left."""
    obstacles = [f"obstacle{k}_{q}" for k in range(num_obstacles) for q in ("dx_m", "dy_m", "gap_m")]
    return (
        "x_m", "y_m", "cos_yaw", "sin_yaw",  # world pose, arena centre at the origin
        "v_mps", "w_radps",  # body forward speed and yaw rate
        "target_dx_m", "target_dy_m", "target_dist_m",  # current marker in the robot frame (0 when done)
        "target_cos", "target_sin",  # its bearing as a unit vector: steering without the distance's scale
        "next_dx_m", "next_dy_m",  # the marker after it (0 when none)
        *obstacles,  # nearest first; gap = distance between the surfaces
        "wall_gap_m",  # distance between the chassis and the nearest wall
        "progress", "time_left",  # markers reached / M; remaining fraction of the time limit
    )  # fmt: skip


def robot_privileged_fields(sim_config: str | Path | None = None) -> tuple[str, ...]:
    """Privileged state columns of the robot a sim config describes (None: DiffBot on MuJoCo,
    sim/configs/mujoco.yaml): what an exported predictor predicts (`policies.export.export_artifact`)."""
    path = sim_config or Path(__file__).parent / "configs" / "mujoco.yaml"
    return privileged_fields(SimConfig.from_yaml(path).task.num_obstacles)


class MarkerTask:
    """Score and layout of N envs of the marker tour."""

    def __init__(self, cfg: TaskConfig, num_envs: int, control_hz: int, safe_skill: int) -> None:
        self.cfg = cfg
        self.num_envs = num_envs
        self.num_markers = len(cfg.markers)
        self.max_steps = max(1, round(cfg.time_limit_s * control_hz))
        self.fields = privileged_fields(cfg.num_obstacles)
        self._columns = {name: i for i, name in enumerate(self.fields)}
        self.reward_names = tuple(type(cfg.rewards).model_fields)  # each has a `_reward_<name>` method
        self._safe_skill = safe_skill
        n, m, o = num_envs, self.num_markers, cfg.num_obstacles
        self.obstacles = np.zeros((n, o, 2))  # (N, O, 2) world xy of each env's obstacles, m
        # The same points as complex numbers x + iy, in which a rotation is one multiplication.
        self._markers_c = np.zeros((n, m), dtype=np.complex128)  # (N, M) in visiting order
        self._obstacles_c = np.zeros((n, o), dtype=np.complex128)  # (N, O)
        self._rows = np.arange(n)
        self.reached = np.zeros(n, dtype=np.int64)
        self.step = np.zeros(n, dtype=np.int64)
        self.outcome = np.zeros(n, dtype=np.int8)
        self._dist = np.zeros(n)  # distance to the current marker after the last step, m
        self._bearing = np.zeros(n)  # |heading error| to the current marker after the last step, rad
        self._skill = np.full(n, safe_skill, dtype=np.int64)
        self._weights = np.array([getattr(cfg.rewards, k) for k in self.reward_names])  # (K,)
        self._reward = np.zeros(n, dtype=np.float32)
        self._terms = np.zeros((len(self.reward_names), n), dtype=np.float32)  # (K, N) unweighted

    def sample_layout(self, rng: np.random.Generator) -> Layout:
        """Rejection-sample a layout in which every marker can be reached and every obstacle passed."""
        for _ in range(_MAX_LAYOUT_TRIES):
            layout = self._try_layout(rng)
            if layout is not None:
                return layout
        raise RuntimeError(
            f"no layout found in {_MAX_LAYOUT_TRIES} tries: lower task.marker_spacing_m "
            f"({self.cfg.marker_spacing_m}) or task.num_obstacles ({self.cfg.num_obstacles})"
        )

    def _try_layout(self, rng: np.random.Generator) -> Layout | None:
        """One attempt: start, then markers, then obstacles, each uniform among the free places."""
        half, spacing = C.ARENA_HALF_SIZE_M, self.cfg.marker_spacing_m
        xy = rng.uniform(-(half - _SPAWN_MARGIN_M), half - _SPAWN_MARGIN_M, size=2)
        start = np.array([xy[0], xy[1], rng.uniform(-np.pi, np.pi)])
        markers: list[np.ndarray] = []
        for _ in range(self.num_markers):
            p = _place(rng, half - _MARKER_MARGIN_M, [(q, spacing) for q in [start[:2], *markers]])
            if p is None:
                return None
            markers.append(p)
        body = C.OBSTACLE_RADIUS_M + C.ROBOT_RADIUS_M  # centre distance at contact
        passage = C.OBSTACLE_RADIUS_M + 2 * C.ROBOT_RADIUS_M + _PASSAGE_M
        obstacles: list[np.ndarray] = []
        for _ in range(self.cfg.num_obstacles):
            keep_out = [(start[:2], body + 0.3)] + [(q, body + self.cfg.reach_radius_m) for q in markers]
            keep_out += [(q, C.OBSTACLE_RADIUS_M + passage) for q in obstacles]
            p = _place(rng, half - passage, keep_out)
            if p is None:
                return None
            obstacles.append(p)
        return Layout(np.array(markers).reshape(-1, 2), np.array(obstacles).reshape(-1, 2), start)

    def begin(self, env: int, layout: Layout, pose: np.ndarray) -> None:
        """Start env's episode on `layout` with the base at `pose` (x, y, yaw) after settling."""
        self.obstacles[env] = layout.obstacles
        self._markers_c[env] = layout.markers @ [1, 1j]
        self._obstacles_c[env] = layout.obstacles @ [1, 1j]
        self.reached[env] = 0
        self.step[env] = 0
        self.outcome[env] = Outcome.RUNNING
        self._skill[env] = self._safe_skill
        self._dist[env] = np.linalg.norm(layout.markers[0] - pose[:2])
        self._bearing[env] = abs(_bearing(self._markers_c[env, :1], pose[None])[0])
        self._reward[env] = 0.0
        self._terms[:, env] = 0.0

    def update(
        self, pose: np.ndarray, skill: np.ndarray, bumped: np.ndarray, nan: np.ndarray, active: np.ndarray
    ) -> None:
        """Score one control step of the `active` envs.

        Shapes (N,) unless noted: pose (N, 3) true x, y, yaw after the step; skill applied during it;
        bumped: the bumper touched a hazard during it; nan: the state became non-finite (restored).
        """
        m = self.num_markers
        ok = active & ~nan
        self.step += active
        z = pose[:, 0] + 1j * pose[:, 1]  # (N,) base position as x + iy
        touring = ok & (self.reached < m)
        target = self._target_c()  # (N,) the marker current before the step
        dist, bearing = np.abs(target - z), np.abs(_bearing(target, pose))
        gain = np.where(touring, self._dist - dist, 0.0)
        turn = np.where(touring, self._bearing - bearing, 0.0)
        reached = touring & (dist <= self.cfg.reach_radius_m)
        self.reached += reached
        collision = ok & bumped
        success = reached & ~collision & (self.reached == m)
        timeout = ok & ~collision & ~success & (self.step >= self.max_steps)
        self.outcome[active & nan] = Outcome.NAN
        self.outcome[collision] = Outcome.COLLISION
        self.outcome[success] = Outcome.SUCCESS
        self.outcome[timeout] = Outcome.TIMEOUT
        if reached.any():  # shaping continues from the next marker
            target = self._target_c()
            dist, bearing = np.abs(target - z), np.abs(_bearing(target, pose))
        self._dist = np.where(ok, dist, self._dist)
        self._bearing = np.where(ok, bearing, self._bearing)
        gap = np.abs(self._obstacles_c - z[:, None]).min(axis=1, initial=np.inf) - C.OBSTACLE_RADIUS_M
        gap = np.minimum(gap - C.ROBOT_RADIUS_M, self._wall_gap(pose))  # nearest hazard surface, m
        inside = np.clip(1.0 - gap / self.cfg.clearance_m, 0.0, 1.0)
        switched = ok & (skill != self._skill)
        self._score(_StepInfo(ok, gain, turn, reached, success, collision, switched, inside))
        self._skill = np.where(active, skill, self._skill)

    def _score(self, info: _StepInfo) -> None:
        terms = np.stack([getattr(self, f"_reward_{k}")(info) for k in self.reward_names])  # (K, N)
        terms *= info.active
        self._terms = terms.astype(np.float32)
        self._reward = (self._weights @ terms).astype(np.float32)

    # Reward terms: unweighted, shape (N,). Names match the fields of `RewardWeights`.
    def _reward_progress(self, info: _StepInfo) -> np.ndarray:
        return info.gain

    def _reward_heading(self, info: _StepInfo) -> np.ndarray:
        return info.turn

    def _reward_reached(self, info: _StepInfo) -> np.ndarray:
        return info.reached.astype(np.float64)

    def _reward_success(self, info: _StepInfo) -> np.ndarray:
        return info.success.astype(np.float64)

    def _reward_collision(self, info: _StepInfo) -> np.ndarray:
        return info.collision.astype(np.float64)

    def _reward_time(self, info: _StepInfo) -> np.ndarray:
        return info.active.astype(np.float64)

    def _reward_skill_switch(self, info: _StepInfo) -> np.ndarray:
        return info.switched.astype(np.float64)

    def _reward_clearance(self, info: _StepInfo) -> np.ndarray:
        return info.inside

    def status(self) -> TaskStatus:
        """Copy of the current status of every env."""
        return TaskStatus(
            progress=(self.reached / self.num_markers).astype(np.float32),
            step=self.step.copy(),
            outcome=self.outcome.copy(),
            reward=self._reward.copy(),
            reward_terms=dict(zip(self.reward_names, self._terms.copy(), strict=True)),
        )

    def privileged(self, pose: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        """Privileged state (N, Dq) float32 in `self.fields` order from pose (N, 3) and velocity (N, 2)."""
        n, m, o = self.num_envs, self.num_markers, self.cfg.num_obstacles
        pts = np.empty((n, 2 + o), dtype=np.complex128)  # current marker, next marker, obstacles
        pts[:, 0] = self._markers_c[self._rows, np.minimum(self.reached, m - 1)]
        pts[:, 1] = self._markers_c[self._rows, np.minimum(self.reached + 1, m - 1)]
        pts[:, 2:] = self._obstacles_c
        heading = np.exp(1j * pose[:, 2])  # (N,)
        rel = (pts - (pose[:, 0] + 1j * pose[:, 1])[:, None]) * np.conj(heading)[:, None]
        # rel: (N, 2 + O) in the robot frame
        dist = np.abs(rel)
        rel[:, 0] *= self.reached < m  # no current marker once all are reached
        rel[:, 1] *= self.reached + 1 < m  # no next marker for the last one
        order = np.argsort(dist[:, 2:], axis=1) + 2  # obstacles nearest first
        target = dist[:, 0] * (self.reached < m)
        unit = np.divide(rel[:, 0], target, out=np.zeros(n, dtype=np.complex128), where=target > 0)
        out = np.empty((n, len(self.fields)), dtype=np.float32)
        col = self._columns
        out[:, col["x_m"]], out[:, col["y_m"]] = pose[:, 0], pose[:, 1]
        out[:, col["cos_yaw"]], out[:, col["sin_yaw"]] = heading.real, heading.imag
        out[:, col["v_mps"]], out[:, col["w_radps"]] = velocity[:, 0], velocity[:, 1]
        out[:, col["target_dx_m"]], out[:, col["target_dy_m"]] = rel[:, 0].real, rel[:, 0].imag
        out[:, col["target_dist_m"]] = target
        out[:, col["target_cos"]], out[:, col["target_sin"]] = unit.real, unit.imag
        out[:, col["next_dx_m"]], out[:, col["next_dy_m"]] = rel[:, 1].real, rel[:, 1].imag
        first = col.get("obstacle0_dx_m", 0)
        obstacles = out[:, first : first + 3 * o].reshape(n, o, 3)  # view into out: dx, dy, gap per obstacle
        near = np.take_along_axis(rel, order, 1)  # (N, O)
        obstacles[..., 0], obstacles[..., 1] = near.real, near.imag
        obstacles[..., 2] = np.take_along_axis(dist, order, 1) - C.OBSTACLE_RADIUS_M - C.ROBOT_RADIUS_M
        out[:, col["wall_gap_m"]] = self._wall_gap(pose)
        out[:, col["progress"]] = self.reached / m
        out[:, col["time_left"]] = 1.0 - self.step / self.max_steps
        return out

    def _target_c(self) -> np.ndarray:
        """(N,) complex world position of each env's current marker (the last one once all are reached)."""
        return self._markers_c[self._rows, np.minimum(self.reached, self.num_markers - 1)]

    @staticmethod
    def _wall_gap(pose: np.ndarray) -> np.ndarray:
        """(N,) distance between the chassis and the nearest wall, m."""
        return C.ARENA_HALF_SIZE_M - np.abs(pose[:, :2]).max(axis=1) - C.ROBOT_RADIUS_M


def _bearing(target: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """(N,) angle from the heading to complex world points target (N,), rad in (-pi, pi]; pose (N, 3)."""
    return np.angle((target - (pose[:, 0] + 1j * pose[:, 1])) * np.exp(-1j * pose[:, 2]))


def _place(
    rng: np.random.Generator, limit: float, keep_out: list[tuple[np.ndarray, float]]
) -> np.ndarray | None:
    """A uniform point in [-limit, limit]^2 at least `d` away from every (point, d) in keep_out, or None."""
    for _ in range(50):
        p = rng.uniform(-limit, limit, size=2)
        if all(np.linalg.norm(p - q) >= d for q, d in keep_out):
            return p
    return None
