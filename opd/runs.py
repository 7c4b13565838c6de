"""What every training run and benchmark shares: the trainers' run (`run_resumably`), checkpoint names, JSON
files written atomically, the signals that stop a run at its next checkpoint, and the denormal flush its
updates run under."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from policies.files import write_atomic

log = logging.getLogger(__name__)


def run_resumably(
    out: Path,
    train: Callable[[Any, Callable[[], bool]], None],
    save_checkpoint: Callable[[], None],
    close: Callable[[], None],
    export: Callable[[], Path],
    steps: Callable[[], int],
    main: bool = True,
    stopped: Callable[[], bool] | None = None,
) -> Path | None:
    """A trainer's run, after its resume: `train(writer, stop)` with a TensorBoard writer in `out`/tb under
    the stop signals, a checkpoint whatever ended it, the envs closed (`close`) even on an error; then the
    final `export`, or None when a signal stopped it (the same command resumes). `main`: this process
    logs; the other ranks of a job get no writer (None). `stopped`: whether a signal stopped training as
    the ranks of a job agree (one may have heard it, the others not); default: this process's signals."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(out / "tb")) if main else None
    try:
        with stop_on_signals() as stop:
            train(writer, stop)
        save_checkpoint()
    finally:
        if writer is not None:
            writer.close()
        close()
    if (stopped or stop)():
        log.info("stopped at step %d; rerun the same command to resume", steps())
        return None
    return export()


def check_world_size(checkpoint: Path, state: dict[str, Any], ranks: int, owns: str) -> None:
    """A resume needs the world size that wrote `checkpoint`: each rank resumes its own `owns` (its envs
    and their store or buffer). A ValueError naming both sizes otherwise."""
    size = int(state.get("world_size", 1))  # 1: a checkpoint older than the field
    if size != ranks:
        raise ValueError(
            f"{checkpoint} was written by a job of {size} rank{'s' if size != 1 else ''} and this one has "
            f"{ranks}: each rank resumes its own {owns}, so resume with {size} (torchrun --nproc-per-node, "
            "or nodes x tasks under srun), or use another --out"
        )


@contextmanager
def phase_progress(label: str, total: int, unit: str) -> Iterator[Callable[[int], None]]:
    """A phase of a run (demonstrations, an evaluation) as a rich progress bar of its own; yields
    `advance(done)`. A phase of 0 shows nothing. (Inside a loop's live bar, show it on that bar: rich
    allows one live display at a time.)"""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    if total <= 0:
        yield lambda done: None
        return
    count = TextColumn("{task.completed:,}/{task.total:,} " + unit)
    columns = (TextColumn(f"[bold]{label}"), BarColumn(), count, TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, refresh_per_second=2) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


@contextmanager
def stop_on_signals() -> Iterator[Any]:
    """Turn SIGINT/SIGTERM into a request the training loop polls (a checkpoint, then a clean exit).

    Yields a callable that is True once a signal arrived. A second SIGINT interrupts at once.
    """
    received: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        received.append(signum)
        log.warning("received %s: stopping after this step with a checkpoint", signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: bool(received)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def flushed_denormals() -> Iterator[None]:
    """Denormal floats flushed to zero on this thread while training, restored after.

    Adam drives some weights into denormal floats, which made every forward pass ~10x slower on the CPU
    after the first updates (measured: 25 -> 246 ms per encoded step of 8 envs). The flag is the thread's
    floating-point state: left set, it would change float behaviour for everything else the process runs.
    """
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def checkpoint_path(ckpt_dir: Path, step: int) -> Path:
    """The checkpoint written at `step` decisions (zero-padded: names sort by step)."""
    return ckpt_dir / f"step_{step:09d}.pt"


def checkpoints(ckpt_dir: Path) -> list[Path]:
    """A run's checkpoints, oldest first."""
    return sorted(ckpt_dir.glob("step_*.pt"))


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file, or None when it does not exist."""
    return json.loads(path.read_text()) if path.is_file() else None


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically: a temporary file beside it, then rename (a crash never leaves half a file)."""
    write_atomic(path, json.dumps(data, indent=2) + "\n")
