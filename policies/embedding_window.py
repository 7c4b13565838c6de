"""The last frames' embeddings of N streams: the input of the student's head and of the state predictor."""

from __future__ import annotations

import numpy as np


class EmbeddingWindow:
    """Per stream (an env, a robot), the last `length` embeddings, oldest first, zero rows before the
    stream's first frame since its reset: as the learner stores windows and trains on them.

    Shape of the held windows: (N, length, E).
    """

    def __init__(self, streams: int, length: int, dim: int) -> None:
        self.frames = np.zeros((streams, length, dim), np.float32)

    def push(self, streams: np.ndarray, embeddings: np.ndarray) -> np.ndarray:
        """Append one embedding (M, E) to each of `streams` (M,), distinct; their windows (M, length, E)."""
        idx = np.asarray(streams, dtype=np.intp)
        if np.unique(idx).size != idx.size:
            raise ValueError(f"one frame per stream and push: streams {idx.tolist()} repeat")
        held = self.frames[idx]  # a copy: fancy indexing
        held[:, :-1] = held[:, 1:]
        held[:, -1] = embeddings
        self.frames[idx] = held
        return held

    def reset(self, streams: np.ndarray | None = None) -> None:
        """Forget the frames of `streams` (all when None): a new episode starts from zero rows."""
        self.frames[slice(None) if streams is None else np.asarray(streams, dtype=np.intp)] = 0.0
