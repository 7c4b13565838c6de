"""Data-parallel learning on the CPU: torchrun with 2 gloo ranks on the tiny job (`opd.benchmark.ddp_bench`)
against one process with twice the batch, and a launch without its rendezvous refused by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from opd.benchmark.ddp_bench import tiny_learner
from opd.distributed import all_min, any_rank, barrier, gather_to_main
from policies.config import PROJECT_ROOT

# DDP averages the two ranks' gradients where one process averages over the whole batch: the same sums in
# another order, so float32 rounding (~1e-7 relative) is all that may differ after a few Adam steps.
ATOL = 1e-5
STEPS = ["--updates", "3", "--warmup", "1", "--batch", "16", "--threads", "1"]


def job(args: list[str], ranks: int | None, **env: str) -> subprocess.CompletedProcess:
    """The tiny job under torchrun with `ranks` ranks, or under plain python (None)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    cmd = [*(launcher if ranks else [sys.executable]), "-m", "opd.benchmark.ddp_bench", *args]
    return subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, check=False)  # fmt: skip


def test_two_ranks_keep_the_same_weights_and_learn_as_one_process_with_twice_the_batch(
    tmp_path: Path,
) -> None:
    two = job([*STEPS, "--weights", str(tmp_path / "two")], ranks=2)
    assert two.returncode == 0, two.stderr[-3000:]
    one = job([*STEPS, "--batch", "32", "--weights", str(tmp_path / "one")], ranks=None)
    assert one.returncode == 0, one.stderr[-3000:]
    rank0, rank1, alone = (torch.load(tmp_path / d / f"rank{r}.pt") for d, r in (("two", 0), ("two", 1),
                                                                                 ("one", 0)))  # fmt: skip
    # each rank started from its own random weights: the same weights now mean rank 0's were broadcast
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    assert max((rank0[k] - alone[k]).abs().max().item() for k in rank0) < ATOL
    # and they learnt: the weights moved away from rank 0's start
    init = tiny_learner(16, torch.device("cpu"), seed=0).student.state_dict()
    assert max((rank0[k] - init[k]).abs().max().item() for k in rank0) > 100 * ATOL


def test_a_world_of_two_without_its_rendezvous_is_a_clear_error(tmp_path: Path) -> None:
    env = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "", "MASTER_PORT": ""}
    cmd = [sys.executable, "-m", "agent.cli", "train", "student", "--out", str(tmp_path / "run")]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, check=False)  # fmt: skip
    assert done.returncode != 0
    assert "MASTER_ADDR and MASTER_PORT" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_alone_the_collectives_are_this_process_own_values() -> None:
    cpu = torch.device("cpu")
    barrier()
    assert all_min(7, cpu) == 7 and any_rank(True, cpu) and not any_rank(False, cpu)
    assert gather_to_main({"a": 1}) == [{"a": 1}]
