"""Where a frame's time goes on its way through the graph: one monotonic instant per stage, per frame.

The nodes of an in-process graph (`agent.sim_session`) share one clock, `time.monotonic`, so the instants
that different threads take of one frame subtract exactly. A frame is keyed by the stamp its messages carry
(the camera image's, kept by the embedding and the action that answer it). The sim bridge `begin`s it with
the control tick it is due at and the moment the robot thread woke to publish it; each node then `mark`s
the end of its stage with the stage's name, and the mark named `FINAL` (the executed action published on
/opd/action) completes it. A stage lasts from the frame's previous mark to its own, so the stages of a
frame add up to its total, due tick -> action published. Marks of frames not begun (a frame released
before counting started, a safe action stamped when sent) are ignored. ROS-free; thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

import numpy as np

FINAL = "publish /opd/action"  # the mark that completes a frame
WAKE = "robot thread wake"  # the first stage: due tick -> the robot thread publishing
HISTORY = 100_000  # completed frames kept (83 min at 20 Hz)
_IN_FLIGHT = 64  # frames begun and not completed that are kept (a dropped frame never completes)
MATCH_US = 1e6  # stamps are matched to the microsecond, as the robot loop matches answers


class StageMarks:
    """Per-frame stage instants from any thread; `durations_ms` gives every stage's time per frame."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[int, list[tuple[str, float]]] = OrderedDict()  # key -> [(stage, t)]
        self._done: deque[list[tuple[str, float]]] = deque(maxlen=HISTORY)

    def begin(self, stamp_s: float, due_s: float, woke_s: float) -> None:
        """A frame stamped `stamp_s` (s) was due at the monotonic `due_s` and woke the robot at `woke_s`."""
        with self._lock:
            self._open[round(stamp_s * MATCH_US)] = [("", due_s), (WAKE, woke_s)]
            while len(self._open) > _IN_FLIGHT:
                self._open.popitem(last=False)

    def mark(self, stage: str, stamp_s: float, at_s: float) -> None:
        """`stage` of the frame stamped `stamp_s` ended at the monotonic `at_s` (s)."""
        key = round(stamp_s * MATCH_US)
        with self._lock:
            marks = self._open.get(key)
            if marks is None:
                return
            marks.append((stage, at_s))
            if stage == FINAL:
                self._done.append(self._open.pop(key))

    def restart(self) -> None:
        """Forget every frame so far (e.g. a warm-up)."""
        with self._lock:
            self._open.clear()
            self._done.clear()

    def durations_ms(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Each stage's time per completed frame that had it, in path order, and each frame's total, ms.

        Returns ({stage: (F_stage,)}, (F,)). A stage is what passed between a frame's previous mark and its
        own (marks ordered by time: threads may record them out of order).
        """
        with self._lock:
            frames = [sorted(marks, key=lambda m: m[1]) for marks in self._done]
        stages: dict[str, list[float]] = {}
        for marks in frames:
            for (_, before), (stage, at) in zip(marks, marks[1:], strict=False):
                stages.setdefault(stage, []).append((at - before) * 1e3)
        totals = np.array([(m[-1][1] - m[0][1]) * 1e3 for m in frames])
        return {k: np.array(v) for k, v in stages.items()}, totals
