"""A frame's stages from marks taken on several threads: they add up to its total, in path order."""

from __future__ import annotations

import numpy as np
import pytest
from agent.stage_marks import FINAL, StageMarks


def test_stages_run_from_each_mark_to_the_next_and_add_up_to_the_frame() -> None:
    marks = StageMarks()
    marks.mark("publish", 1.0, 10.0)  # a frame never begun (released before counting): ignored
    marks.begin(1.0, due_s=10.000, woke_s=10.001)
    marks.begin(1.05, due_s=10.050, woke_s=10.050)  # begun, never completed (dropped on the way)
    marks.mark("encoder callback", 1.0, 10.010)  # recorded before the hop's mark by another thread
    marks.mark("camera hop to encoder", 1.0, 10.004)
    marks.mark(FINAL, 1.0, 10.012)
    marks.mark(FINAL, 2.0, 10.060)  # a safe action stamped when sent: no frame
    stages, totals = marks.durations_ms()
    assert list(stages) == ["robot thread wake", "camera hop to encoder", "encoder callback", FINAL]
    assert [float(v[0]) for v in stages.values()] == pytest.approx([1.0, 3.0, 6.0, 2.0])
    assert totals == pytest.approx(np.array([12.0]))
    marks.restart()
    assert marks.durations_ms()[1].size == 0
