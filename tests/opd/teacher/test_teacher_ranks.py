"""The teacher on two gloo ranks (torchrun): hybrid SAC's data-parallel update is one process's update on
both ranks' batches, and a training job keeps every rank's weights, targets, temperatures and normalisers
alike while each rank steps its own envs; a resume under another world size is refused by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from opd.teacher.trainer import TeacherTrainConfig, TeacherTrainer
from opd.world import World
from policies.config import PROJECT_ROOT

WORKER = Path(__file__).with_name("teacher_ranks.py")
# DDP averages the two ranks' gradients where one process averages over the whole batch: the same sums in
# another order, so float32 rounding (~1e-7 relative) is all that may differ after four Adam steps.
ATOL = 1e-5
LEARNT = ("actor", "anchor", "q1", "q2", "q1_target", "q2_target")


def worker(args: list[str], ranks: int | None) -> None:
    """teacher_ranks.py under torchrun with `ranks` ranks, or under plain python (None)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    cmd = [*(launcher if ranks else [sys.executable]), str(WORKER), *args]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def tensors(state: dict) -> dict[str, torch.Tensor]:
    """The learnt tensors of a `HybridSAC.state_dict`, by dotted name."""
    out = {f"{net}.{k}": v for net in LEARNT for k, v in state[net].items()}
    return {**out, "log_alpha_skill": state["log_alpha_skill"], "log_alpha_param": state["log_alpha_param"]}


def test_a_data_parallel_update_is_one_process_update_on_both_ranks_batches(tmp_path: Path) -> None:
    worker(["sac", str(tmp_path / "two"), "--batch", "8"], ranks=2)
    worker(["sac", str(tmp_path / "one"), "--batch", "16"], ranks=None)
    rank0, rank1, alone = (tensors(torch.load(tmp_path / d / f"rank{r}.pt"))
                           for d, r in (("two", 0), ("two", 1), ("one", 0)))  # fmt: skip
    # each rank started from its own random weights: the same weights now mean rank 0's were broadcast
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    assert max((rank0[k] - alone[k]).abs().max().item() for k in rank0) < ATOL
    assert rank0["log_alpha_skill"].abs().item() > 100 * ATOL  # the temperatures learnt (from log 1 = 0)


def test_two_ranks_train_alike_from_their_own_envs_and_resume_only_as_two(tmp_path: Path) -> None:
    worker(["job", str(tmp_path)], ranks=2)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert rank0["sac"]["updates"] == rank1["sac"]["updates"] > 0
    a, b = tensors(rank0["sac"]), tensors(rank1["sac"])
    assert all(torch.equal(a[k], b[k]) for k in a)  # the norm's statistics are in the actor's state
    for key, value in rank0["normalizer"].items():
        assert torch.equal(torch.as_tensor(value), torch.as_tensor(rank1["normalizer"][key])), key
    assert rank0["normalizer"]["trips"] > 0  # the breaker was armed, and tripped alike on both ranks
    assert not torch.equal(rank0["replay"], rank1["replay"])  # each rank stepped its own envs
    run = tmp_path / "run"
    ckpt = torch.load(run / "checkpoints" / "step_000000048.pt", weights_only=True)
    assert ckpt["world_size"] == 2 and len(ckpt["ranks"]) == 2
    assert (run / "checkpoints" / "replay.rank1.npz").is_file() and (run / "teacher.pt").is_file()

    cfg = TeacherTrainConfig.from_yaml(run / "config.yaml")
    with pytest.raises(ValueError, match="written by a job of 2 ranks and this one has 1"):
        TeacherTrainer(cfg, run, World()).run()
