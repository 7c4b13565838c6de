"""A third-person view of the MuJoCo default: env i from a camera that follows its robot, for videos.

The robot's only camera is the student's (`front`); what a viewer needs beside it is the robot in its
arena. MuJoCo's tracking camera keeps the base in the centre at a fixed distance and world bearing (a
camera that also turned with the robot would spin the arena on every turn in place). Its own offscreen
renderer reads the env's MjData and writes nothing, so recording never changes an episode.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from policies.config import Config
from sim.robot_interface import RobotInterface


class ThirdPersonConfig(Config):
    """Where the following camera stands and what size it renders."""

    height: int = Field(256, ge=16)  # px
    width: int = Field(320, ge=16)  # px
    distance_m: float = Field(3.0, gt=0)  # from the base, m: 3 m shows most of the 4 m arena
    elevation_deg: float = Field(-55.0, ge=-90, le=0)  # below the horizon, deg
    azimuth_deg: float = 90.0  # the camera's bearing in the world, deg


class ThirdPersonView:
    """Renders env i of a MuJoCo backend (or of the real-robot proxy over one) from the following camera."""

    def __init__(self, robot: RobotInterface, cfg: ThirdPersonConfig | None = None) -> None:
        import mujoco

        from sim.mujoco_backend import MujocoBackend, make_renderer
        from sim.robots.diffbot import constants as C

        backend = robot
        while not isinstance(backend, MujocoBackend) and hasattr(backend, "robot"):
            backend = backend.robot  # the real-robot proxy wraps the backend it degrades
        if not isinstance(backend, MujocoBackend):
            name = type(backend).__name__
            raise ValueError(f"a third-person view renders the MuJoCo backend only, not {name} (Isaac Sim: "
                             "watch its own viewport)")  # fmt: skip
        self.cfg = cfg = cfg or ThirdPersonConfig()
        self.backend = backend
        model = backend.dressed_model(0)
        offscreen = model.vis.global_  # the largest frame a renderer of this model may ask for
        offscreen.offwidth = max(offscreen.offwidth, cfg.width)
        offscreen.offheight = max(offscreen.offheight, cfg.height)
        self._renderer = make_renderer(model, cfg.height, cfg.width)
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self._camera.trackbodyid = model.body(C.BASE_BODY).id
        self._camera.distance = cfg.distance_m
        self._camera.elevation = cfg.elevation_deg
        self._camera.azimuth = cfg.azimuth_deg

    def render(self, env: int) -> np.ndarray:
        """Env `env` as it stands now. Shape: (height, width, 3) uint8."""
        if not self.backend.connected:
            raise RuntimeError("ThirdPersonView: the backend is not connected (connect or reset it first)")
        self.backend.dressed_model(env)
        self._renderer.update_scene(self.backend.data(env), camera=self._camera)
        return self._renderer.render()

    def close(self) -> None:
        """Free the renderer's GL context."""
        self._renderer.close()
