"""CPU time per thread of this process: what each node of an in-process graph costs.

Each node of `agent.bringup` runs on an executor thread of its own, named after it, and the simulator on
the robot thread, so a thread's CPU time is a node's. Read from the thread's own CPU clock
(`pthread_getcpuclockid`: nanoseconds, where /proc/self/task/<tid>/stat counts 10 ms ticks). Threads the
interpreter did not start (Fast DDS's, ONNX Runtime's pools) are in the process's total only.
"""

from __future__ import annotations

import threading
import time

PROCESS = "process"  # the key of the whole process's CPU time (every thread, Python's or not)


def cpu_times_s() -> dict[str, float]:
    """CPU time of each live Python thread by name, and of the whole process under `PROCESS`, s.

    Threads of one name are summed. A thread that ends while it is read is left out.
    """
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        try:
            cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, TypeError):  # ended meanwhile, or not started (ident None)
            continue
        out[thread.name] = out.get(thread.name, 0.0) + cpu
    out[PROCESS] = time.process_time()
    return out


def cpu_since_s(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU time of each thread between two `cpu_times_s` readings, s (a thread started since from 0)."""
    return {name: after[name] - before.get(name, 0.0) for name in after}
