"""The process group of a job of several ranks (`opd.world.World`): joined at the start, left at the end,
and the few collective steps the trainers take. In a world of one every function here is a no-op, so a
trainer runs the same code under `python`, `torchrun` and `srun`.

Backends: NCCL between GPUs, gloo between CPUs (torch.distributed's own; no hand-made transport).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from opd.world import World

TIMEOUT = timedelta(minutes=30)  # a rank waits this long for the others (a checkpoint of a 1 GB store)


@contextmanager
def process_group(world: World, device: torch.device) -> Iterator[None]:
    """Join the job's process group for the block (env:// rendezvous at MASTER_ADDR:MASTER_PORT, which
    `World.from_env` checked), NCCL on a GPU, else gloo; leave it after, whatever ended the block."""
    if not world.distributed:
        yield
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's collectives and gather_object run on this rank's GPU
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method="env://",
        rank=world.rank,
        world_size=world.size,
        timeout=TIMEOUT,
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def active() -> bool:
    """A process group of several ranks is joined."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Wait for every rank (no-op alone)."""
    if active():
        dist.barrier()


def all_min(value: int, device: torch.device) -> int:
    """The smallest of every rank's `value`: a decision all ranks must take alike (DDP needs every rank in
    every update), from counts that differ between ranks (samples in each rank's own store)."""
    if not active():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank once any rank's `flag` is: a stop the ranks take at the same step."""
    if not active():
        return flag
    t = torch.tensor([int(flag)], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def gather_to_main(obj: Any) -> list[Any] | None:
    """Every rank's `obj` on rank 0, in rank order (None on the others); `[obj]` alone."""
    if not active():
        return [obj]
    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def all_gather(obj: Any) -> list[Any]:
    """Every rank's `obj` on every rank, in rank order; `[obj]` alone. For what every rank must compute
    alike from every rank's data (statistics), once in a while: it pickles."""
    if not active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_gather_rows(rows: np.ndarray, device: torch.device) -> np.ndarray:
    """Every rank's `rows` (the same shape and dtype on each), concatenated in rank order along the first
    axis, on every rank; `rows` alone. Shape: (R, ...) -> (ranks x R, ...). Each step's (tensors through
    `device`: NCCL's collectives run on the GPU)."""
    if not active():
        return rows
    mine = torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    return torch.cat(parts).cpu().numpy()
