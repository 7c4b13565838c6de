"""agent.executors.MultiThreadedExecutor: a handler waiting for a busy pool is queued once, and spinning
meanwhile waits instead of running flat out (rclpy's re-queues it on every spin: ros2/rclpy#1452)."""

from __future__ import annotations

import threading
import time

import pytest
from agent.executors import MultiThreadedExecutor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.context import Context
from rclpy.node import Node


# one worker on purpose: it is held, so the next handler must wait in the pool
@pytest.mark.filterwarnings("ignore:MultiThreadedExecutor is used with a single thread")
def test_a_handler_waiting_for_a_busy_pool_is_queued_once_and_spinning_waits(ros_context: Context) -> None:
    node = Node("pool_test", context=ros_context)
    executor = MultiThreadedExecutor(num_threads=1, context=ros_context)
    executor.add_node(node)
    release, ran = threading.Event(), []

    def hold() -> None:  # takes the pool's one worker until released
        holder.cancel()
        ran.append("hold")
        release.wait(5.0)

    holder = node.create_timer(0.001, hold, MutuallyExclusiveCallbackGroup())
    ticker = node.create_timer(0.001, lambda: ran.append("tick"), MutuallyExclusiveCallbackGroup())
    submitted = []
    submit = executor._executor.submit
    executor._executor.submit = lambda fn, *args: (submitted.append(args), submit(fn, *args))[1]
    try:
        deadline = time.monotonic() + 5.0
        while "hold" not in ran and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        assert ran == ["hold"]
        before, cpu, start = len(submitted), time.thread_time(), time.monotonic()
        while time.monotonic() - start < 0.3:  # the ticker's handler is queued behind the held worker
            executor.spin_once(timeout_sec=0.01)
        spun_cpu_s = time.thread_time() - cpu
        assert len(submitted) - before <= 1, len(submitted) - before  # rclpy's: one per spin
        assert spun_cpu_s < 0.15, spun_cpu_s  # rclpy's: the whole 0.3 s
        release.set()
        deadline = time.monotonic() + 5.0
        while "tick" not in ran and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        assert "tick" in ran  # the queued handler ran once a worker was free
    finally:
        release.set()
        ticker.cancel()
        executor.shutdown()
        node.destroy_node()
