"""The sample store keeps each window frame once, and gives back every window exactly as it was added."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opd.distill.sample_store import SampleStore, StoreSpec

SPEC = StoreSpec(
    None, imu_window=1, embed_dim=4, history=5, horizon=1, state_dim=2, num_skills=3, num_params=2
)


class Streams:
    """Interleaved frame streams as `AlignedBuffer`s give them: numbered frames, windows of the newest
    `history`, some frames never a sample (unmatched), episodes that restart the window."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.next = [0] * n  # each stream's next frame number
        self.recent: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
        self.added = 0  # samples made: each row's teacher_skill says which

    def frame(self, stream: int, sample: bool = True, reset: bool = False) -> dict[str, np.ndarray] | None:
        if reset:
            self.recent[stream] = []
        num, feat = self.next[stream], self.rng.normal(size=SPEC.embed_dim).astype(np.float32)
        self.next[stream] += 1
        self.recent[stream] = [*self.recent[stream], (num, feat)][-SPEC.history :]
        if not sample:
            return None
        rows = self.recent[stream]
        h, n = SPEC.history, len(rows)
        row = {k: np.zeros(shape, dtype) for k, (shape, dtype) in SPEC.shapes().items()}
        row["window"][h - n :] = np.stack([f for _, f in rows])
        row["window_mask"][h - n :] = True
        row["window_ids"][:] = -1
        row["window_ids"][h - n :] = [i for i, _ in rows]
        row["embedding"] = feat
        row["teacher_skill"] = self.added
        self.added += 1
        return row


def read_all(store: SampleStore) -> dict[int, dict[str, np.ndarray]]:
    """Every held row, by its teacher_skill (the order it was made in)."""
    if not len(store):
        return {}
    batch = store.sample(4096, np.random.default_rng(0))
    return {int(s): {k: v[i].numpy() for k, v in batch.items()} for i, s in enumerate(batch["teacher_skill"])}


