"""Isaac Sim backend of the default robot: N DiffBot envs cloned on the GPU (PhysX), camera optional.

Needs the `isaacsim` package (Isaac Sim 4.5 or 5.x: `pip install --extra-index-url https://pypi.nvidia.com
'.[isaacsim]'`) and an NVIDIA GPU. Python: Isaac Sim 4.5 wheels are built for Python 3.10 only, 5.x for 3.11
(the project's); with 4.5 make a 3.10 environment for the sim host. Nothing of Isaac Sim is imported until
`connect`, which starts a headless SimulationApp; constructing the backend only checks the package is there.

Same robot, task, rates, skills and observation as the MuJoCo backend; the differences are deliberate:
- the robot is authored with USD physics schemas from sim/robots/diffbot/constants.py (no importer, so it
  does not depend on the importer's version);
- all envs share one physics clock and step together. A reset of every env settles them at rest like
  MuJoCo; a partial reset places its envs at rest without stepping the others, so their IMU window starts
  with the one at-rest sample (repeated, see `StampedRing.latest`);
- the IMU is computed from the base body's velocity each physics step (finite-differenced acceleration
  minus gravity, rotated into the body frame), which is what an accelerometer and a gyro measure;
- the bumper is the geometric overlap of the chassis disc with an obstacle or a wall each physics step;
- dynamics randomisation scales masses, motors and friction; friction through PhysX's per-shape material
  properties of the robot (the tyres' friction; the casters' is 0 and stays 0), as Isaac Lab randomises it;
- the camera's vertical field of view is the MJCF's (`constants.CAMERA_FOVY_DEG`), from its apertures;
- GPU physics is not bit-reproducible and the shared clock is not aligned per episode, so seeded runs
  repeat the layouts exactly and the trajectories only closely.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from typing import Any

import numpy as np

from sim.backends import BackendUnavailable
from sim.config import SimConfig
from sim.marker_task import Layout
from sim.robot_interface import DynamicsScales
from sim.robots.diffbot import constants as C
from sim.robots.diffbot.base_controller import integrate_odometry
from sim.sim_backend import SimBackend

log = logging.getLogger(__name__)

ENVS_ROOT = "/World/envs"
_GRAVITY_MPS2 = 9.81
_CAMERA_PITCH_RAD = math.radians(14.0)  # matches the MJCF camera's downward pitch
_KV = 0.6  # wheel velocity gain, N m s/rad (robot.xml)
_MAX_TORQUE_NM = 0.15  # wheel torque limit (robot.xml)
_MASSES_KG = {"chassis": 2.04, "wheel": 0.15}  # robot.xml: chassis + casters, each wheel


FOCAL_LENGTH = 1.0  # pinhole focal length; only its ratio to the apertures matters (same units)


def pinhole_apertures(
    fovy_deg: float, width: int, height: int, focal: float = FOCAL_LENGTH
) -> tuple[float, float]:
    """(horizontal, vertical) apertures giving a vertical field of view `fovy_deg` with square pixels.

    MuJoCo's `fovy` is vertical; a USD camera's field of view is 2 atan(aperture / (2 focal)).
    """
    vertical = 2.0 * focal * math.tan(math.radians(fovy_deg) / 2.0)
    return vertical * width / height, vertical


def scaled_friction(nominal: Any, scale: Any) -> Any:
    """Static and dynamic friction (E, shapes, 2) of E envs times their scale (E,); numpy or torch."""
    return nominal * scale[:, None, None]


def require_isaacsim() -> None:
    """Fail at once, naming what is missing, when Isaac Sim cannot run here."""
    if importlib.util.find_spec("isaacsim") is None:
        raise BackendUnavailable(
            "backend 'isaacsim' needs the `isaacsim` Python package (Isaac Sim >= 4.5) and an NVIDIA GPU, "
            "but `isaacsim` is not installed. Install it with: "
            "pip install --extra-index-url https://pypi.nvidia.com '.[isaacsim]'"
        )


class IsaacSimBackend(SimBackend):
    """N DiffBot envs in Isaac Sim, stepped together on the GPU."""

    def __init__(self, cfg: SimConfig) -> None:
        require_isaacsim()
        super().__init__(cfg)
        self._app: Any = None
        self._world: Any = None
        self._torch: Any = None
        self._views: dict[str, Any] = {}
        self._cameras: list[Any] = []
        self._scales: DynamicsScales | None = None
        self._world_tick = 0  # physics steps since connect, shared by every env
        self._wheel_dofs: Any = None  # torch index tensor of the wheel joints
        self._nominal_masses: Any = None  # (N, bodies) torch tensor
        self._origins = np.zeros((cfg.num_envs, 3))  # env origins in the world, m
        self._prev_lin = np.zeros((cfg.num_envs, 3))  # base linear velocity at the previous step, world frame

    @property
    def connected(self) -> bool:
        return self._world is not None

    def connect(self) -> None:
        if self.connected:
            return
        from isaacsim import SimulationApp  # must start before any other isaacsim module is imported

        self._app = SimulationApp({"headless": self.cfg.isaacsim.headless})
        import torch
        from isaacsim.core.api import World
        from isaacsim.core.cloner import GridCloner
        from isaacsim.core.prims import Articulation, RigidPrim, XFormPrim

        self._torch = torch
        dt = 1.0 / self.cfg.rates.physics_hz
        world = World(physics_dt=dt, rendering_dt=dt, stage_units_in_meters=1.0, backend="torch",
                      device=self.cfg.isaacsim.device)  # fmt: skip
        world.scene.add_default_ground_plane(static_friction=1.0, dynamic_friction=1.0, restitution=0.0)
        _build_env(world.stage, f"{ENVS_ROOT}/env_0", self.cfg)
        cloner = GridCloner(spacing=self.cfg.isaacsim.env_spacing_m)
        cloner.define_base_env(ENVS_ROOT)
        paths = cloner.generate_paths(f"{ENVS_ROOT}/env", self.cfg.num_envs)
        cloner.clone(source_prim_path=f"{ENVS_ROOT}/env_0", prim_paths=paths)
        envs = f"{ENVS_ROOT}/env_.*"
        views = {"robot": Articulation(f"{envs}/diffbot", name="diffbot")}
        markers = [f"marker_{c}" for c in self.cfg.task.markers]
        views |= {m: XFormPrim(f"{envs}/{m}", name=m) for m in markers}
        views |= {o: RigidPrim(f"{envs}/{o}", name=o) for o in C.OBSTACLES[: self.cfg.task.num_obstacles]}
        for view in views.values():
            world.scene.add(view)
        if self.cfg.camera.enabled:
            self._cameras = [_make_camera(i, self.cfg) for i in range(self.cfg.num_envs)]
        world.reset()
        for camera in self._cameras:
            camera.initialize()
        robot = views["robot"]
        dofs = [robot.get_dof_index(j) for j in C.WHEEL_JOINTS]
        self._wheel_dofs = torch.tensor(dofs, device=self.cfg.isaacsim.device)
        ones = torch.ones((self.cfg.num_envs, 2), device=self.cfg.isaacsim.device)
        robot.set_gains(kds=_KV * ones, joint_indices=self._wheel_dofs)
        robot.set_max_efforts(_MAX_TORQUE_NM * ones, joint_indices=self._wheel_dofs)
        self._nominal_masses = robot.get_body_masses().clone()
        # (N, shapes, 3) static friction, dynamic friction, restitution; PhysX keeps them on the CPU
        self._nominal_materials = robot._physics_view.get_material_properties().clone()
        self._origins = XFormPrim(envs, name="env_origins").get_world_poses()[0].cpu().numpy()  # (N, 3)
        self._views, self._world = views, world

    def close(self) -> None:
        if self._world is not None:
            self._world.stop()
            self._world.clear_instance()
            self._world = None
        if self._app is not None:
            self._app.close()
            self._app = None

    def set_dynamics(self, scales: DynamicsScales) -> None:
        if scales.wheel_radius is not None:
            raise NotImplementedError(
                "IsaacSimBackend cannot change its wheel radii (the gap proxy's "
                "dynamics.wheel_radius_*); use the MuJoCo backend or leave them at 1"
            )
        self._scales = scales

    def _start_episodes(self, envs: np.ndarray, layouts: list[Layout]) -> None:
        torch, device = self._torch, self.cfg.isaacsim.device
        idx = torch.as_tensor(envs, device=device)
        start = np.array([lay.start for lay in layouts])  # (E, 3)
        pos = self._origins[envs] + np.c_[start[:, :2], np.full(len(envs), C.BASE_HEIGHT_M)]
        quat = np.c_[np.cos(start[:, 2] / 2), np.zeros((len(envs), 2)), np.sin(start[:, 2] / 2)]  # wxyz
        robot = self._views["robot"]
        tensor = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float32, device=device)  # noqa: E731
        robot.set_world_poses(positions=tensor(pos), orientations=tensor(quat), indices=idx)
        robot.set_velocities(tensor(np.zeros((len(envs), 6))), indices=idx)
        zeros = tensor(np.zeros((len(envs), 2)))
        robot.set_joint_positions(zeros, indices=idx, joint_indices=self._wheel_dofs)
        robot.set_joint_velocities(zeros, indices=idx, joint_indices=self._wheel_dofs)
        robot.set_joint_velocity_targets(zeros, indices=idx, joint_indices=self._wheel_dofs)
        for k, colour in enumerate(self.cfg.task.markers):
            xyz = self._origins[envs] + np.c_[[lay.markers[k] for lay in layouts], np.full(len(envs), 0.001)]
            self._views[f"marker_{colour}"].set_world_poses(positions=tensor(xyz), indices=idx)
        for k, name in enumerate(C.OBSTACLES[: self.cfg.task.num_obstacles]):
            xy = np.array([lay.obstacles[k] for lay in layouts])
            xyz = self._origins[envs] + np.c_[xy, np.full(len(envs), C.OBSTACLE_RADIUS_M)]
            self._views[name].set_world_poses(positions=tensor(xyz), indices=idx)
        if self._scales is not None:
            mass = tensor(self._scales.mass[envs])[:, None]
            robot.set_body_masses(self._nominal_masses[idx] * mass, indices=idx)
            robot.set_gains(kds=_KV * tensor(np.repeat(self._scales.motor[envs, None], 2, 1)), indices=idx,
                            joint_indices=self._wheel_dofs)  # fmt: skip
            robot.set_max_efforts(_MAX_TORQUE_NM * tensor(np.repeat(self._scales.motor[envs, None], 2, 1)),
                                  indices=idx, joint_indices=self._wheel_dofs)  # fmt: skip
            cpu = torch.as_tensor(envs)
            materials = self._nominal_materials.clone()
            scale = torch.as_tensor(self._scales.friction[envs], dtype=materials.dtype)
            materials[cpu, :, :2] = scaled_friction(materials[cpu, :, :2], scale)
            robot._physics_view.set_material_properties(materials, cpu)
        self._prev_lin[envs] = 0.0
        self._tick[envs] = self._world_tick
        if len(envs) == self.cfg.num_envs:  # nobody else is running: settle everyone physically
            n = self.cfg.num_envs
            self._simulate(np.ones(n, dtype=bool), np.zeros((n, self._settle, 2)))
        else:
            sample, state = self._measure()
            self._imu.extend(envs, np.full(1, self._world_tick * self._dt), sample[envs, None])
            self._store_state(envs, state)

    def _simulate(self, active: np.ndarray, wheels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Step all envs S times, recording the `active` ones. Shapes: active (N,), wheels (N, S, 2)."""
        torch, device = self._torch, self.cfg.isaacsim.device
        n, s = wheels.shape[:2]
        targets = np.where(active[:, None, None], wheels, 0.0)  # ended episodes hold still
        t0 = self._world_tick
        captures = self._capture_ticks(t0 + 1, s) if self._cameras else ()
        imu, encoders = np.empty((n, s, 6)), np.empty((n, s, 2))
        bumped = np.zeros(n, dtype=bool)
        robot = self._views["robot"]
        for k in range(s):
            target = torch.as_tensor(targets[:, k], dtype=torch.float32, device=device)
            robot.set_joint_velocity_targets(target, joint_indices=self._wheel_dofs)
            self._world.step(render=False)
            imu[:, k], state = self._measure()
            encoders[:, k] = state[:, 13:15]
            bumped |= self._bumper(state)
            if k in captures:  # sensors here describe the state after the step: stamp t0 + k + 1
                self._world.render()
                for i in np.flatnonzero(active):
                    self._frames[i] = self._cameras[i].get_rgba()[..., :3]
                    self._frame_stamp[i] = (t0 + k + 1) * self._dt
        self._world_tick = t0 + s
        nan = active & ~np.isfinite(state).all(axis=1)
        ok = np.flatnonzero(active & ~nan)
        stamps = (t0 + 1 + np.arange(s))[(t0 + 1 + np.arange(s)) % self._imu_every == 0]
        self._imu.extend(ok, stamps * self._dt, imu[ok][:, (stamps - t0 - 1)])
        self._odom[ok] = integrate_odometry(self._odom[ok], encoders[ok], self._dt)
        self._tick[active] = self._world_tick
        self._store_state(ok, state)
        for i in np.flatnonzero(nan):
            log.warning("env %d: non-finite state at t=%.3f s; the episode fails (nan)", i, t0 * self._dt)
        if nan.any():
            self._freeze(np.flatnonzero(nan))
        return bumped & active, nan

    def _measure(self) -> tuple[np.ndarray, np.ndarray]:
        """IMU (N, 6) and state (N, 15): pos, quat wxyz, world linear and angular velocity, wheels."""
        torch = self._torch
        robot = self._views["robot"]
        pos, quat = robot.get_world_poses()
        vel = robot.get_velocities()
        wheels = robot.get_joint_velocities(joint_indices=self._wheel_dofs)
        state = torch.cat([pos, quat, vel, wheels], dim=1).double().cpu().numpy()  # one device sync
        pos, quat, lin, ang = state[:, :3], state[:, 3:7], state[:, 7:10], state[:, 10:13]
        specific = (lin - self._prev_lin) / self._dt + [0.0, 0.0, _GRAVITY_MPS2]  # accelerometer: a - g
        self._prev_lin = lin.copy()
        return np.c_[_rotate_inverse(quat, specific), _rotate_inverse(quat, ang)], state

    def _bumper(self, state: np.ndarray) -> np.ndarray:
        """(N,) bool: the chassis disc overlaps an obstacle or a wall (positions relative to env origins)."""
        xy = state[:, :2] - self._origins[:, :2]
        centres = np.hypot(*(self.task.obstacles - xy[:, None]).transpose(2, 0, 1))  # (N, O)
        gaps = centres - (C.OBSTACLE_RADIUS_M + C.ROBOT_RADIUS_M)
        wall = C.ARENA_HALF_SIZE_M - np.abs(xy).max(axis=1) - C.ROBOT_RADIUS_M
        return (gaps.min(axis=1, initial=np.inf) <= 0.0) | (wall <= 0.0)

    def _store_state(self, envs: np.ndarray, state: np.ndarray) -> None:
        """Cache true x, y, yaw, forward speed, yaw rate and wheel speeds of `envs` from a state (N, 15)."""
        s = state[envs]
        w, x, y, z = s[:, 3], s[:, 4], s[:, 5], s[:, 6]
        yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
        forward = np.cos(yaw) * s[:, 7] + np.sin(yaw) * s[:, 8]
        self._kin[envs] = np.c_[s[:, :2] - self._origins[envs, :2], yaw, forward, s[:, 12]]
        self._wheels[envs] = s[:, 13:15]

    def _freeze(self, envs: np.ndarray) -> None:
        """Put envs whose state became non-finite back at their last finite pose, at rest."""
        torch, device = self._torch, self.cfg.isaacsim.device
        k = self._kin[envs]
        pos = self._origins[envs] + np.c_[k[:, :2], np.full(len(envs), C.BASE_HEIGHT_M)]
        quat = np.c_[np.cos(k[:, 2] / 2), np.zeros((len(envs), 2)), np.sin(k[:, 2] / 2)]
        tensor = lambda a: torch.as_tensor(a, dtype=torch.float32, device=device)  # noqa: E731
        idx = torch.as_tensor(envs, device=device)
        self._views["robot"].set_world_poses(positions=tensor(pos), orientations=tensor(quat), indices=idx)
        self._views["robot"].set_velocities(tensor(np.zeros((len(envs), 6))), indices=idx)


