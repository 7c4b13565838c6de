"""Test-wide settings: quiet, deterministic, and never touching the user's caches."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
