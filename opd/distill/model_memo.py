"""Outputs of the frozen acting models computed ahead in batches and served by input, for offline replay.

In replay nothing learns: the acting head, the state predictor and the teacher are pure functions of their
inputs, and a whole recording's inputs are known before its first decision. `agent replay` evaluates them
in batches first (which the live graph, deciding frame by frame, cannot) and the learner takes each
output from here instead of a batch-1 call; the decision logic runs unchanged. A row not held (a window
the speculation missed, e.g. after a refused frame) is computed as live. Batched and batch-1 float
results may differ in the last bits, so a decision exactly at a threshold can differ from the live one.

Memory: rows are held as given (a window is a view into the replay's embeddings, not a copy) and looked up
by their newest entry, then compared whole, so a 128-frame window costs neither a 128-frame key per frame
nor a 128-frame hash per lookup.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# An input row (one embedding, window or feature vector) -> the model's output rows for it.
Outputs = tuple[np.ndarray, ...]


def _key(row: np.ndarray) -> bytes:
    """A window's newest frame, or a whole feature vector: narrows a lookup to a few candidates."""
    return np.asarray(row[-1] if row.ndim > 1 else row, np.float32).tobytes()


class ModelMemo:
    """Per model ("head", "predictor", "teacher"): input rows by their newest entry, with their outputs."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[bytes, list[tuple[np.ndarray, Outputs]]]] = {
            "head": {}, "predictor": {}, "teacher": {}}  # fmt: skip
        self.hits = dict.fromkeys(self.tables, 0)
        self.misses = dict.fromkeys(self.tables, 0)

    def fill(
        self, model: str, inputs: np.ndarray, fn: Callable[[np.ndarray], Outputs | np.ndarray],
        batch: int = 256,
    ) -> None:  # fmt: skip
        """Evaluate `fn` on `inputs` (M, ...) float32 in batches of `batch`; each output (one array or a
        tuple) has a leading M. `inputs` may be a strided, read-only view: a batch at a time is copied."""
        for i in range(0, len(inputs), batch):
            rows = inputs[i : i + batch]
            self.put(model, rows, fn(np.array(rows, dtype=np.float32)))  # a writable copy of this batch only

    def put(self, model: str, inputs: np.ndarray, outputs: Outputs | np.ndarray) -> None:
        """Hold `outputs` (one array or a tuple, each with a leading M) as the model's on `inputs` (M, ...),
        computed by the caller (e.g. all of an episode's windows at once: `FrameMemory.sliding`)."""
        table = self.tables[model]
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        if any(len(o) != len(inputs) for o in outs):
            raise ValueError(f"{model}: {len(inputs)} input rows, outputs of {[len(o) for o in outs]} rows")
        for j, row in enumerate(inputs):
            table.setdefault(_key(row), []).append((row, tuple(o[j : j + 1] for o in outs)))  # (1, ...)

    def get(self, model: str, inputs: np.ndarray) -> Outputs | None:
        """Outputs stacked over the rows of `inputs` (M, ...), or None unless every row is held."""
        table = self.tables[model]
        found = [self._find(table, row) for row in inputs]
        if any(f is None for f in found):
            self.misses[model] += 1
            return None
        self.hits[model] += 1
        if len(found) == 1:  # the live core's usual batch: no stacking (copies: callers own their outputs)
            return tuple(o.copy() for o in found[0])  # type: ignore[union-attr]
        return tuple(np.concatenate(cols) for cols in zip(*found, strict=True))  # type: ignore[misc]

    @staticmethod
    def _find(table: dict[bytes, list[tuple[np.ndarray, Outputs]]], row: np.ndarray) -> Outputs | None:
        for held, outs in table.get(_key(row), ()):
            if held.shape == row.shape and np.array_equal(held, row):
                return outs
        return None
