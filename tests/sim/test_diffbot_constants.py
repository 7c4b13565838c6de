"""The DiffBot MJCF agrees with its constants module (which the controller, task and Isaac Sim use)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from sim.robots.diffbot import constants as C


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(C.ARENA_MJCF))


def test_robot_geometry(model: mujoco.MjModel) -> None:
    for wheel in C.WHEEL_JOINTS:
        assert model.geom(wheel).size[0] == pytest.approx(C.WHEEL_RADIUS_M)
    left, right = (model.body(w).pos for w in C.WHEEL_JOINTS)
    assert np.linalg.norm(left - right) == pytest.approx(C.TRACK_WIDTH_M)
    assert model.geom(C.CHASSIS_GEOM).size[0] == pytest.approx(C.ROBOT_RADIUS_M)
    assert model.body(C.BASE_BODY).pos[2] == pytest.approx(C.BASE_HEIGHT_M)


def test_arena_geometry(model: mujoco.MjModel) -> None:
    for wall in C.WALL_GEOMS:
        g = model.geom(wall)
        axis = int(np.argmax(np.abs(g.pos[:2])))
        assert abs(g.pos[axis]) - g.size[axis] == pytest.approx(C.ARENA_HALF_SIZE_M)
    for name in C.OBSTACLES:
        assert model.geom(name).size[0] == pytest.approx(C.OBSTACLE_RADIUS_M)
        assert model.geom(name).size[1] == pytest.approx(C.OBSTACLE_RADIUS_M)  # half height: placed at z = r
    for colour, rgb in C.MARKER_RGB.items():
        assert model.body_mocapid[model.body(f"marker_{colour}").id] >= 0
        np.testing.assert_allclose(model.geom(f"marker_{colour}").rgba[:3], rgb)


def test_camera_field_of_view(model: mujoco.MjModel) -> None:
    """Isaac Sim sets the same vertical field of view from this constant (sim/isaacsim_backend.py)."""
    assert model.cam_fovy[model.camera(C.CAMERA).id] == pytest.approx(C.CAMERA_FOVY_DEG)
