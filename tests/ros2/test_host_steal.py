"""The host steal monitor: /proc/stat parsing and crediting steal to time windows."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from agent.commands.bench import host_figures
from agent.host_steal import PROC_STAT, StealMonitor, read_steal_s

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def test_reads_the_steal_column_of_the_cpu_line(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    #                user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  2557584 578797 252286 2829431 17698 0 3851 39759 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert read_steal_s(stat) == pytest.approx(39759 * TICK_S)


@pytest.mark.parametrize(
    "text", ["", "cpu  1 2 3 4 5 6 7\n", "intr 1 2 3 4 5 6 7 8 9\n", "cpu 1 2 3 4 5 6 7 x\n"]
)
def test_unreadable_steal_is_none(tmp_path: Path, text: str) -> None:
    stat = tmp_path / "stat"
    stat.write_text(text)
    assert read_steal_s(stat) is None
    assert read_steal_s(tmp_path / "missing") is None


@pytest.mark.skipif(not PROC_STAT.exists(), reason="no /proc/stat (not Linux)")
def test_this_host_reports_a_steal_time() -> None:
    steal = read_steal_s()
    assert steal is not None and steal >= 0.0


class Script:
    """A steal counter and a clock the test advances by hand."""

    def __init__(self) -> None:
        self.now, self.steal = 0.0, 0.0

    def advance(self, dt: float, steal: float, monitor: StealMonitor) -> None:
        self.now += dt
        self.steal += steal
        monitor.sample()


def test_steal_is_credited_to_the_windows_that_overlap_it() -> None:
    s = Script()
    monitor = StealMonitor(read=lambda: s.steal, clock=lambda: s.now)
    monitor.restart()  # sample at t = 0
    s.advance(1.0, 0.0, monitor)  # t 0-1: none
    s.advance(1.0, 0.02, monitor)  # t 1-2: 20 ms
    s.advance(1.0, 0.0, monitor)  # t 2-3: none
    s.advance(1.0, 0.01, monitor)  # t 3-4: 10 ms
    assert monitor.total_s() == pytest.approx(0.03)
    assert monitor.during(0.2, 0.8) == 0.0
    assert monitor.during(1.2, 1.3) == pytest.approx(0.02)
    assert monitor.during(0.5, 3.5) == pytest.approx(0.03)  # every interval it overlaps
    assert monitor.during(2.1, 2.9) == 0.0
    assert monitor.during(5.0, 6.0) == 0.0 and monitor.during(-2.0, -1.0) == 0.0  # outside the samples
    assert monitor.count_during_steal([0.1, 1.5, 2.5, 3.9, 4.5], span_s=0.05) == 2


def test_restart_forgets_the_warm_up() -> None:
    s = Script()
    monitor = StealMonitor(read=lambda: s.steal, clock=lambda: s.now)
    monitor.restart()
    s.advance(1.0, 0.5, monitor)
    monitor.restart()
    s.advance(1.0, 0.01, monitor)
    assert monitor.total_s() == pytest.approx(0.01)
    assert monitor.during(0.0, 0.9) == 0.0


def test_without_steal_nothing_is_sampled_or_counted() -> None:
    monitor = StealMonitor(read=lambda: None)
    monitor.start()  # no thread
    monitor.sample()
    assert not monitor.available and monitor.total_s() is None
    assert monitor.count_during_steal([0.0, 1.0], span_s=1.0) == 0
    monitor.stop()


def test_the_thread_samples_until_stopped_and_can_start_again() -> None:
    calls, target, reached = [], [20], threading.Event()

    def read() -> float:
        calls.append(1)
        if len(calls) >= target[0]:
            reached.set()
        return float(len(calls))

    monitor = StealMonitor(interval_s=0.001, read=read)  # construction reads once
    monitor.start()
    assert reached.wait(10.0)
    monitor.stop()
    stopped_at = len(calls)
    time.sleep(0.05)  # 50 intervals
    assert monitor.total_s() > 0
    assert len(calls) == stopped_at  # joined: no sample after stop
    target[0] = stopped_at + 20
    reached.clear()
    monitor.start()  # samples once at once, then on its thread
    assert reached.wait(10.0)
    monitor.stop()


def test_bench_holds_the_misses_against_the_periods_with_steal() -> None:
    s = Script()
    monitor = StealMonitor(read=lambda: s.steal, clock=lambda: s.now)
    monitor.restart()
    for k in range(10):  # ten 1 s periods, steal in the 3rd and the 7th
        s.advance(1.0, 0.01 if k in (2, 6) else 0.0, monitor)
    # answers at t = 1.5 .. 9.5 s; the one whose wait (t - latency .. t) overlaps the 7th period's steal is
    # the slowest, and the figures outside steal leave it out
    answered = np.arange(1.5, 10.0, 1.0)  # (9,)
    latency = np.where(answered == 6.5, 700.0, 20.0 + answered)  # ms
    run = SimpleNamespace(wall_s=10.0, missed_at_s=np.array([2.5, 4.5]), latency_at_s=answered,
                          latency_ms=latency)  # fmt: skip
    host = host_figures(monitor, run, period_s=1.0)
    assert host["steal_ms"] == pytest.approx(20.0)
    assert host["steal_share"] == pytest.approx(0.02 / (10.0 * (os.cpu_count() or 1)), abs=1e-4)
    assert host["periods_with_steal"] == pytest.approx(0.2) and host["missed_during_steal"] == 1
    calm = host["latency_outside_steal_ms"]  # 2.5 (in the 3rd period) and 6.5 (its wait reaches the 7th)
    assert calm["answers"] == 7 and calm["max"] == pytest.approx(29.5) and calm["p50"] == pytest.approx(25.5)
    lockstep = host_figures(monitor, run, period_s=None)  # no wall-time period: only the total
    assert lockstep["steal_ms"] == pytest.approx(20.0)
    assert lockstep["periods_with_steal"] is None and lockstep["missed_during_steal"] is None
    assert lockstep["latency_outside_steal_ms"] is None
    assert host_figures(StealMonitor(read=lambda: None), run, period_s=1.0) is None
