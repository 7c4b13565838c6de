"""MuJoCo backend of the default robot: N envs of the DiffBot marker arena on the CPU, camera optional.

Each env has its own MjModel copy (so that dynamics can be randomised per env) and MjData; one offscreen
renderer serves them all. Clocks are integer physics-step counters, so stamps are exact and reproducible.
Sensor values and poses read after `mj_step` were computed from the state before the step, so they are
stamped with the step's start time; the same holds for rendered frames.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")  # headless offscreen rendering; must be set before `import mujoco`
import mujoco  # noqa: E402

from sim.config import SimConfig  # noqa: E402
from sim.marker_task import Layout  # noqa: E402
from sim.robot_interface import DynamicsScales  # noqa: E402
from sim.robots.diffbot import constants as C  # noqa: E402
from sim.robots.diffbot.base_controller import integrate_odometry  # noqa: E402
from sim.room_appearance import (  # noqa: E402
    DISTRACTOR_SLOTS,
    FLOOR_TEXTURES,
    ROOM_WALLS,
    SHADOW_SLOTS,
    Box,
    RoomDraw,
    blob_shadow,
)
from sim.sim_backend import SimBackend  # noqa: E402

log = logging.getLogger(__name__)


def _log_mujoco_warning(message: str) -> None:
    log.warning("MuJoCo: %s", message)


# MuJoCo's own warnings (an unstable state, say) go to this logger rather than to MUJOCO_LOG.TXT in the
# working directory; a handler someone installed first is kept.
if mujoco.get_mju_user_warning() is None:
    mujoco.set_mju_user_warning(_log_mujoco_warning)

SHADOW_MAP_PX = 512  # shadow map size when a room casts shadows, px (the sim renders none)
_OFF_FLAGS = (  # scene features the fast offscreen render leaves out
    mujoco.mjtRndFlag.mjRND_SHADOW,
    mujoco.mjtRndFlag.mjRND_REFLECTION,
    mujoco.mjtRndFlag.mjRND_SKYBOX,
)


class MjcfError(ValueError):
    """The MJCF is invalid or lacks an element the backend needs; the message names the file and element."""


class RenderError(RuntimeError):
    """Offscreen rendering is unavailable (no GL backend)."""


class ModelIndex:
    """Addresses of the elements the backend reads and writes; building it validates the model."""

    def __init__(self, model: mujoco.MjModel, path: Path, cfg: SimConfig) -> None:
        def find(kind: str, name: str) -> int:
            try:
                return int(getattr(model, kind)(name).id)
            except KeyError:
                raise MjcfError(f"{path}: no {kind} named {name!r} (required by {C.__name__})") from None

        def sensor(name: str, dim: int) -> slice:
            sid = find("sensor", name)
            if model.sensor_dim[sid] != dim:
                got = model.sensor_dim[sid]
                raise MjcfError(f"{path}: sensor {name!r} must give {dim} values, gives {got}")
            return slice(int(model.sensor_adr[sid]), int(model.sensor_adr[sid]) + dim)

        def mocap(name: str) -> int:
            mid = int(model.body_mocapid[find("body", name)])
            if mid < 0:
                raise MjcfError(f'{path}: body {name!r} must be mocap="true" (it is placed per episode)')
            return mid

        base = find("joint", C.BASE_JOINT)
        if model.jnt_type[base] != mujoco.mjtJoint.mjJNT_FREE:
            raise MjcfError(f"{path}: joint {C.BASE_JOINT!r} must be a free joint")
        self.base_qpos = int(model.jnt_qposadr[base])
        self.base_qvel = int(model.jnt_dofadr[base])
        self.wheel_dofs = np.array([model.jnt_dofadr[find("joint", j)] for j in C.WHEEL_JOINTS])
        self.wheel_geoms = np.array([find("geom", j) for j in C.WHEEL_JOINTS])
        self.caster_geoms = np.array([find("geom", c) for c in C.CASTER_GEOMS])
        self.actuators = np.array([find("actuator", a) for a in C.WHEEL_ACTUATORS])
        accel, gyro = sensor(C.IMU_ACCEL_SENSOR, 3), sensor(C.IMU_GYRO_SENSOR, 3)
        self.imu_columns = np.r_[accel, gyro]  # sensordata columns in IMU_CHANNELS order
        self.bumper = sensor(C.BUMPER_SENSOR, 1).start
        self.camera = find("camera", C.CAMERA) if cfg.camera.enabled else -1
        self.markers = np.array([mocap(f"marker_{c}") for c in cfg.task.markers], dtype=np.int64)
        self.marker_geoms = np.array([find("geom", f"marker_{c}") for c in cfg.task.markers])
        self.obstacles = np.array([mocap(o) for o in C.OBSTACLES[: cfg.task.num_obstacles]], dtype=np.int64)
        self._room: RoomIndex | None = None
        self._model, self._find = model, find
        self.nominal = {  # the values that dynamics randomisation scales
            "body_mass": model.body_mass.copy(),
            "body_inertia": model.body_inertia.copy(),
            "geom_friction": model.geom_friction.copy(),
            "actuator_gainprm": model.actuator_gainprm.copy(),
            "actuator_biasprm": model.actuator_biasprm.copy(),
            "actuator_forcerange": model.actuator_forcerange.copy(),
            "geom_size": model.geom_size.copy(),
            "geom_pos": model.geom_pos.copy(),
        }

    @property
    def room(self) -> RoomIndex:
        """The room's elements, looked up on first use: an MJCF without them serves everything but a room."""
        if self._room is None:
            self._room = RoomIndex(self._model, self._find)
        return self._room


