"""What a teacher sees of the privileged state: all of it, or only what the student's camera could see.

A teacher that acts on facts the student can never observe (where a marker behind the robot is, its own
world pose) teaches actions the student cannot imitate: measured on the default robot, the student alone
errs most while its target has not yet been in view, and turning in place until it is (a scripted
search) lifted it from 72% to 83% (`docs/opd_experiments.md`, "An imitable teacher"). With a `ViewConfig`
the teacher's input keeps the fields that are always observable (speed, yaw rate, ...), and each object's
fields only while the object is inside the camera's horizontal field of view; everything else reads 0. The
buffer's entries keep the whole privileged state; the teacher's input and the predictor's target (what the
teacher sees, `OnlineDistillation.normalise`) go through the view, so a teacher trained with it acts on
exactly what it was trained on, and the gate's error measures how well the student knows what it sees.

With `remember` the view also keeps what was seen: an object stays seen (its true fields) from its first
sighting in the episode on, as a driver remembers where a marker was. Objects fixed in the world whose slots
are not identities (obstacles, listed nearest first) are remembered by their world place (`static`). The view
then has state, a
`Sightings` per caller (one row per env), which each caller owns, resets at its episodes' starts and feeds
in time order (`TeacherPolicy.new_memory`); a stream without episode signals (a live node) restarts on
the state's own counters.
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
    # fixed in the world, its slot not its identity (nearest first): remembered by its world place
    static: bool = False


class RememberConfig(Config):
    """Objects stay seen from their first sighting in an episode. The objects are slots in a sequence (the
    current marker, the one after it): when `advance` rises, each slot takes the sighting of the slot listed
    after it and the last starts unseen; when `restart` jumps up by more than `restart_jump`, or the
    caller resets a row, every sighting clears (a new episode). A `static` object is not in the sequence:
    its slot is matched to the nearest slot of the state before by world place (the robot's `pose` fields
    turn its robot-frame offset into one), and it stays seen while that slot had been seen."""

    advance: str = "progress"  # a field that rises when the sequence moves on (markers reached / M)
    restart: str = "time_left"  # a field that jumps up only when an episode starts
    restart_jump: float = Field(0.05, gt=0)  # a rise of `restart` this large is a new episode
    pose: tuple[str, str, str, str] = ("x_m", "y_m", "cos_yaw", "sin_yaw")  # world x, y, cos, sin of yaw
    match_m: float = Field(0.05, gt=0)  # a static object within this of a place of the last state is it, m


class ViewConfig(Config):
    """The camera's view of the privileged state, in the robot's field names (`RobotSpec`)."""

    half_fov_deg: float = Field(gt=0, le=180)  # half the camera's horizontal field of view, deg
    keep: list[str] = Field(default_factory=list)  # always seen (the IMU's speed and yaw rate, ...)
    objects: list[ViewObject] = Field(default_factory=list)  # seen while in the field of view
    remember: RememberConfig | None = None  # None: seen only while in view, no state


class Sightings:
    """The state of a remembering view for N rows (envs): which objects each has seen this episode.

    Sequence objects are remembered by slot (`seen`); static ones by the world places of the last state's
    slots (`places`) and whether each had been seen (`placed`).
    A call of the view with `update=False` leaves the memory as it was and keeps what it would have become
    (`pending`); `commit(mask)` then takes it for the rows in `mask`, so a caller that refuses some states
    after seeing them (the OPD buffer: stale, duplicate, non-finite) remembers only what it accepted.
    """

    def __init__(self, num_envs: int, static: np.ndarray) -> None:
        self.static = np.asarray(static, dtype=bool)  # (O,) which objects are static
        num_objects, num_static = len(self.static), int(self.static.sum())
        self.seen = np.zeros((num_envs, num_objects), dtype=bool)  # (N, O); static columns unused
        self.places = np.full((num_envs, num_static, 2), np.nan)  # (N, S, 2) world xy of the static slots
        self.placed = np.zeros((num_envs, num_static), dtype=bool)  # (N, S) each of them seen
        self.advance = np.full(num_envs, np.nan)  # (N,) last value of the advance field; NaN: none yet
        self.restart = np.full(num_envs, np.nan)  # (N,) last value of the restart field
        self.pending: tuple[np.ndarray, ...] | None = None

    def reset(self, envs: np.ndarray | None = None) -> None:
        """A new episode for rows `envs` (a mask or indices; None: all)."""
        rows = slice(None) if envs is None else envs
        self.seen[rows] = self.placed[rows] = False
        self.places[rows] = self.advance[rows] = self.restart[rows] = np.nan

    def step(
        self, rows: np.ndarray, advance: np.ndarray, restart: np.ndarray, in_view: np.ndarray,
        places: np.ndarray, jump: float, match: float, update: bool | np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """Rows' (M, O) sightings after states with `advance`, `restart` (M,), objects in view (M, O) and the
        static objects' world places (M, S, 2)."""
        seen, last_adv, last_rst = self.seen[rows], self.advance[rows], self.restart[rows]
        last_places, last_placed = self.places[rows], self.placed[rows]
        finite = np.isfinite(advance) & np.isfinite(restart)
        new_episode = finite & ~(restart <= last_rst + jump)  # NaN before the first state: a new one too
        moved_on = finite & ~new_episode & (advance > last_adv)
        seq = ~self.static
        shifted = np.zeros_like(seen)  # sequence slot j takes j + 1's
        shifted[:, np.flatnonzero(seq)[:-1]] = seen[:, np.flatnonzero(seq)[1:]]
        seen = np.where(new_episode[:, None], False, np.where(moved_on[:, None], shifted, seen)) | in_view
        # static: each slot is the last state's slot nearest to its world place, if one is within `match`
        gap = np.linalg.norm(places[:, :, None] - last_places[:, None], axis=-1)  # (M, S, S)
        gap = np.where(np.isfinite(gap), gap, np.inf)
        nearest = gap.argmin(axis=2, keepdims=True) if gap.size else np.zeros(gap.shape[:2] + (1,), int)
        known = np.take_along_axis(last_placed, nearest[..., 0], 1) & (
            np.take_along_axis(gap, nearest, 2)[..., 0] <= match
        )  # (M, S)
        placed = (known & ~new_episode[:, None]) | in_view[:, self.static]
        seen[:, self.static] = placed
        # a non-finite state is seen through the memory but moves nothing on
        located = finite & np.isfinite(places).all(axis=(1, 2))
        placed = np.where(located[:, None], placed, last_placed)
        places = np.where(located[:, None, None], places, last_places)
        adv = np.where(finite, advance, last_adv)
        rst = np.where(finite, restart, last_rst)
        self.pending = (np.asarray(rows), seen, places, placed, adv, rst)
        self.commit(np.broadcast_to(np.asarray(update, dtype=bool), (len(seen),)))
        return seen

    def commit(self, mask: np.ndarray) -> None:
        """Take the last `step`'s sightings for the rows where `mask` (M,) holds."""
        if self.pending is None:
            return
        rows, seen, places, placed, adv, rst = self.pending
        mask = np.asarray(mask, dtype=bool)
        at = rows[mask]
        self.seen[at], self.places[at], self.placed[at] = seen[mask], places[mask], placed[mask]
        self.advance[at], self.restart[at] = adv[mask], rst[mask]


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
        self._static = np.array([o.static for o in cfg.objects], dtype=bool)  # (O,)
        # the same per object as arrays, so a call is a few whole-array operations (it runs per decision)
        self._ix = np.array([ix for ix, *_ in self.objects], np.int64)  # (O,)
        self._iy = np.array([iy for _, iy, *_ in self.objects], np.int64)  # (O,)
        self._radius = np.array([r for _, _, r, _ in self.objects], np.float64)  # (O,)
        self._covers = np.zeros((len(self.objects), len(fields)), dtype=bool)  # (O, Dq): fields it shows
        for j, (*_, cols) in enumerate(self.objects):
            self._covers[j, cols] = True
        self.remember = cfg.remember
        if cfg.remember is not None:
            pose = cfg.remember.pose if self._static.any() else ()
            names = [cfg.remember.advance, cfg.remember.restart, *pose]
            if unknown := sorted(set(names) - set(col)):
                raise ValueError(f"teacher view remembers by fields the robot does not have: {unknown}")
            self._advance, self._restart = col[cfg.remember.advance], col[cfg.remember.restart]
            self._pose = [col.get(f, 0) for f in cfg.remember.pose]  # unread without static objects

    def new_memory(self, num_envs: int) -> Sightings | None:
        """A fresh memory for `num_envs` rows; None for a view that remembers nothing."""
        return Sightings(num_envs, self._static) if self.remember is not None else None

    def visible(self, privileged: np.ndarray) -> np.ndarray:
        """(N, Dq) -> (N, O) bool: each object inside the horizontal field of view."""
        x = privileged[:, self._ix].astype(np.float64)  # (N, O)
        y = privileged[:, self._iy].astype(np.float64)  # (N, O)
        dist = np.hypot(x, y)
        # the angle the object's half-width covers; an object the camera sits inside counts as seen
        spread = np.arcsin(np.clip(self._radius / np.maximum(dist, 1e-9), 0.0, 1.0))
        return (dist > 0) & (np.abs(np.arctan2(y, x)) <= self.half_fov + spread)

    def places(self, privileged: np.ndarray) -> np.ndarray:
        """(N, Dq) -> (N, S, 2) the static objects' world xy, from their offsets and the robot's pose."""
        x, y, cos, sin = (privileged[:, [i]].astype(np.float64) for i in self._pose)  # (N, 1) each
        dx = privileged[:, self._ix[self._static]].astype(np.float64)  # (N, S)
        dy = privileged[:, self._iy[self._static]].astype(np.float64)  # (N, S)
        return np.stack([x + cos * dx - sin * dy, y + sin * dx + cos * dy], axis=-1)

    def __call__(
        self, privileged: np.ndarray, memory: Sightings | None = None, envs: np.ndarray | None = None,
        update: bool | np.ndarray = True,
    ) -> np.ndarray:  # fmt: skip
        """privileged (N, Dq) -> what is seen of it. A remembering view needs the caller's `memory`, whose
        rows `envs` (N,) these states are (None: rows 0..N-1), fed in time order; `update` (bool or (N,)):
        which rows' memory moves on (see `Sightings.commit`)."""
        privileged = np.asarray(privileged)
        seen = self.visible(privileged)  # (N, O)
        if self.remember is not None:
            if memory is None:
                raise ValueError(
                    "this teacher view remembers sightings (view.remember): pass the caller's "
                    "memory (TeacherPolicy.new_memory), one row per env, fed in time order"
                )
            rows = np.arange(len(privileged)) if envs is None else np.asarray(envs)
            adv = privileged[:, self._advance].astype(np.float64)  # (N,)
            rst = privileged[:, self._restart].astype(np.float64)  # (N,)
            seen = memory.step(rows, adv, rst, seen, self.places(privileged), self.remember.restart_jump,
                               self.remember.match_m, update)  # fmt: skip
        mask = self.keep | (seen[:, :, None] & self._covers).any(axis=1)  # (N, Dq)
        return np.where(mask, privileged, 0).astype(privileged.dtype)
