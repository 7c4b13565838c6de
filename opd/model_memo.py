"""Outputs of the frozen acting models computed ahead in batches and served by input, for offline replay.

In replay nothing learns: the acting head, the state predictor and the teacher are pure functions of their
inputs, and a whole recording's inputs are known before its first decision. `agent replay` evaluates them
in batches first (which the live graph, deciding frame by frame, cannot) and the learner takes each
output from here instead of a batch-1 call; the decision logic runs unchanged. A row not held (a window
the speculation missed, e.g. after an episode reset) is computed as live. Batched and batch-1 float
results may differ in the last bits, so a decision exactly at a threshold can differ from the live one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# An input row (one embedding, window or feature vector) -> the model's output rows for it.
Outputs = tuple[np.ndarray, ...]


class ModelMemo:
    """Per model ("head", "predictor", "teacher"): input row bytes -> outputs for that row, (1, ...) each."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[bytes, Outputs]] = {"head": {}, "predictor": {}, "teacher": {}}
        self.hits = dict.fromkeys(self.tables, 0)
        self.misses = dict.fromkeys(self.tables, 0)

    def fill(
        self, model: str, inputs: np.ndarray, fn: Callable[[np.ndarray], Outputs | np.ndarray],
        batch: int = 256,
    ) -> None:  # fmt: skip
        """Evaluate `fn` on `inputs` (M, ...) float32 in batches of `batch`; each output (one array or a
        tuple) has a leading M."""
        inputs = np.ascontiguousarray(inputs, dtype=np.float32)
        table = self.tables[model]
        for i in range(0, len(inputs), batch):
            rows = inputs[i : i + batch]
            outs = fn(rows)
            outs = outs if isinstance(outs, tuple) else (outs,)
            for j, row in enumerate(rows):
                table[row.tobytes()] = tuple(o[j : j + 1] for o in outs)  # (1, ...) each

    def get(self, model: str, inputs: np.ndarray) -> Outputs | None:
        """Outputs stacked over the rows of `inputs` (M, ...), or None unless every row is held."""
        table = self.tables[model]
        found = [table.get(np.ascontiguousarray(row, dtype=np.float32).tobytes()) for row in inputs]
        if any(f is None for f in found):
            self.misses[model] += 1
            return None
        self.hits[model] += 1
        if len(found) == 1:  # the live core's usual batch: no stacking (copies: callers own their outputs)
            return tuple(o.copy() for o in found[0])
        return tuple(np.concatenate(cols) for cols in zip(*found, strict=True))