class RoomIndex:
    """The scene elements a room's appearance changes (arena.xml), and their values as the sim renders."""

    def __init__(self, model: mujoco.MjModel, find: Callable[[str, str], int]) -> None:
        self.light = find("light", "sun")
        self.floor = find("geom", "floor")
        self.walls = np.array([find("geom", w) for w in C.WALL_GEOMS])
        self.obstacles = np.array([find("geom", o) for o in C.OBSTACLES])
        self.markers = {c: np.array([find("geom", f"marker_{c}"), find("geom", f"beacon_{c}")])
                        for c in C.MARKER_COLOURS}  # fmt: skip
        self.distractors = np.array([find("geom", f"distractor_{k}") for k in range(DISTRACTOR_SLOTS)])
        self.distractor_bodies = np.array([model.body_mocapid[find("body", f"distractor_{k}")]
                                           for k in range(DISTRACTOR_SLOTS)])  # fmt: skip
        self.room_walls = np.array([find("geom", w) for w in ROOM_WALLS])
        self.room_wall_bodies = np.array([model.body_mocapid[find("body", w)] for w in ROOM_WALLS])
        self.shadows = np.array([find("geom", f"shadow_{k}") for k in range(SHADOW_SLOTS)])
        self.shadow_bodies = np.array(
            [model.body_mocapid[find("body", f"shadow_{k}")] for k in range(SHADOW_SLOTS)]
        )
        self.floor_materials = {t: find("material", "floor" if t == "checker" else f"room_floor_{t}")
                                for t in FLOOR_TEXTURES}  # fmt: skip
        self.visual = {  # what a room changes on the shared render model, to restore for an env without one
            "geom_rgba": model.geom_rgba.copy(), "geom_size": model.geom_size.copy(),
            "geom_matid": model.geom_matid.copy(), "mat_rgba": model.mat_rgba.copy(),
            "light_diffuse": model.light_diffuse.copy(), "light_ambient": model.light_ambient.copy(),
            "light_castshadow": model.light_castshadow.copy(),
        }  # fmt: skip
        self.light_dir = model.light_dir[self.light].copy()


def load_model(cfg: SimConfig) -> tuple[mujoco.MjModel, ModelIndex]:
    """Load and validate the scene MJCF; apply the physics rate and the task's marker radius."""
    path = Path(cfg.mujoco.mjcf)
    if not path.is_file():
        raise MjcfError(f"mujoco.mjcf: file not found: {path}")
    try:
        model = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as err:  # MuJoCo's message names the element, the attribute and the line
        raise MjcfError(f"{path}: {err}") from None
    index = ModelIndex(model, path, cfg)
    model.opt.timestep = 1.0 / cfg.rates.physics_hz
    model.geom_size[index.marker_geoms, 0] = cfg.task.reach_radius_m  # the disc shows the reach zone
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, cfg.camera.width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, cfg.camera.height)
    return model, index


