"""The host steal monitor: /proc/stat parsing and crediting steal to time windows."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
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


def test_the_thread_samples_until_stopped() -> None:
    calls, enough = [], threading.Event()

    def read() -> float:
        calls.append(1)
        if len(calls) >= 20:
            enough.set()
        return float(len(calls))

    monitor = StealMonitor(interval_s=0.001, read=read)
    monitor.start()
    assert enough.wait(10.0)
    monitor.stop()
    stopped_at = len(calls)
    assert monitor.total_s() > 0
    assert len(calls) == stopped_at  # joined: no sample after stop


def test_the_share_of_windows_with_steal_is_the_base_rate() -> None:
    s = Script()
    monitor = StealMonitor(read=lambda: s.steal, clock=lambda: s.now)
    monitor.restart()
    for k in range(10):  # ten 1 s intervals, steal in the 3rd and the 7th
        s.advance(1.0, 0.01 if k in (2, 6) else 0.0, monitor)
    assert monitor.share_with_steal(1.0) == pytest.approx(2 / 10)
    assert monitor.share_with_steal(2.0) == pytest.approx(2 / 5)  # [2, 4] and [6, 8]
    assert monitor.share_with_steal(20.0) == 0.0  # no whole window
