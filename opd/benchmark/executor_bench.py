"""`agent bench executors`: one transfer benchmark made by the local executor and by Ray, the wall clock of
each and their ratio, measured in one run.

Each executor makes the whole benchmark (training, evaluations, report) in a fresh directory of its own,
the local one first; Ray starts on this machine with `workers` CPUs, so at most `workers` one-CPU jobs run
side by side, and its start is counted. On a CPU with fewer cores than the jobs' threads side by side, they
share the cores: Ray can then only lose (its start, a torch import per worker). The figure of record and
the arithmetic a cluster follows from it are in docs/cluster.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from opd.benchmark.ray_jobs import run_jobs
from opd.benchmark.transfer import TransferBenchmark, TransferConfig
from opd.benchmark.transfer_jobs import JobResources, transfer_jobs


def bench_executors(cfg: TransferConfig, work: Path, workers: int) -> dict[str, Any]:
    """Seconds of the local executor and of Ray with `workers` CPUs for the benchmark `cfg` (each in its
    own directory under `work`), their ratio, and whether they made the same results."""
    t0 = time.perf_counter()
    local = TransferBenchmark(cfg, work / "local").run()
    local_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    bench = TransferBenchmark(cfg, (work / "ray").resolve())  # absolute: Ray's workers run elsewhere
    jobs = transfer_jobs(bench, JobResources())
    finished = run_jobs(jobs, bench, address="local", num_cpus=workers)
    on_ray = bench.run() if finished else None
    ray_s = time.perf_counter() - t0
    if local is None or on_ray is None:
        raise RuntimeError("the benchmark was stopped (SIGINT/SIGTERM): no figure")
    return {
        "workers": workers,
        "jobs": len(jobs),
        "local_s": round(local_s, 1),
        "ray_s": round(ray_s, 1),
        "local_over_ray": round(local_s / ray_s, 3),  # > 1: Ray was faster
        "same_results": results(local) == results(on_ray),
    }


def results(report: Any) -> Any:
    """A report less every `wall_clock_s` (how long a training took): what two runs of it must share."""
    if isinstance(report, dict):
        return {k: results(v) for k, v in report.items() if k != "wall_clock_s"}
    return report