def _rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate world vectors v (N, 3) into the frames of unit quaternions q (N, 4) wxyz."""
    w, u = q[:, :1], q[:, 1:]
    t = 2.0 * np.cross(u, v)
    return v - w * t + np.cross(u, t)


def _build_env(stage: Any, root: str, cfg: SimConfig) -> None:
    """Author env_0 in USD: walls, floor markers, obstacles and the robot articulation."""
    from pxr import Gf, PhysxSchema, UsdGeom, UsdPhysics, UsdShade

    def geom(kind: Any, path: str, pos: tuple[float, float, float], rgb: tuple[float, float, float]) -> Any:
        g = kind.Define(stage, path)
        g.AddTranslateOp().Set(Gf.Vec3d(*pos))
        g.CreateDisplayColorAttr([Gf.Vec3f(*rgb)])
        return g

    UsdGeom.Xform.Define(stage, root)
    half = C.ARENA_HALF_SIZE_M
    walls = {  # name: centre x, y and size x, y, m (arena.xml)
        "wall_north": (0, half + 0.05, 2 * half + 0.2, 0.1),
        "wall_south": (0, -half - 0.05, 2 * half + 0.2, 0.1),
        "wall_east": (half + 0.05, 0, 0.1, 2 * half),
        "wall_west": (-half - 0.05, 0, 0.1, 2 * half),
    }
    for name, (x, y, sx, sy) in walls.items():
        wall = geom(UsdGeom.Cube, f"{root}/{name}", (x, y, 0.15), (0.3, 0.3, 0.35))
        wall.CreateSizeAttr(1.0)
        wall.AddScaleOp().Set(Gf.Vec3f(sx, sy, 0.3))
        UsdPhysics.CollisionAPI.Apply(wall.GetPrim())
    for colour in cfg.task.markers:  # visual only: no collision API
        disc = geom(UsdGeom.Cylinder, f"{root}/marker_{colour}", (0, 0, C.PARKED_Z_M), C.MARKER_RGB[colour])
        disc.CreateRadiusAttr(cfg.task.reach_radius_m)
        disc.CreateHeightAttr(0.002)
        beacon = geom(UsdGeom.Cylinder, f"{root}/marker_{colour}/beacon", (0, 0, C.BEACON_HEIGHT_M / 2),
                      C.MARKER_RGB[colour])  # fmt: skip
        beacon.CreateRadiusAttr(C.BEACON_RADIUS_M)
        beacon.CreateHeightAttr(C.BEACON_HEIGHT_M)
    for name in C.OBSTACLES[: cfg.task.num_obstacles]:
        post = geom(UsdGeom.Cylinder, f"{root}/{name}", (0, 0, C.PARKED_Z_M), (0.95, 0.95, 0.95))
        post.CreateRadiusAttr(C.OBSTACLE_RADIUS_M)
        post.CreateHeightAttr(2 * C.OBSTACLE_RADIUS_M)
        UsdPhysics.CollisionAPI.Apply(post.GetPrim())
        UsdPhysics.RigidBodyAPI.Apply(post.GetPrim()).CreateKinematicEnabledAttr(True)

    robot = f"{root}/diffbot"
    UsdPhysics.ArticulationRootAPI.Apply(UsdGeom.Xform.Define(stage, robot).GetPrim())
    base = UsdGeom.Xform.Define(stage, f"{robot}/base")
    base.AddTranslateOp().Set(Gf.Vec3d(0, 0, C.BASE_HEIGHT_M))
    UsdPhysics.RigidBodyAPI.Apply(base.GetPrim())
    UsdPhysics.MassAPI.Apply(base.GetPrim()).CreateMassAttr(_MASSES_KG["chassis"])
    chassis = geom(UsdGeom.Cylinder, f"{robot}/base/chassis", (0, 0, 0.04), (0.85, 0.55, 0.1))
    chassis.CreateRadiusAttr(C.ROBOT_RADIUS_M)
    chassis.CreateHeightAttr(0.06)
    UsdPhysics.CollisionAPI.Apply(chassis.GetPrim())
    slick = UsdShade.Material.Define(stage, f"{robot}/caster_material")  # frictionless casters
    UsdPhysics.MaterialAPI.Apply(slick.GetPrim()).CreateDynamicFrictionAttr(0.0)
    UsdPhysics.MaterialAPI(slick.GetPrim()).CreateStaticFrictionAttr(0.0)
    PhysxSchema.PhysxMaterialAPI.Apply(slick.GetPrim()).CreateFrictionCombineModeAttr().Set("min")
    for name, x in (("caster_front", 0.11), ("caster_rear", -0.11)):
        caster = geom(UsdGeom.Sphere, f"{robot}/base/{name}", (x, 0, -0.02), (0.2, 0.2, 0.2))
        caster.CreateRadiusAttr(0.02)
        UsdPhysics.CollisionAPI.Apply(caster.GetPrim())
        binding = UsdShade.MaterialBindingAPI.Apply(caster.GetPrim())
        binding.Bind(slick, UsdShade.Tokens.weakerThanDescendants, "physics")
    for joint_name, y in zip(C.WHEEL_JOINTS, (C.TRACK_WIDTH_M / 2, -C.TRACK_WIDTH_M / 2), strict=True):
        link = UsdGeom.Xform.Define(stage, f"{robot}/{joint_name}_link")
        link.AddTranslateOp().Set(Gf.Vec3d(0, y, C.BASE_HEIGHT_M))
        UsdPhysics.RigidBodyAPI.Apply(link.GetPrim())
        UsdPhysics.MassAPI.Apply(link.GetPrim()).CreateMassAttr(_MASSES_KG["wheel"])
        tyre = geom(UsdGeom.Cylinder, f"{robot}/{joint_name}_link/tyre", (0, 0, 0), (0.1, 0.1, 0.1))
        tyre.CreateRadiusAttr(C.WHEEL_RADIUS_M)
        tyre.CreateHeightAttr(0.024)
        tyre.CreateAxisAttr("Y")
        UsdPhysics.CollisionAPI.Apply(tyre.GetPrim())
        joint = UsdPhysics.RevoluteJoint.Define(stage, f"{robot}/{joint_name}")
        joint.CreateBody0Rel().SetTargets([base.GetPath()])
        joint.CreateBody1Rel().SetTargets([link.GetPath()])
        joint.CreateAxisAttr("Y")
        joint.CreateLocalPos0Attr(Gf.Vec3f(0, y, 0))
        joint.CreateLocalPos1Attr(Gf.Vec3f(0, 0, 0))
        drive = UsdPhysics.DriveAPI.Apply(joint.GetPrim(), "angular")  # velocity servo; gains set in SI later
        drive.CreateTypeAttr("force")
        drive.CreateStiffnessAttr(0.0)
        drive.CreateMaxForceAttr(_MAX_TORQUE_NM)


def _make_camera(env: int, cfg: SimConfig) -> Any:
    """The forward camera of one env, posed like the MJCF camera (world axes: +x forward, +z up)."""
    from isaacsim.sensors.camera import Camera

    camera = Camera(prim_path=f"{ENVS_ROOT}/env_{env}/diffbot/base/{C.CAMERA}", name=f"camera_{env}",
                    resolution=(cfg.camera.width, cfg.camera.height))  # fmt: skip
    horizontal, vertical = pinhole_apertures(C.CAMERA_FOVY_DEG, cfg.camera.width, cfg.camera.height)
    camera.set_focal_length(FOCAL_LENGTH)
    camera.set_horizontal_aperture(horizontal)
    camera.set_vertical_aperture(vertical)
    half = _CAMERA_PITCH_RAD / 2
    pitch = np.array([math.cos(half), 0.0, math.sin(half), 0.0])  # wxyz, about +y: nose down
    camera.set_local_pose(translation=np.array([0.14, 0.0, 0.09]), orientation=pitch, camera_axes="world")
    return camera
