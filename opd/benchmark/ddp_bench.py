"""The tiny distributed learner job: data-parallel updates of a tiny student on synthetic batches, run
unchanged under `python` (one rank) and `torchrun --nproc-per-node N` (N ranks, DDP).

Update u's batch is one global batch of WORLD_SIZE x `batch` rows drawn from seed + u, and each rank learns
on its own slice: N ranks then take the steps one process takes on the whole global batch, which is how the
tests check DDP (weights the same on every rank, and those of one process with N times the batch). Each
rank starts from its own random weights: equal weights after the first step mean rank 0's were broadcast.

`agent bench ddp` times it (samples per second, summed over ranks) for 1 rank and for N.

    torchrun --standalone --nproc-per-node 2 -m opd.benchmark.ddp_bench --updates 20 --json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from opd.distill.config import OPDConfig
from opd.distill.learner import OnlineDistillation
from opd.distributed import process_group
from opd.world import DEVICE_CHOICES, World, torch_device
from policies.export import DEFAULT_CONTRACT
from policies.skill_contract import SkillContract
from policies.student_policy import StudentConfig, StudentPolicy
from policies.teacher_policy import TeacherConfig, TeacherPolicy

STATE_DIM = 6  # the synthetic teacher's privileged state width
TINY_STUDENT = {
    "encoder": {
        "image": {"backbone": "resnet18", "stages": 1, "height": 32, "width": 32},
        "imu": {"window": 32, "conv_channels": [8, 16]},
        "fusion": {"dim": 32, "heads": 4, "queries": 2},
        "embed_dim": 32,
    },
    "head": {"hidden": [64, 64]},
}


def tiny_learner(
    batch: int, device: torch.device, seed: int, train_encoder: bool = False
) -> OnlineDistillation:
    """A learner of the tiny student with batch size `batch`; its encoder fixed (it learns from embeddings)
    unless `train_encoder`."""
    torch.manual_seed(seed)
    contract = SkillContract.load(DEFAULT_CONTRACT)
    teacher = TeacherPolicy(STATE_DIM + contract.num_skills, contract, TeacherConfig(hidden=[16]))
    distill = {"train_encoder": train_encoder, "batch_size": batch, "capacity": batch, "image_shift_px": 0}
    cfg = OPDConfig.from_dict({"distill": distill})
    student = StudentPolicy(StudentConfig.from_dict(TINY_STUDENT), contract)
    return OnlineDistillation(student, teacher, cfg, 1, seed=seed, device=device)


def global_batch(learner: OnlineDistillation, rows: int, seed: int) -> dict[str, torch.Tensor]:
    """`rows` synthetic store rows from `seed` (the same on every rank), with unit weights. Masks are all
    on, so each loss's mean over the rows is the mean of its slices' means (as DDP averages them)."""
    rng = np.random.default_rng(seed)
    k = learner.contract.num_skills
    out: dict[str, torch.Tensor] = {}
    for key, (shape, dtype) in learner.sample_shapes().items():
        if key == "teacher_skill":
            a = rng.integers(0, k, rows)
        elif dtype == np.float32:
            a = rng.standard_normal((rows, *shape)).astype(np.float32)
        elif dtype == np.bool_:
            a = np.ones((rows, *shape), np.bool_)
        else:  # frame ids
            a = np.zeros((rows, *shape), dtype)
        out[key] = torch.from_numpy(a)
    out["weight"] = torch.ones(rows)
    return out


def run(
    world: World, device: torch.device, batch: int, updates: int, warmup: int, seed: int
) -> dict[str, Any]:
    """`warmup` untimed then `updates` timed data-parallel steps; samples/s over all ranks, and the
    learner (its weights) after them."""
    learner = tiny_learner(batch, device, seed + 1000 * world.rank)  # each rank's own initial weights
    if world.distributed:
        learner.distribute()
    times = []
    for u in range(warmup + updates):
        b = global_batch(learner, batch * world.size, seed + u)
        mine = {k: v[world.rank * batch : (world.rank + 1) * batch] for k, v in b.items()}  # (B, ...)
        t0 = time.perf_counter()
        learner.learn_on(mine)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    seconds = sum(times[warmup:])
    return {
        "ranks": world.size,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "batch_per_rank": batch,
        "updates": updates,
        "seconds": round(seconds, 4),
        "samples_per_s": round(batch * world.size * updates / seconds, 1),
        "learner": learner,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m opd.benchmark.ddp_bench", description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=64, help="rows per rank per update")
    p.add_argument("--updates", type=int, default=20, help="timed updates")
    p.add_argument("--warmup", type=int, default=3, help="untimed updates first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads per rank (default: torch's)")
    p.add_argument("--device", default="cpu", help=DEVICE_CHOICES)
    p.add_argument("--weights", type=Path, help="write each rank's student weights to DIR/rank<R>.pt")
    p.add_argument("--json", action="store_true", help="rank 0 prints one JSON object")
    args = p.parse_args(argv)
    if min(args.batch, args.updates) < 1 or args.warmup < 0:
        p.error("--batch and --updates must be at least 1, --warmup at least 0")
    world = World.from_env()
    device = torch_device(args.device, world)
    if args.threads:
        torch.set_num_threads(args.threads)
    with process_group(world, device):
        out = run(world, device, args.batch, args.updates, args.warmup, args.seed)
        learner = out.pop("learner")
        if args.weights:
            args.weights.mkdir(parents=True, exist_ok=True)
            state = {k: v.cpu() for k, v in learner.student.state_dict().items()}
            torch.save(state, args.weights / f"rank{world.rank}.pt")
    if world.is_main:
        print(json.dumps(out) if args.json else out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
