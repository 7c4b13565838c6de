"""Atomic writes: a write that fails leaves the old file (or none) and no temporary file behind."""

from pathlib import Path

import numpy as np
import pytest

from policies.files import atomic_path, write_atomic


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "sub" / "x.engine"
    write_atomic(target, b"engine-bytes")
    write_atomic(target.with_suffix(".md"), "text")
    assert target.read_bytes() == b"engine-bytes" and target.with_suffix(".md").read_text() == "text"

    def boom(*_args):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, b"new")
    with pytest.raises(OSError, match="disk full"):
        write_atomic(tmp_path / "y.engine", b"data")
    assert target.read_bytes() == b"engine-bytes" and not (tmp_path / "y.engine").exists()
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["x.engine", "x.md"]


def test_a_writer_that_raises_leaves_nothing_and_numpy_keeps_the_name(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "store.npz") as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(tmp_path / "store.npz") as tmp:
        np.savez(tmp, a=np.arange(3))  # savez appends .npz to a name without it: the temporary keeps it
    assert list(tmp_path.iterdir()) == [tmp_path / "store.npz"]
    assert np.load(tmp_path / "store.npz")["a"].tolist() == [0, 1, 2]
