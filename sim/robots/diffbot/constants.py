"""DiffBot constants: model files, element names in the MJCF, nominal kinematics and arena geometry.

The MJCF (robot.xml, arena.xml) must agree with these numbers; tests/sim/robots/diffbot/test_constants.py
checks it. The base controller and odometry use the nominal values, as a real base's firmware would.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent
ARENA_MJCF = ROOT / "arena.xml"  # scene: arena + included robot; what the MuJoCo backend loads
ROBOT_MJCF = ROOT / "robot.xml"  # the robot alone; arena.xml includes it
CONTRACT = ROOT / "skills.yaml"

# Element names in the MJCF.
BASE_BODY = "base"
BASE_JOINT = "base"  # free joint
WHEEL_JOINTS = ("wheel_left", "wheel_right")
WHEEL_ACTUATORS = ("wheel_left", "wheel_right")
IMU_ACCEL_SENSOR = "imu_accel"
IMU_GYRO_SENSOR = "imu_gyro"
BUMPER_SENSOR = "bumper"  # touch sensor around the chassis: any force is a collision
CAMERA = "front"
CAMERA_FOVY_DEG = (
    75.0  # vertical field of view of the forward camera (robot.xml `fovy`; Isaac Sim sets it too)
)
CHASSIS_GEOM = "chassis"
CASTER_GEOMS = ("caster_front", "caster_rear")  # they rest on the floor when the wheels do (robot.xml)
WALL_GEOMS = ("wall_north", "wall_south", "wall_east", "wall_west")
MARKER_RGB = {  # body and geom `marker_<colour>`, and its colour
    "red": (0.9, 0.1, 0.1),
    "green": (0.1, 0.8, 0.1),
    "blue": (0.1, 0.2, 0.9),
    "yellow": (0.9, 0.8, 0.1),
}
MARKER_COLOURS = tuple(MARKER_RGB)
OBSTACLES = ("obstacle_0", "obstacle_1", "obstacle_2", "obstacle_3")  # body and geom names
# Each marker's beacon: a visual-only post at its centre (arena.xml `beacon_<colour>`), so the student's
# low camera sees a marker from afar: a floor disc alone is ~1 px tall at 1.5 m in a 64 px image.
BEACON_RADIUS_M = 0.06
BEACON_HEIGHT_M = 0.4
PARKED_Z_M = -1.0  # height of unused markers/obstacles: under the floor, out of contact and sight

# Nominal kinematics (robot.xml).
WHEEL_RADIUS_M = 0.04
TRACK_WIDTH_M = 0.24  # distance between the wheel mid-planes
ROBOT_RADIUS_M = 0.15  # chassis footprint radius
BASE_HEIGHT_M = 0.04  # base frame (wheel axle) height above the floor at rest

# Base controller: how fast the velocity setpoint may change (a real base's firmware limits; nav2's
# TurtleBot3 defaults are 2.5 m/s^2 and 3.2 rad/s^2). The wheel motors deliver about 3 m/s^2.
LINEAR_ACCEL_MPS2 = 2.0  # m/s^2, default linear acceleration/deceleration limit
ANGULAR_ACCEL_RADPS2 = 6.0  # rad/s^2, angular acceleration limit

# Arena (arena.xml).
ARENA_HALF_SIZE_M = 2.0  # inner wall faces at x, y = +-2.0 m
OBSTACLE_RADIUS_M = 0.15