def assert_rows_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for k in ("window", "window_mask", "embedding", "teacher_skill"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@settings(max_examples=40, deadline=None)
@given(
    streams=st.integers(1, 4),
    capacity=st.integers(3, 40),
    events=st.lists(st.tuples(st.integers(0, 3), st.sampled_from("ssssssdr")), min_size=1, max_size=200),
)
def test_windows_come_back_exactly_from_interleaved_streams_with_drops_and_resets(streams, capacity, events):
    store, src, made = SampleStore(SPEC, capacity, streams=streams), Streams(streams), []
    for stream, kind in events:  # s: a sample; d: a frame that never becomes one; r: a new episode's first
        row = src.frame(stream % streams, sample=kind != "d", reset=kind == "r")
        if row is not None:
            store.add(row, stream=stream % streams)
            made.append(row)
    held = read_all(store)
    assert sorted(held) == list(range(max(0, len(made) - capacity), len(made)))  # FIFO: the newest
    for i, row in held.items():
        assert_rows_equal(row, made[i])
    assert store.lost_frames == 0  # the frame ring is sized so that no held window loses a frame


def test_frames_are_stored_once_not_once_per_window():
    store, src = SampleStore(SPEC, 1000, streams=4), Streams(4)
    for i in range(1000):
        store.add(src.frame(i % 4), stream=i % 4)
    assert store.frames_written == 1000  # one new frame per sample
    whole = 1000 * SPEC.history * SPEC.embed_dim * 4  # bytes if every window were stored whole
    assert store.frames.nbytes < 0.5 * whole


def test_a_frame_the_ring_overwrote_is_read_as_missing_and_counted():
    store = SampleStore(SPEC, 4, streams=1)  # a ring of 2 x 4 + 5 = 13 frames
    src = Streams(1)
    for _ in range(SPEC.history - 1):
        src.frame(0, sample=False)
    first = src.frame(0)  # a full window: 5 frames
    store.add(first)
    for _ in range(3):  # windows of frames nobody numbered (-1): each written anew, 5 frames a row
        row = src.frame(0)
        row["window_ids"][:] = -1
        store.add(row)
    got = read_all(store)[0]
    assert not got["window_mask"].any() and not got["window"].any()  # all 5 overwritten: zero and masked
    assert store.lost_frames > 0


@pytest.mark.parametrize("capacity", [30, 12])
def test_save_then_load_gives_the_newest_rows_back(tmp_path: Path, capacity: int):
    store, src, made = SampleStore(SPEC, 20, streams=3), Streams(3), []
    for i in range(50):
        made.append(src.frame(i % 3, sample=True, reset=i % 17 == 0))
        store.add(made[-1], stream=i % 3)
    store.save(tmp_path / "store.npz")
    other = SampleStore(SPEC, capacity, streams=3)
    other.load(tmp_path / "store.npz")
    held = read_all(other)
    assert sorted(held) == list(range(50 - min(20, capacity), 50)) and other.added == 50
    for i, row in held.items():
        assert_rows_equal(row, made[i])
    for i in range(50, 80):  # learning goes on after a resume: new windows share frames with loaded ones
        made.append(src.frame(i % 3))
        other.add(made[-1], stream=i % 3)
    for i, row in read_all(other).items():
        assert_rows_equal(row, made[i])
    assert other.lost_frames == 0


def test_takeover_flags_survive_a_save_and_a_store_saved_before_them_loads_with_none(tmp_path: Path):
    store, src = SampleStore(SPEC, 20), Streams(1)
    for i in range(12):
        row = src.frame(0)
        row["takeover"] = i % 3 == 0
        store.add(row)
    store.save(tmp_path / "store.npz")
    again = SampleStore(SPEC, 20)
    again.load(tmp_path / "store.npz")
    np.testing.assert_array_equal(again.arrays["takeover"][:12], np.arange(12) % 3 == 0)
    with np.load(tmp_path / "store.npz") as data:  # as written before the flag existed
        np.savez(tmp_path / "older.npz", **{k: data[k] for k in data.files if k != "takeover"})
    older = SampleStore(SPEC, 20)
    older.load(tmp_path / "older.npz")
    assert len(older) == 12 and not older.arrays["takeover"].any()
    assert_rows_equal(read_all(older)[5], read_all(again)[5])


def test_a_store_of_another_layout_is_refused_naming_the_array(tmp_path: Path):
    np.savez(tmp_path / "old.npz", added=3, window=np.zeros((3, 5, 4), np.float32))  # windows stored whole
    with pytest.raises(ValueError, match="'embedding'|'frames'"):
        SampleStore(SPEC, 10).load(tmp_path / "old.npz")


def test_prioritised_batches_follow_the_priorities_and_new_rows_come_first(tmp_path: Path):
    store, src = SampleStore(SPEC, 40), Streams(1)
    for _ in range(40):
        store.add(src.frame(0))
    rng = np.random.default_rng(0)
    uniform = store.sample(4000, rng)["index"].numpy()
    assert np.bincount(uniform, minlength=40).min() > 50  # alpha 0: every row alike
    prio = np.full(40, 1e-3)
    prio[7] = 1.0  # the one row the student gets wrong
    store.set_priority(np.arange(40), prio)
    drawn = store.sample(4000, rng, alpha=1.0)["index"].numpy()
    assert 0.9 < np.mean(drawn == 7) < 0.99  # 1 / (1 + 39e-3) = 0.96
    softer = store.sample(4000, rng, alpha=0.5)["index"].numpy()
    assert np.mean(softer == 7) < np.mean(drawn == 7)  # a lower alpha flattens the distribution
    batch = store.sample(10, rng, alpha=1.0)
    assert np.array_equal(batch["teacher_skill"].numpy(), batch["index"].numpy())  # row i was added i-th
    store.add(src.frame(0))  # evicts row 0; the newest gets the highest priority set so far
    assert store.priority[0] == 1.0
    store.set_priority(np.array([3]), np.array([2.5]))
    store.add(src.frame(0))
    assert store.priority[1] == 2.5
    store.save(tmp_path / "store.npz")
    again = SampleStore(SPEC, 40)
    again.load(tmp_path / "store.npz")
    moved = (np.arange(40) + 2) % 40  # the file is oldest first: row i is at i - 2 after a load
    np.testing.assert_array_equal(again.priority[:40], store.priority[moved])
    again.add(src.frame(0))
    assert again.priority[0] == 2.5  # the running maximum comes back with the priorities
