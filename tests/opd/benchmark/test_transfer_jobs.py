"""The transfer benchmark's job graph: which jobs, after which, holding what."""

from __future__ import annotations

from pathlib import Path

import pytest

from opd.benchmark.transfer import TransferBenchmark, TransferConfig
from opd.benchmark.transfer_jobs import JobResources, transfer_jobs
from policies.config import ConfigError


def test_each_seed_pretrains_then_trains_each_method_then_evaluates_it(tmp_path: Path) -> None:
    cfg = TransferConfig.from_dict({
        "methods": ["sim_only", "opd"], "train_config": "opd/configs/student_quick.yaml", "seeds": [0, 7],
        "pretrain": {"train_config": "opd/configs/student.yaml"},
    })  # fmt: skip
    jobs = transfer_jobs(TransferBenchmark(cfg, tmp_path), JobResources(train_gpus=1, eval_cpus=3))
    after = {j.name: j.after for j in jobs}
    assert after == {
        "teacher/eval": (), "teacher/eval_clean": (),
        **{k: v for s in (0, 7) for k, v in {
            f"seed{s}/pretrain": (),
            f"seed{s}/sim_only/train": (f"seed{s}/pretrain",),
            f"seed{s}/sim_only/eval": (f"seed{s}/sim_only/train",),
            f"seed{s}/sim_only/eval_clean": (f"seed{s}/sim_only/train",),
            f"seed{s}/opd/train": (f"seed{s}/pretrain",),
            f"seed{s}/opd/eval": (f"seed{s}/opd/train",),
        }.items()},
    }  # fmt: skip
    names = [j.name for j in jobs]
    assert all(names.index(a) < names.index(j.name) for j in jobs for a in j.after)  # an order that runs
    held = {j.name: (j.cpus, j.gpus, j.stoppable) for j in jobs}
    # a training holds its config's torch threads (the pretrain's student.yaml: 2, the methods' quick: 1)
    assert held["seed7/pretrain"] == (2, 1.0, True) and held["seed7/opd/train"] == (1, 1.0, True)
    assert held["seed7/opd/eval"] == held["teacher/eval"] == (3, 0.0, False)


def test_without_pretrain_or_clean_references_the_methods_start_at_once(tmp_path: Path) -> None:
    cfg = TransferConfig.from_dict({"methods": ["sim_only"], "train_config": "opd/configs/student_quick.yaml",
                                    "clean_reference": False})  # fmt: skip
    jobs = transfer_jobs(TransferBenchmark(cfg, tmp_path), JobResources())
    assert {j.name: j.after for j in jobs} == {
        "teacher/eval": (), "seed0/sim_only/train": (), "seed0/sim_only/eval": ("seed0/sim_only/train",),
    }  # fmt: skip


def test_resources_refuse_negative_gpus() -> None:
    with pytest.raises(ConfigError, match="train_gpus"):
        JobResources.from_dict({"train_gpus": -1}, "--train-gpus")
