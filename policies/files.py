"""Files written atomically: a temporary file beside the target, then a rename over it, so a kill mid-write
leaves the old file or the new one, never half of one (checkpoints, stores, configs, reports, engines)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` (same suffix: numpy's savez keeps a name ending in .npz) for the
    caller to write; renamed over `path` when the block ends, removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write text or bytes to `path` atomically, flushed to the disk before the rename."""
    with atomic_path(path) as tmp, tmp.open("wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
