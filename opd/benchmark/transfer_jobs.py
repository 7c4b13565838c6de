"""The transfer benchmark as a graph of jobs, for an executor that runs them apart (`opd.benchmark.ray_jobs`).

Per training seed s: `seed<s>/pretrain` (with `pretrain`: the sim-trained start, trained and evaluated),
then per method `seed<s>/<method>/train` (from that start) and `seed<s>/<method>/eval` (its student on the
proxy), and with `clean_reference` `seed<s>/sim_only/eval_clean`; once, `teacher/eval` and
`teacher/eval_clean`. Each job is one of `TransferBenchmark`'s own steps, so it keeps its result where
`TransferBenchmark.run` looks for it and skips what is kept there; the report is then `run()` on the kept
results, the same report as `run()` alone would have made (it trains and evaluates nothing more).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from pydantic import Field

from opd.benchmark.jobs import Job
from opd.benchmark.transfer import TransferBenchmark
from policies.config import Config


class JobResources(Config):
    """What each job reserves where an executor schedules them (a Ray cluster)."""

    # GPUs each training job holds, GPUs (Ray sets CUDA_VISIBLE_DEVICES to them); 0: the student trainer
    # learns on the CPU, with its config's `threads` (the CPUs a training job holds)
    train_gpus: float = Field(0.0, ge=0)
    eval_cpus: int = Field(1, ge=1)  # CPU threads each evaluation job holds, threads


def transfer_jobs(bench: TransferBenchmark, resources: JobResources) -> list[Job]:
    """The benchmark's jobs, each after the jobs whose results it takes (so in an order that runs them)."""
    cfg = bench.cfg
    evaluation = {"cpus": resources.eval_cpus}
    jobs = [Job("teacher/eval", partial(_teacher, proxy=True), **evaluation)]
    if cfg.clean_reference:
        jobs.append(Job("teacher/eval_clean", partial(_teacher, proxy=False), **evaluation))
    for seed in cfg.seeds:
        after: tuple[str, ...] = ()
        if cfg.pretrain is not None:
            after = (f"seed{seed}/pretrain",)
            threads = cfg.pretrain_train(seed).threads
            jobs.append(Job(after[0], partial(_start, seed=seed), (), threads, resources.train_gpus, True))
        for method in cfg.methods:
            name, threads = f"seed{seed}/{method}", cfg.train(method, seed).threads
            train = partial(_train, method=method, seed=seed)
            jobs.append(Job(f"{name}/train", train, after, threads, resources.train_gpus, True))
            jobs.append(Job(f"{name}/eval", partial(_evaluate, method=method, seed=seed), (f"{name}/train",),
                            **evaluation))  # fmt: skip
            if method == "sim_only" and cfg.clean_reference:
                jobs.append(Job(f"{name}/eval_clean", partial(_clean, method=method, seed=seed),
                                (f"{name}/train",), **evaluation))  # fmt: skip
    return jobs


def _teacher(bench: TransferBenchmark, proxy: bool) -> dict[str, Any]:
    return bench.teacher_eval(proxy)


def _start(bench: TransferBenchmark, seed: int) -> Path | None:
    return bench.sim_trained_start(seed)


def _train(bench: TransferBenchmark, start: Path | None = None, *, method: str, seed: int) -> int | None:
    return bench.train_method(method, start, seed)


def _evaluate(bench: TransferBenchmark, steps: int, *, method: str, seed: int) -> dict[str, Any]:
    return bench.evaluate_method(method, steps, seed)


def _clean(bench: TransferBenchmark, trained: int, *, method: str, seed: int) -> dict[str, Any] | None:
    # `trained`: the training job's decisions, taken only to run after it
    return bench.clean_student(bench.run_dir(seed) / method)
