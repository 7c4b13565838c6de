"""`agent run`'s live figures after `agent disarm`: the robot line says disarmed, and the periods nothing
answers while disarmed are counted as such, not as missed cycles."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from agent.arming import set_armed
from agent.commands.run import _figures
from agent.sim_session import SessionConfig, SimSession
from rclpy.context import Context

pytestmark = pytest.mark.slow


def test_a_disarmed_robot_is_said_so_and_its_unanswered_periods_are_not_missed(
    ros_context: Context, tiny_artifact: Path
) -> None:
    switch = sys.getswitchinterval()  # the session sets its own
    session = SimSession(SessionConfig(artifact_dir=tiny_artifact, drive="student"), context=ros_context)
    try:
        session.start()
        session.spin(1.0)
        armed = session.progress()
        assert set_armed("disarm", context=ros_context) == "inactive"
        before = session.progress()
        session.spin(1.5)
        after = session.progress()
    finally:
        session.close()
        sys.setswitchinterval(switch)
    assert armed.arm_state == "active" and _figures(armed, "student")["robot"] == "armed"
    assert after.arm_state == "inactive" and after.disarmed - before.disarmed >= 5  # 1.5 s at 20 Hz: 30
    # Unanswered periods (overruns, the host's own lateness, aside): at most the one under way at the disarm.
    assert after.missed - before.missed <= 1
    figures = _figures(after, "student")
    assert (
        figures["robot"].startswith("disarmed")
        and f"{after.disarmed} more while disarmed" in figures["control"]
    )
