"""The learner's store of aligned (student frame, teacher state, teacher action) samples.

A fixed-capacity ring of numpy arrays, one row per sample that left
`opd.distill.aligned_buffer.AlignedBuffer`:
the newest frame's raw observation (what the encoder trains on), the window of state embeddings computed
when the frames were acted on (the head's and the predictor's input), and the teacher side joined by stamp.
Eviction is first in, first out: the oldest sample goes first, so the store tracks the student's recent
state distribution (DAgger's aggregate, bounded). Saved beside checkpoints, atomically.

Windows share their frames: a stream's next window is its last one moved on by a frame, so storing each
window whole costs `history` times what its frames do (128 frames of 256 floats: 130 kB a sample, 2 GB for
16k samples). The store keeps each frame once instead, in a ring of frames beside the ring of samples, found
by the stream's frame numbers (`AlignedSample.window_ids`); a sample keeps the ring numbers of its window's
frames. The frame ring holds 2 x capacity + streams x history frames: the samples held need at most one new
frame each (the newest; frames that never became samples, rarer, are written when a window first needs
them) plus the history before each stream's oldest sample. A frame overwritten all the same is read as
missing (a zero row, masked) and counted in `lost_frames`.
"""

from __future__ import annotations

import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from policies.files import atomic_path


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
        """Shape and dtype of each array of a row as `SampleStore.add` takes and `sample` gives it."""
        s = self
        out: dict[str, tuple[tuple[int, ...], type]] = {
            "embedding": ((s.embed_dim,), np.float32),  # the newest frame's embedding at acting time
            "window": ((s.history, s.embed_dim), np.float32),  # oldest first
            "window_mask": ((s.history,), np.bool_),
            "window_ids": ((s.history,), np.int64),  # the stream's frame numbers (AlignedSample.window_ids)
            "teacher_logits": ((s.num_skills,), np.float32),
            "teacher_skill": ((), np.int64),
            "teacher_params": ((s.num_params,), np.float32),
            "future": ((s.horizon, s.state_dim), np.float32),  # normalised teacher states at t + h periods
            "future_mask": ((s.horizon,), np.bool_),
            "takeover": ((), np.bool_),  # the gate gave this frame's decision to the teacher
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
    """Ring of `capacity` aligned samples (and their windows' frames, each once) from `streams` streams;
    `add` one row, `sample` a uniform batch as torch tensors."""

    def __init__(self, spec: StoreSpec, capacity: int, streams: int = 1) -> None:
        self.spec, self.capacity = spec, capacity
        rows = {k: v for k, v in spec.shapes().items() if k not in ("window", "window_ids")}
        rows["frame_ref"] = ((spec.history,), np.int64)  # ring numbers of the window's frames, -1 = none
        self.arrays = {k: np.zeros((capacity, *shape), dtype) for k, (shape, dtype) in rows.items()}
        self.frame_capacity = 2 * capacity + streams * spec.history
        self.frames = np.zeros((self.frame_capacity, spec.embed_dim), np.float32)  # (F, E) ring
        self.frames_written = 0  # frames ever written: the next one's ring number
        self._known: dict[int, dict[int, int]] = {}  # stream -> its frame number -> ring number
        self.lost_frames = 0  # window frames read after the ring overwrote them (sized so that none are)
        self.pos = 0
        self.size = 0
        self.added = 0  # samples ever added (labels used), across evictions and resumes
        # Sampling priorities (`sample(alpha=...)`): a new row gets the highest one set so far, so it is
        # seen soon (kept as a running maximum: `add` stays O(1)).
        self.priority = np.ones(capacity, np.float64)
        self.max_priority = 1.0
        # A live node adds from its callbacks while a learner thread samples: a row is read whole or not.
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def add(self, row: dict[str, np.ndarray], stream: int = 0) -> None:
        """Append one sample of `stream`; keys as `StoreSpec.shapes()`."""
        with self.lock:
            refs = self._frame_refs(row["window"], row["window_mask"], row["window_ids"], stream)
            for k, a in self.arrays.items():
                a[self.pos] = refs if k == "frame_ref" else row[k]
            self.priority[self.pos] = self.max_priority
            self.pos = (self.pos + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
            self.added += 1

    def _frame_refs(self, window: np.ndarray, mask: np.ndarray, ids: np.ndarray, stream: int) -> np.ndarray:
        """Ring numbers (T,) of a window's frames (T, E), writing those the ring does not hold yet."""
        known = self._known.setdefault(stream, {})
        oldest = self.frames_written - self.frame_capacity  # ring numbers below it are overwritten
        refs = np.full(len(window), -1, np.int64)
        for t in np.flatnonzero(mask):
            ref = known.get(int(ids[t]), -1) if ids[t] >= 0 else -1
            if ref < max(oldest, 0):
                ref = self.frames_written
                self.frames[ref % self.frame_capacity] = window[t]
                self.frames_written += 1
                if ids[t] >= 0:
                    known[int(ids[t])] = ref
            refs[t] = ref
        if len(known) > 2 * len(window):  # keep the stream's newest frames only
            newest = max(known)
            for i in [i for i in known if i <= newest - len(window)]:
                del known[i]
        return refs

    def _windows(self, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Windows (..., T, E) and masks (..., T) of ring numbers (..., T); overwritten frames masked."""
        held = (refs >= 0) & (refs >= self.frames_written - self.frame_capacity)
        self.lost_frames += int(((refs >= 0) & ~held).sum())
        window = self.frames[np.where(held, refs, 0) % self.frame_capacity]
        window[~held] = 0.0
        return window, held

    def sample(
        self, batch_size: int, rng: np.random.Generator, alpha: float = 0.0, takeover_share: float = 0.0
    ) -> dict[str, torch.Tensor]:
        """A batch of rows as added (window included), plus "index" (B,) for `set_priority`. Shapes:
        (B, *row shape). alpha = 0: uniform; else row i with probability proportional to priority_i^alpha
        (prioritised replay, Schaul et al. 2016; no importance weights: the bias towards the rows the
        student gets wrong is the point). takeover_share > 0: round(share * B) rows drawn uniformly from the
        takeover rows and the rest from the others (while the store holds both; uniform otherwise)."""
        with self.lock:
            taken = self.arrays["takeover"][: self.size]
            flagged = np.flatnonzero(taken) if takeover_share > 0 else None
            if flagged is not None and 0 < len(flagged) < self.size:
                k = round(takeover_share * batch_size)
                others = np.flatnonzero(~taken)
                idx = np.concatenate([flagged[rng.integers(0, len(flagged), size=k)],
                                      others[rng.integers(0, len(others), size=batch_size - k)]])  # fmt: skip
            elif alpha == 0.0:
                idx = rng.integers(0, self.size, size=batch_size)
            else:
                p = self.priority[: self.size] ** alpha
                idx = rng.choice(self.size, size=batch_size, p=p / p.sum())
            out = {k: a[idx] for k, a in self.arrays.items() if k != "frame_ref"}
            out["index"] = idx
            out["window"], held = self._windows(self.arrays["frame_ref"][idx])
            out["window_mask"] &= held
            return {k: torch.from_numpy(a) for k, a in out.items()}

    def set_priority(self, idx: np.ndarray, priority: np.ndarray) -> None:
        """New priorities (B,) > 0 for the rows `idx` (B,) that `sample` gave (e.g. their losses)."""
        with self.lock:
            self.priority[idx] = priority
            self.max_priority = max(self.max_priority, float(np.max(priority)))

    def skill_counts(self, num_skills: int) -> np.ndarray:
        """How many held rows carry each teacher skill. Shape: (K,)."""
        with self.lock:
            return np.bincount(self.arrays["teacher_skill"][: self.size], minlength=num_skills)

    def save(self, path: Path) -> None:
        """Write the filled part atomically (temporary file, then rename)."""
        with atomic_path(path) as tmp:
            # in ring order, oldest first, so that a load into any capacity keeps the newest
            order = (self.pos - self.size + np.arange(self.size)) % self.capacity
            rows = {k: a[order] for k, a in self.arrays.items()}
            n = min(self.frames_written, self.frame_capacity)
            first = self.frames_written - n  # the oldest frame held, numbered 0 in the file
            refs = rows["frame_ref"]
            rows["frame_ref"] = np.where(refs >= first, refs - first, -1)
            frames = self.frames[(first + np.arange(n)) % self.frame_capacity]
            np.savez(tmp, added=self.added, frames=frames, priority=self.priority[order], **rows)

    def load(self, path: Path) -> None:
        """Restore a saved store; a file of another layout is refused naming the array, one cut short or
        corrupt naming the file."""
        try:
            self._load(path)
        except (zipfile.BadZipFile, EOFError, OSError, KeyError) as err:
            if isinstance(err, FileNotFoundError):
                raise
            raise ValueError(f"{path}: not a readable sample store (cut short?): {err!r}") from None

    def _load(self, path: Path) -> None:
        with np.load(path) as data:
            wanted = {**self.arrays, "frames": self.frames}
            for k, a in wanted.items():
                if k == "takeover" and k not in data:  # a store saved before takeovers were kept: none
                    continue
                if k not in data or data[k].shape[1:] != a.shape[1:]:
                    got = data[k].shape[1:] if k in data else "missing"
                    raise ValueError(f"{path}: sample store array {k!r} is {got}, this one is {a.shape[1:]}")
            n = min(len(data["frame_ref"]), self.capacity)
            for k, a in self.arrays.items():
                a[:n] = data[k][len(data[k]) - n :] if k in data else 0
            self.priority[:] = 1.0  # a store saved before priorities: uniform
            if "priority" in data:
                self.priority[:n] = data["priority"][len(data["priority"]) - n :]
            self.max_priority = float(self.priority[:n].max(initial=1.0))
            frames = data["frames"]
            m = min(len(frames), self.frame_capacity)
            self.frames[:m] = frames[len(frames) - m :]
            cut = len(frames) - m  # file frames below it did not fit
            refs = self.arrays["frame_ref"][:n]
            refs[:] = np.where(refs >= cut, refs - cut, -1)
            self.frames_written, self._known = m, {}
            self.size, self.pos, self.added = n, n % self.capacity, int(data["added"])
