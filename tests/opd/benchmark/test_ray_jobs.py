"""Jobs on a local Ray cluster of 2 CPUs: results flow along the graph, a job that raises is reported by
name and not run again, a died worker is retried a bounded number of times, a stopped job stops the run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from opd.benchmark.jobs import Job
from opd.benchmark.ray_jobs import JobFailed, run_jobs

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    yield cluster.address
    cluster.shutdown()


def count_run(state: Path, name: str) -> int:
    """How many times job `name` ran, this run included: a line per run in state/name (the runs are
    other processes)."""
    with (state / name).open("a") as f:
        f.write("run\n")
    return len((state / name).read_text().splitlines())


def dies_first(state: Path) -> int:
    if count_run(state, "dies_first") == 1:
        os._exit(1)  # the worker dies mid-job, as when killed for memory
    return 41


def add_one(state: Path, value: int) -> int:
    count_run(state, "add_one")
    (state / "result").write_text(str(value + 1))
    return value + 1


def raises(state: Path) -> int:
    count_run(state, "raises")
    raise ValueError("the config says no")


def dies(state: Path) -> int:
    count_run(state, "dies")
    os._exit(1)


def test_a_died_worker_is_retried_and_its_result_flows_to_the_next_job(address: str, tmp_path: Path) -> None:
    jobs = [Job("seed0/opd/train", dies_first), Job("seed0/opd/eval", add_one, ("seed0/opd/train",))]
    assert run_jobs(jobs, tmp_path, address, max_retries=1)
    assert (tmp_path / "result").read_text() == "42"
    assert count_run(tmp_path, "dies_first") == 3  # two runs, then this call


def test_a_job_that_raises_is_reported_by_name_and_not_run_again(address: str, tmp_path: Path) -> None:
    jobs = [Job("teacher/eval", partial(count_run, name="teacher")), Job("seed0/opd/train", raises),
            Job("seed0/opd/eval", add_one, ("seed0/opd/train",))]  # fmt: skip
    with pytest.raises(JobFailed, match=r"job seed0/opd/train raised ValueError: the config says no"):
        run_jobs(jobs, tmp_path, address, max_retries=2)
    assert count_run(tmp_path, "raises") == 2  # once, then this call
    assert not (tmp_path / "add_one").exists()  # what came after it never ran


def test_a_worker_that_keeps_dying_is_reported_after_its_retries(address: str, tmp_path: Path) -> None:
    with pytest.raises(JobFailed, match=r"job seed1/pretrain failed: its worker died, and again in 1 retr"):
        run_jobs([Job("seed1/pretrain", dies)], tmp_path, address, max_retries=1)
    assert count_run(tmp_path, "dies") == 3  # the run and one retry, then this call


def test_a_stopped_training_job_stops_the_run(address: str, tmp_path: Path) -> None:
    assert not run_jobs([Job("seed0/pretrain", lambda state: None, stoppable=True)], tmp_path, address)
    assert run_jobs([Job("teacher/eval", lambda state: None)], tmp_path, address)  # None: its result
