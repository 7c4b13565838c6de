"""Where a training run writes, and who watches it: `runs/<job>/<name>-<time>` unless --out names the
directory (an existing one resumes), and, asked for and installed, a Weights & Biases run mirroring the
TensorBoard curves (`sync_tensorboard`: one logger in the code, two places to watch)."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RUNS = Path("runs")


def add_run_arguments(parser: argparse.ArgumentParser, job: str) -> None:
    parser.add_argument("--out", type=Path, help=f"output directory; an existing run resumes from it "
                        f"(default: {RUNS}/{job}/NAME-YYYYmmdd-HHMMSS, a new run)")  # fmt: skip
    parser.add_argument("--name", help="the run's name in its default directory (default: the config's)")
    parser.add_argument("--wandb", action="store_true", help="also log to Weights & Biases (pip install "
                        "wandb; WANDB_MODE=offline works without an account): the TensorBoard curves, the "
                        "resolved config")  # fmt: skip
    parser.add_argument("--wandb-project", default="agent", help="the W&B project")


def run_dir(args: argparse.Namespace, job: str, name: str, ranks: int = 1) -> Path:
    """--out, else a new directory named by job, run name and start time. Ranks of one job would each
    read their own clock: they need --out to write one run."""
    if args.out is not None:
        return args.out
    if ranks > 1:
        raise ValueError(f"{ranks} ranks write one run: give --out DIR (each rank would name its own)")
    return RUNS / job / f"{args.name or name}-{time.strftime('%Y%m%d-%H%M%S')}"


@contextlib.contextmanager
def wandb_run(
    args: argparse.Namespace, out: Path, config: dict[str, Any], main: bool = True
) -> Iterator[None]:
    """A W&B run beside the training (rank 0's only) when --wandb asked for one; a clear error when W&B is
    not installed, before anything trains."""
    if not (args.wandb and main):
        yield
        return
    try:
        import wandb
    except ImportError:
        raise ValueError("--wandb needs Weights & Biases: pip install wandb (or leave --wandb out)") from None
    out.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=args.wandb_project, name=out.name, dir=str(out), config=config,
                     sync_tensorboard=True, resume="allow", id=out.name)  # fmt: skip
    try:
        yield
    finally:
        run.finish()