class MujocoBackend(SimBackend):
    """N DiffBot envs in MuJoCo on the CPU."""

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        self._model, self._ix = load_model(cfg)
        self._models: list[mujoco.MjModel] = []
        self._data: list[mujoco.MjData] = []
        self._layouts: list[Layout | None] = [None] * cfg.num_envs
        # last finite (qpos, qvel) of each env, restored when the state turns non-finite
        self._good: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0), np.empty(0))] * cfg.num_envs
        self._renderer: mujoco.Renderer | None = None
        self._scales: DynamicsScales | None = None
        self._next_rooms: list[RoomDraw | None] = [None] * cfg.num_envs  # from each env's next reset on
        self._rooms: list[RoomDraw | None] = [None] * cfg.num_envs
        self._shadows = False  # the renderer has a shadow map
        self._dressed = False  # a room was ever set: from then on each render and episode sets its look
        self._blobs: list[list[tuple[Box, float]]] = [[] for _ in range(cfg.num_envs)]  # per env's room

    @property
    def connected(self) -> bool:
        return bool(self._data)

    def data(self, env: int) -> mujoco.MjData:
        """The MjData of one env, for viewers and fault-injection tests."""
        return self._data[env]

    def dressed_model(self, env: int) -> mujoco.MjModel:
        """The shared render model in env's look (its room's colours, sizes and light, or the sim's), for a
        second renderer of env's MjData (`sim.third_person`); it holds until another env is rendered."""
        self._dress(env)
        return self._model

    def connect(self) -> None:
        if self.connected:
            return
        self._models = [copy.copy(self._model) for _ in range(self.cfg.num_envs)]
        self._data = [mujoco.MjData(m) for m in self._models]
        if self.cfg.camera.enabled:
            self._renderer = self._make_renderer()

    def _make_renderer(self) -> mujoco.Renderer:
        renderer = make_renderer(self._model, self.cfg.camera.height, self.cfg.camera.width)
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self._shadows
        return renderer

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self._models, self._data = [], []

    def set_dynamics(self, scales: DynamicsScales) -> None:
        for name in ("mass", "friction", "motor"):
            value = np.asarray(getattr(scales, name))
            if value.shape != (self.cfg.num_envs,) or not np.all(np.isfinite(value) & (value > 0)):
                raise ValueError(f"scales.{name} must hold {self.cfg.num_envs} positive values, got {value}")
        self._scales = scales

    def set_appearance(self, rooms: Sequence[RoomDraw | None]) -> None:
        if len(rooms) != self.cfg.num_envs:
            raise ValueError(f"set_appearance: {len(rooms)} rooms for {self.cfg.num_envs} envs")
        self._next_rooms = list(rooms)
        if any(r is not None for r in rooms):
            self._ix.room  # noqa: B018  # an MJCF without the room's elements fails here, naming the first
            self._dressed = True
        if any(r is not None and r.shadows == "mapped" for r in rooms) and not self._shadows:
            self._shadows = True
            self._model.vis.quality.shadowsize = SHADOW_MAP_PX  # sized when the GL context is made
            if self._renderer is not None:
                self._renderer.close()
                self._renderer = self._make_renderer()

    def _start_episodes(self, envs: np.ndarray, layouts: list[Layout]) -> None:
        hyper = self.cfg.rates.hyperperiod
        for i, layout in zip(envs, layouts, strict=True):
            self._layouts[i] = layout
            self._rooms[i] = self._next_rooms[i]
            self._apply_dynamics(i)
            self._mount_camera(i)
            m, d = self._models[i], self._data[i]
            mujoco.mj_resetData(m, d)
            x, y, yaw = layout.start
            q = self._ix.base_qpos
            d.qpos[q : q + 7] = [x, y, C.BASE_HEIGHT_M, math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
            self._place(i)
            mujoco.mj_forward(m, d)
            self._good[i] = (d.qpos.copy(), d.qvel.copy())
            # Start on a hyperperiod boundary: sensor phases, hence observations, depend on the seed only.
            self._tick[i] = -(-self._tick[i] // hyper) * hyper
            self._advance(i, np.zeros((self._settle, m.nu)))
            self._odom[i] = 0.0

    def _simulate(self, active: np.ndarray, wheels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ctrl = np.zeros((*wheels.shape[:2], self._model.nu))  # (N, S, nu)
        ctrl[..., self._ix.actuators] = wheels
        bumped = np.zeros(self.cfg.num_envs, dtype=bool)
        nan = np.zeros(self.cfg.num_envs, dtype=bool)
        for i in np.flatnonzero(active):
            bumped[i], nan[i] = self._advance(i, ctrl[i])
        return bumped, nan

    def _advance(self, i: int, ctrl: np.ndarray) -> tuple[bool, bool]:
        """Simulate env i for S physics steps with actuator controls (S, nu).

        Records the IMU, camera frames, odometry and true state of the ticks (t0, t0 + S], so that the
        observation at t0 + S holds everything measured up to and including its own time. Returns (bumped,
        nan); on a non-finite state the env is restored to its state at t0 and the period's samples dropped.
        """
        m, d, ix = self._models[i], self._data[i], self._ix
        s, t0 = len(ctrl), int(self._tick[i])
        end_time = d.time + s * m.opt.timestep  # MuJoCo rewinds d.time when it resets a bad state itself
        sensors, qvels = np.empty((s, m.nsensordata)), np.empty((s, m.nv))  # row j: tick t0 + 1 + j
        captures = self._capture_ticks(t0 + 1, s) if self._renderer else ()
        d_ctrl, d_sensors, d_qvel = d.ctrl, d.sensordata, d.qvel  # views stay valid across steps
        for k in range(s):
            d_ctrl[:] = ctrl[k]
            mujoco.mj_step(m, d)  # sensors and poses now describe tick t0 + k; qpos/qvel tick t0 + k + 1
            qvels[k] = d_qvel
            if k:  # tick t0 itself was measured at the end of the previous period
                sensors[k - 1] = d_sensors
                if k - 1 in captures:
                    self._render(i, t0 + k)
        mujoco.mj_forward(m, d)  # measure tick t0 + s, the state this period ends in
        sensors[s - 1] = d_sensors
        if s - 1 in captures:
            self._render(i, t0 + s)
        self._tick[i] = t0 + s
        # A sum is non-finite iff some term is (or the state has blown up past the float range).
        finite = np.isfinite(sensors.sum() + qvels.sum() + d.qpos.sum())
        if not finite or abs(d.time - end_time) > 0.5 * m.opt.timestep:
            log.warning("env %d: non-finite state at t=%.3f s; the episode fails (nan)", i, t0 * self._dt)
            mujoco.mj_resetData(m, d)  # then restore the last finite state
            d.qpos[:], d.qvel[:] = self._good[i]
            self._place(i)
            mujoco.mj_forward(m, d)
            self._read_state(i)
            return False, True
        first = (-(t0 + 1)) % self._imu_every  # row of the period's first IMU tick
        ticks = np.arange(t0 + 1 + first, t0 + 1 + s, self._imu_every)
        imu = sensors[None, first :: self._imu_every][..., ix.imu_columns]  # (1, S_imu, 6)
        self._imu.extend(np.array([i]), ticks * self._dt, imu)
        encoders = qvels[None, :, ix.wheel_dofs]  # (1, S, 2) wheel speeds, rad/s
        self._odom[i : i + 1] = integrate_odometry(self._odom[i : i + 1], encoders, self._dt)
        self._good[i] = (d.qpos.copy(), d.qvel.copy())
        self._read_state(i)
        return bool(sensors[:, ix.bumper].max() > 0.0), False

    def _render(self, i: int, tick: int) -> None:
        """Render env i's camera from its current poses, which describe `tick`."""
        self._dress(i)
        self._renderer.update_scene(self._data[i], camera=self._ix.camera)
        self._renderer.render(out=self._frames[i])
        self._frame_stamp[i] = tick * self._dt

    def _read_state(self, i: int) -> None:
        """Cache env i's true x, y, yaw, forward speed, yaw rate and wheel speeds from its MjData."""
        d, ix = self._data[i], self._ix
        x, y, _, qw, qx, qy, qz = d.qpos[ix.base_qpos : ix.base_qpos + 7]
        yaw = math.atan2(2 * (qw * qz + qx * qy), 1 - 2 * (qy * qy + qz * qz))
        vx, vy, _, _, _, wz = d.qvel[ix.base_qvel : ix.base_qvel + 6]  # world linear, local angular velocity
        self._kin[i] = (x, y, yaw, math.cos(yaw) * vx + math.sin(yaw) * vy, wz)
        self._wheels[i] = d.qvel[ix.wheel_dofs]

    def _place(self, i: int) -> None:
        """Put env i's markers and obstacles where its layout says; park the unused ones under the floor."""
        d, layout = self._data[i], self._layouts[i]
        d.mocap_pos[:] = [0.0, 0.0, C.PARKED_Z_M]
        d.mocap_pos[self._ix.markers, :2] = layout.markers
        d.mocap_pos[self._ix.markers, 2] = 0.001  # disc on the floor
        d.mocap_pos[self._ix.obstacles, :2] = layout.obstacles
        d.mocap_pos[self._ix.obstacles, 2] = C.OBSTACLE_RADIUS_M  # half height = radius in arena.xml
        room = self._rooms[i]
        if room is not None:
            rx = self._ix.room
            self._blobs[i] = []
            if room.shadows == "blob":
                casters = [(xy, C.OBSTACLE_RADIUS_M, 2 * C.OBSTACLE_RADIUS_M) for xy in layout.obstacles]
                casters += [(xy, C.BEACON_RADIUS_M, C.BEACON_HEIGHT_M) for xy in layout.markers]
                self._blobs[i] = [blob_shadow(xy, r, h, room) for xy, r, h in casters[:SHADOW_SLOTS]]
            blobs = [box for box, _ in self._blobs[i]]
            placed = ((rx.distractor_bodies, room.distractors), (rx.room_wall_bodies, room.room_walls),
                      (rx.shadow_bodies, blobs))  # fmt: skip
            for bodies, boxes in placed:
                for body, box in zip(bodies, boxes, strict=False):
                    d.mocap_pos[body] = box.pos
                    d.mocap_quat[body] = [math.cos(box.yaw / 2), 0.0, 0.0, math.sin(box.yaw / 2)]

    def _apply_dynamics(self, i: int) -> None:
        """Scale env i's model from the nominal values (no change when no scales were set)."""
        if self._scales is None:
            return
        m, nom, ix = self._models[i], self._ix.nominal, self._ix
        mass, friction, motor = (float(getattr(self._scales, k)[i]) for k in ("mass", "friction", "motor"))
        m.body_mass[:] = nom["body_mass"] * mass
        m.body_inertia[:] = nom["body_inertia"] * mass
        m.geom_friction[ix.wheel_geoms, 0] = nom["geom_friction"][ix.wheel_geoms, 0] * friction
        m.actuator_gainprm[ix.actuators, 0] = nom["actuator_gainprm"][ix.actuators, 0] * motor  # kv
        m.actuator_biasprm[ix.actuators, 2] = nom["actuator_biasprm"][ix.actuators, 2] * motor  # -kv
        m.actuator_forcerange[ix.actuators] = nom["actuator_forcerange"][ix.actuators] * motor
        radius = 1.0 if self._scales.wheel_radius is None else self._scales.wheel_radius[i]  # (2,) or 1
        m.geom_size[ix.wheel_geoms, 0] = nom["geom_size"][ix.wheel_geoms, 0] * radius
        # The casters follow the wheels' mean radius, so the base still rests level on all four: with smaller
        # wheels and fixed casters it sat on the casters, its wheels 1 mm off the floor, and could not drive.
        change = np.mean(m.geom_size[ix.wheel_geoms, 0] - nom["geom_size"][ix.wheel_geoms, 0])
        m.geom_pos[ix.caster_geoms, 2] = nom["geom_pos"][ix.caster_geoms, 2] - change

    def _mount_camera(self, i: int) -> None:
        """Env i's camera pose and light direction: the drawing's, or its room's (both are kinematics, so
        they live in the env's own model, which its MjData is computed from)."""
        if not self._dressed:
            return
        m, ix, room = self._models[i], self._ix, self._rooms[i]
        cam, light = ix.camera, ix.room.light
        m.light_dir[light] = ix.room.light_dir if room is None else room.light_dir
        if cam < 0:
            return
        m.cam_pos[cam] = self._model.cam_pos[cam] + (0.0 if room is None else room.camera_offset_m)
        quat = self._model.cam_quat[cam].copy()
        if room is not None:
            turn = np.empty(4)
            mujoco.mju_euler2Quat(turn, room.camera_rpy_rad, "xyz")  # about the camera's own axes
            mujoco.mju_mulQuat(quat, self._model.cam_quat[cam], turn)
        m.cam_quat[cam] = quat

    def _dress(self, i: int) -> None:
        """Give the shared render model env i's room (colours, sizes, materials, light), or the sim's look."""
        if not self._dressed:
            return
        m, rx, room = self._model, self._ix.room, self._rooms[i]
        for name, value in rx.visual.items():
            getattr(m, name)[:] = value
        if room is None:
            return
        m.light_diffuse[rx.light] = room.light_diffuse
        m.light_ambient[rx.light] = room.light_ambient
        m.light_castshadow[rx.light] = room.shadows == "mapped"
        if room.floor is not None:
            mat = rx.floor_materials[room.floor.texture]
            m.geom_matid[rx.floor] = mat
            m.mat_rgba[mat, :3] = room.floor.rgb
        if room.wall_rgb is not None:
            m.geom_rgba[rx.walls, :3] = room.wall_rgb
        if room.obstacle_rgb is not None:
            m.geom_rgba[rx.obstacles, :3] = room.obstacle_rgb
        for colour, rgb in room.marker_rgb.items():
            m.geom_rgba[rx.markers[colour], :3] = rgb
        for geoms, boxes in ((rx.distractors, room.distractors), (rx.room_walls, room.room_walls)):
            for geom, box in zip(geoms, boxes, strict=False):
                _size_box(m, geom, box)
        for geom, (box, opacity) in zip(rx.shadows, self._blobs[i], strict=False):
            _size_box(m, geom, box)
            m.geom_rgba[geom, 3] = opacity


def _size_box(m: mujoco.MjModel, geom: int, box: Box) -> None:
    m.geom_size[geom] = box.half
    m.geom_rgba[geom] = [*box.rgb, 1.0]


def _load_triton_first() -> None:
    """Import triton (PyTorch's compiler, when installed) before the first GL context exists.

    Without a GPU, EGL renders with Mesa's llvmpipe, which loads its own LLVM; importing triton (which brings
    another) after that context exists crashes the process (seen with torch 2.14 and triton 3), the other
    order works. Any process that renders may import torchvision later (a torch backend, an export, OPD),
    and torchvision imports triton.
    """
    if importlib.util.find_spec("triton") is not None:
        importlib.import_module("triton")


def make_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """Offscreen renderer with the fast settings (no shadows, reflections or skybox: ~1.5 ms at 128x128)."""
    _load_triton_first()
    try:
        renderer = mujoco.Renderer(model, height, width)
    except Exception as err:  # MuJoCo raises several types for a missing GL stack
        raise RenderError(
            f"MuJoCo rendering is unavailable with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}: {err}. "
            "Install EGL (apt-get install libegl1) or OSMesa (libosmesa6, MUJOCO_GL=osmesa), or turn the "
            "camera off (camera.enabled: false)"
        ) from err
    for flag in _OFF_FLAGS:
        renderer.scene.flags[flag] = False
    return renderer
