"""The two jobs `test_teacher_ranks.py` runs under `python` (one rank) and `torchrun --nproc-per-node 2`
(gloo), each rank writing what it learnt to DIR/rank<R>.pt:

    sac DIR --batch B    one behaviour-cloning and three SAC updates of a tiny hybrid SAC; update u's batch is
                         one global batch of WORLD_SIZE x B synthetic rows from seed u, and each rank learns
                         on its own slice (as `opd.benchmark.ddp_bench` does for the student)
    job DIR              a tiny teacher training job (`TeacherTrainer`) in DIR/run

The SAC losses sample the parameters' Gaussian noise (`torch.randn_like`); here it is a function of each
row's own values instead, so that a row draws the same noise on one process and on its rank.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from opd.distributed import process_group
from opd.teacher.hybrid_sac import HybridSAC, SACConfig
from opd.teacher.replay_buffer import Batch
from opd.world import World
from policies.export import DEFAULT_CONTRACT
from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy

OBS_DIM, TERMS = 6, 3
TINY_JOB: dict[str, Any] = {
    "num_envs": 2,
    "total_steps": 48,  # env steps over both ranks: 12 vector steps of each rank's 2 envs
    "learning_starts": 16,
    "actor_starts": 24,
    "updates_per_step": 0.5,  # one update per vector step
    "checkpoint_every": 24,
    "log_every": 24,
    "device": "cpu",
    "teacher": {"hidden": [16]},
    "sac": {"batch_size": 16, "critic_hidden": [16]},
    "reward": {"breaker_warmup": 10, "pause_updates": 0},  # armed (its window and trips alike too)
    "demos": {"episodes": 2, "bc_updates": 4},  # one episode per rank
}


def row_noise(x: torch.Tensor, **_: Any) -> torch.Tensor:
    """Stands in for N(0, 1) noise: the same rows, the same noise, on any rank."""
    return torch.sin(1000.0 * x.detach())


def global_batch(contract: SkillContract, rows: int, seed: int) -> Batch:
    """`rows` synthetic transitions from `seed` (the same on every rank)."""
    rng = np.random.default_rng(seed)
    lay = contract.layout
    t = torch.from_numpy
    return Batch(
        t(rng.standard_normal((rows, OBS_DIM), np.float32)),
        t(rng.integers(0, contract.num_skills, rows)),
        t(rng.uniform(lay.low, lay.high, (rows, lay.size)).astype(np.float32)),
        t(rng.standard_normal((rows, TERMS), np.float32)),
        t(rng.standard_normal((rows, OBS_DIM), np.float32)),
        t((rng.random(rows) < 0.2).astype(np.float32)),
    )


def sac_updates(world: World, batch: int) -> dict[str, Any]:
    """The learner's state after one BC and three SAC updates on this rank's slices."""
    torch.randn_like = row_noise  # type: ignore[assignment]
    contract = SkillContract.load(DEFAULT_CONTRACT)
    torch.manual_seed(1000 * world.rank)  # each rank its own initial weights: DDP must broadcast rank 0's
    actor = TeacherPolicy(OBS_DIM, contract, TeacherConfig(hidden=[16]))
    sac = HybridSAC(actor, SACConfig(batch_size=batch, critic_hidden=[16], lr_alpha=0.1), torch.ones(TERMS))
    if world.distributed:
        sac.distribute()
    mine = slice(world.rank * batch, (world.rank + 1) * batch)
    for u in range(4):
        b = global_batch(contract, batch * world.size, seed=u)
        b = Batch(
            *(getattr(b, f)[mine] for f in ("obs", "skill", "params", "terms", "next_obs", "terminated"))
        )
        sac.bc_update(b) if u == 0 else sac.update(b)
    return sac.state_dict()


def teacher_job(world: World, out: Path) -> dict[str, Any]:
    """A tiny teacher run in `out`: its learner's and its normalisers' state on this rank."""
    from opd.teacher.trainer import TeacherTrainConfig, TeacherTrainer

    trainer = TeacherTrainer(TeacherTrainConfig.from_dict(TINY_JOB), out, world)
    assert trainer.run() == out / "teacher.pt"
    return {"sac": trainer.sac.state_dict(), "normalizer": trainer.normalizer.state_dict(),
            "replay": torch.from_numpy(trainer.buffer.obs[: len(trainer.buffer)].copy())}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["sac", "job"])
    p.add_argument("dir", type=Path)
    p.add_argument("--batch", type=int, default=8, help="rows per rank per update (sac)")
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    world = World.from_env()
    torch.set_num_threads(1)
    with process_group(world, torch.device("cpu")):
        state = sac_updates(world, args.batch) if args.what == "sac" else teacher_job(world, args.dir / "run")
    args.dir.mkdir(parents=True, exist_ok=True)
    torch.save(state, args.dir / f"rank{world.rank}.pt")


if __name__ == "__main__":
    main()
