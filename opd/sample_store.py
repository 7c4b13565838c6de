"""The learner's store of aligned (student frame, teacher state, teacher action) samples.

A fixed-capacity ring of numpy arrays, one row per sample that left `opd.aligned_buffer.AlignedBuffer`:
the newest frame's raw observation (what the encoder trains on), the window of state embeddings computed
when the frames were acted on (the predictor's input), and the teacher side joined by stamp. Eviction is
first in, first out: the oldest sample goes first, so the store tracks the student's recent state
distribution (DAgger's aggregate, bounded). Saved beside checkpoints, atomically.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True)
class StoreSpec:
    """Widths of a sample's parts (image None: the frames are state embeddings only, e.g. a live node)."""

    image_shape: tuple[int, int, int] | None  # (H, W, 3)
    imu_window: int  # W_imu
    embed_dim: int  # E
    history: int  # T, frames in the predictor's window
    horizon: int  # H, future teacher states per sample
    state_dim: int  # Dq, teacher-side state width
    num_skills: int  # K
    num_params: int  # P

    def shapes(self) -> dict[str, tuple[tuple[int, ...], type]]:
        """Per-row shape and dtype of every stored array."""
        s = self
        out: dict[str, tuple[tuple[int, ...], type]] = {
            "embedding": ((s.embed_dim,), np.float32),  # the newest frame's embedding at acting time
            "window": ((s.history, s.embed_dim), np.float32),  # oldest first
            "window_mask": ((s.history,), np.bool_),
            "teacher_logits": ((s.num_skills,), np.float32),
            "teacher_skill": ((), np.int64),
            "teacher_params": ((s.num_params,), np.float32),
            "future": ((s.horizon, s.state_dim), np.float32),  # normalised teacher states at t + h periods
            "future_mask": ((s.horizon,), np.bool_),
        }
        if s.image_shape is not None:
            out.update(
                {
                    "image": (s.image_shape, np.uint8),
                    "imu": ((s.imu_window, 6), np.float32),
                    "skill": ((), np.int64),
                    "progress": ((), np.float32),
                    "step": ((), np.float32),
                }
            )
        return out


class SampleStore:
    """Ring of `capacity` aligned samples; `add` one row, `sample` a uniform batch as torch tensors."""

    def __init__(self, spec: StoreSpec, capacity: int) -> None:
        self.spec, self.capacity = spec, capacity
        self.arrays = {k: np.zeros((capacity, *shape), dtype) for k, (shape, dtype) in spec.shapes().items()}
        self.pos = 0
        self.size = 0
        self.added = 0  # samples ever added (labels used), across evictions and resumes
        # A live node adds from its callbacks while a learner thread samples: a row is read whole or not.
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def add(self, row: dict[str, np.ndarray]) -> None:
        """Append one sample; keys as `StoreSpec.shapes()`."""
        with self.lock:
            for k, a in self.arrays.items():
                a[self.pos] = row[k]
            self.pos = (self.pos + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
            self.added += 1

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """A uniform batch. Shapes: (B, *row shape)."""
        with self.lock:
            idx = rng.integers(0, self.size, size=batch_size)
            return {k: torch.from_numpy(a[idx]) for k, a in self.arrays.items()}

    def save(self, path: Path) -> None:
        """Write the filled part atomically (temporary file, then rename)."""
        fd, tmp = tempfile.mkstemp(suffix=".npz", dir=path.parent)
        os.close(fd)
        try:
            # in ring order, oldest first, so that a load into any capacity keeps the newest
            order = (self.pos - self.size + np.arange(self.size)) % self.capacity
            np.savez(tmp, added=self.added, **{k: a[order] for k, a in self.arrays.items()})
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def load(self, path: Path) -> None:
        """Restore a saved store; a file of another layout is refused naming the array."""
        with np.load(path) as data:
            for k, a in self.arrays.items():
                if k not in data or data[k].shape[1:] != a.shape[1:]:
                    got = data[k].shape[1:] if k in data else "missing"
                    raise ValueError(f"{path}: sample store array {k!r} is {got}, this one is {a.shape[1:]}")
            n = min(len(data["window"]), self.capacity)
            for k, a in self.arrays.items():
                a[:n] = data[k][len(data[k]) - n :]
            self.size, self.pos, self.added = n, n % self.capacity, int(data["added"])
