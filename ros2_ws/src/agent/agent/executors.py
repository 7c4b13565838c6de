"""rclpy's MultiThreadedExecutor without its busy loop while a handler waits in the thread pool.

rclpy hands out a handler again on every `spin_once` until a worker starts running it (ros2/rclpy#1452,
fixed upstream by #1547, not in the kilted 9.1.x wheels). While the pool's threads are busy, `spin_once`
then returns at once, re-queues the same handler and appends it to a list it scans on every call: the
spinning thread runs flat out and holds the interpreter lock, and the workers, which release it on every
system call, wait for it. Measured on this 2-core host: ~3,000 spins per second and the list past 4,000
entries within a second; callbacks that make file-system calls (rclpy's logger looks up its caller's source
file) or a first import held up for seconds, so watchdogs fired seconds late. Over four runs of the policy
and opd node tests, a thread that wakes every 20 ms saw 67 pauses over 0.5 s (the longest 2.6 s) with
rclpy's executor and none with this one (the longest 0.46 s); the runs took 67-90 s against 50-56 s.

This one submits a handler once and, while it is still queued, waits (without the lock) until a worker
takes one up instead of spinning. Use it wherever a MultiThreadedExecutor is wanted; drop it once the ROS
wheels carry the fix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from threading import Condition
from typing import Any

from rclpy import executors
from rclpy.executors import (
    ConditionReachedException,
    Executor,
    ExternalShutdownException,
    ShutdownException,
    TimeoutException,
)

DRAIN_S = 0.05  # time given to an executor's queued handlers before it shuts down, s
QUEUED_WAIT_S = 0.01  # longest a spin waits for a queued handler to be taken up before it returns, s


class MultiThreadedExecutor(executors.MultiThreadedExecutor):
    """Runs callbacks in a pool of threads; each ready handler is queued in the pool once."""

    def __init__(self, num_threads: int | None = None, *, context: Any = None) -> None:
        super().__init__(num_threads, context=context)
        self._queued: set[Any] = set()  # handlers submitted to the pool that no worker has started yet
        self._taken = Condition()  # notified whenever a worker starts one of them

    def _spin_once_impl(
        self, timeout_sec: Any = None, wait_condition: Callable[[], bool] = lambda: False
    ) -> None:
        try:
            handler, _, _ = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        with self._taken:
            if handler in self._queued:  # handed out again while it waits for a worker: wait, do not spin
                self._taken.wait(QUEUED_WAIT_S)
                return
            self._queued.add(handler)
        self._executor.submit(self._run, handler)
        self._futures.append(handler)
        for future in self._futures[:]:
            if future.done():
                self._futures.remove(future)
                future.result()  # raise any exception of a finished handler, as rclpy does

    def _run(self, handler: Callable[[], Any]) -> None:
        with self._taken:
            self._queued.discard(handler)
            self._taken.notify_all()
        handler()


def stop_executor(executor: Executor) -> None:
    """Remove every node, let queued handlers run out, then shut the executor down.

    rclpy's MultiThreadedExecutor.shutdown destroys its guard condition before its thread pool drains, and
    handlers still queued then fail on it ("cannot use Destroyable"); draining first avoids that.
    """
    for node in executor.get_nodes():
        executor.remove_node(node)
    time.sleep(DRAIN_S)  # the pool threads run what is queued; without nodes nothing new is queued
    executor.shutdown()
