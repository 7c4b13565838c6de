"""`agent bench faults`' own arithmetic: input ages across a clock step, and a failing row in the report.

The faults themselves are tested where they are handled (test_respawn, test_launch_respawn, test_clock_jump,
test_bag_writer, test_killed_writes, test_learner, test_onnx_acting, test_replay_runner, test_opd_node);
the bench runs them together on the live graph and is a benchmark, not a test.
"""

from __future__ import annotations

import pytest
from agent.fault_bench import FaultResult, _true_age, table


@pytest.mark.parametrize(
    ("apparent", "step", "age"),
    [
        (0.18, 5.0, 0.18),  # stamped and sent on the clock stepped forward
        (5.18, 5.0, 0.18),  # stamped before the forward step, sent after it
        (0.18, -5.0, 0.18),  # stamped and sent on the clock stepped back
        (-4.82, -5.0, 0.18),  # stamped before the back step, sent after it: not from the future
        (0.7, 5.0, 0.7),  # a stale answer stays stale
    ],
)
def test_a_commands_input_age_across_a_clock_step(apparent: float, step: float, age: float) -> None:
    assert _true_age(apparent, step) == pytest.approx(age)


def test_the_report_shouts_what_failed_and_dashes_what_did_not_apply() -> None:
    ok = FaultResult("SIGKILL encoder", 412.4, 0, 12, True, 2.1, None, True, "note")
    bad = FaultResult("SIGKILL opd", None, 3, 16, False, None, False, False, "")
    lines = table([ok, bad]).splitlines()
    assert lines[2] == "| SIGKILL encoder | 412 ms | 0 | 12 (yes) | 2.1 s | - | yes | note |"
    assert lines[3] == "| SIGKILL opd | - | 3 | 16 (NO) | - | NO | NO |  |"
