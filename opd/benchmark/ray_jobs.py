"""A graph of jobs (`opd.benchmark.jobs.Job`) run as Ray tasks, on a cluster or on this machine.

Each job is one task holding its declared CPUs and GPUs; a job's inputs are the ObjectRefs of the jobs it
comes after, so Ray starts it once they are done and runs the rest side by side as resources allow.

Retries: a task whose worker died (killed for memory, its node lost or preempted, a crash in native code)
is run again, `max_retries` times at most (Ray's `max_retries`; Ray logs each retry), and resumes from the
job's last checkpoint: the machine failed, not the job. A job that raises is not run again (Ray's
`retry_exceptions` stays off): an exception is the code's or the config's (a bug, a refused config), and a
rerun would raise it again; it is reported at once with the job's name. A job writes its result whole and
last (`write_json`, atomic), so a job killed halfway leaves no result that counts: the next run redoes it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from opd.benchmark.jobs import Job

log = logging.getLogger(__name__)

MAX_RETRIES = 2  # runs more of a job whose worker died: a lost node or an OOM kill, not a pattern


class JobFailed(RuntimeError):
    """A job raised, or its worker died more than `max_retries` times; the message names the job."""


class JobStopped(Exception):
    """A training job was stopped by SIGINT/SIGTERM after a checkpoint (the same command resumes it)."""


def run_jobs(
    jobs: list[Job], state: Any, address: str | None = None, num_cpus: int | None = None,
    max_retries: int = MAX_RETRIES,
) -> bool:  # fmt: skip
    """Run every job of `jobs` (each after the jobs it names, listed before it) as a Ray task, each called
    with `state` and the results of its jobs after; True when all finished, False when a training job was
    stopped. Ray is the cluster at `address` (else at RAY_ADDRESS), else one started on this machine with
    `num_cpus` CPUs (None: all of them). Raises JobFailed, naming the job, at the first job that fails."""
    ray.init(address=address, num_cpus=num_cpus, include_dashboard=False)
    try:
        shared = ray.put(state)
        refs: dict[str, ray.ObjectRef] = {}
        level = logging.getLogger().getEffectiveLevel()
        for job in jobs:
            task = _execute.options(
                name=job.name, num_cpus=job.cpus, num_gpus=job.gpus, max_retries=max_retries
            )
            refs[job.name] = task.remote(job, level, shared, *(refs[name] for name in job.after))
        names = {ref: name for name, ref in refs.items()}
        pending = list(refs.values())
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except JobStopped:
                log.warning("%s was stopped; rerun the same command to resume it", names[done[0]])
                return False
            except RayError as err:
                raise failure(names[done[0]], err, max_retries) from None
            log.info("%s: done (%d of %d jobs left)", names[done[0]], len(pending), len(jobs))
        return True
    finally:
        ray.shutdown()


def failure(name: str, err: RayError, max_retries: int) -> JobFailed:
    """The one-line report of job `name`'s failure (its traceback logged at debug level, `agent -v`)."""
    log.debug("%s failed: %s", name, err)
    if isinstance(err, RayTaskError):
        return JobFailed(f"job {name} raised {type(err.cause).__name__}: {err.cause}")
    return JobFailed(f"job {name} failed: its worker died, and again in {max_retries} retries "
                     f"({type(err).__name__})")  # fmt: skip


@ray.remote
def _execute(job: Job, level: int, state: Any, *inputs: Any) -> Any:
    """Job `job` in a Ray worker: its log lines at the driver's `level`, its progress on stderr (as
    `agent eval transfer` keeps stdout for the results); JobStopped when a training job was stopped."""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")  # Ray prefixes the job
    with contextlib.redirect_stdout(sys.stderr):
        result = job.run(state, *inputs)
    if result is None and job.stoppable:
        raise JobStopped(job.name)
    return result
