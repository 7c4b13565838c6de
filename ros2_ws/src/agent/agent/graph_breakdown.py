"""Where the graph's time goes, for `agent bench graph`: stages per frame, CPU per node, the true latency.

- stages: each answered frame's path from the control tick it is due at to its executed action published
  on /opd/action, cut where a node hands it on (`agent.stage_marks`; drive opd and student);
- CPU: each node's executor thread and the robot thread (the simulator, which also publishes the
  sensors), as a share of one core and of the process (`agent.thread_cpu`), and the process's CPU time
  per control period;
- the true latency: image stamp (capture) -> command published, i.e. the tick-to-action figure plus the
  image's age when its tick released it. Behind the real-robot proxy that age is the proxy's share: its
  camera latency and jitter, and the wait for the control tick at or after the frame's delivery.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.bringup import executor_name
from agent.stage_marks import StageMarks
from agent.thread_cpu import PROCESS, cpu_since_s, cpu_times_s
from sim.real_robot_proxy import RealRobotProxy

if TYPE_CHECKING:
    from agent.sim_session import Progress, SimSession

ROBOT_THREAD = "robot"  # sim.realtime_loop's thread: the simulator, and the sim bridge's sensor publishing


class GraphBreakdown:
    """Marks every frame's stages in `session`'s nodes and reads their CPU time, from `start` on."""

    def __init__(self, session: SimSession) -> None:
        self.marks = StageMarks()
        # per executor thread: its node's name, or its nodes' joined by "+" (fused)
        self.executors = [executor_name(e) for e in session.bringup.executors]
        for n in session.bringup.nodes:
            n.stage_marks = self.marks
        robot = session.bridge.loop.robot
        camera = robot.cfg.camera if isinstance(robot, RealRobotProxy) else None
        self.proxy_camera = None if camera is None else {"latency_ms": camera.latency_s * 1e3,
                                                         "jitter_ms": camera.jitter_s * 1e3}  # fmt: skip
        self._cpu0: dict[str, float] = {}

    def start(self) -> None:
        """Count from now on (after a warm-up)."""
        self.marks.restart()
        self._cpu0 = cpu_times_s()

    def figures(self, p: Progress) -> dict[str, Any]:
        """The breakdown's JSON fields (documented in docs/benchmarks.md); call before the graph stops."""
        cpu = cpu_since_s(self._cpu0, cpu_times_s())
        stages, totals = self.marks.durations_ms()
        true_ms = p.latency_ms + p.image_age_ms  # (answers,) image capture -> command published
        return {
            "stages_ms": {name: _p50_p99(ms) for name, ms in stages.items()},
            "stages_total_ms": {**_p50_p99(totals), "frames": int(totals.size)},
            "image_to_command_ms": _p50_p99(true_ms),
            "image_age_at_release_ms": _p50_p99(p.image_age_ms),  # the proxy's share of it
            "proxy_camera": self.proxy_camera,
            "cpu": self._cpu(cpu, p),
        }

    def _cpu(self, cpu: dict[str, float], p: Progress) -> dict[str, Any]:
        process = cpu[PROCESS]
        threads = {name: cpu.get(f"executor-{name}", 0.0) for name in self.executors}
        threads[f"sim_bridge {ROBOT_THREAD} thread"] = cpu.get(ROBOT_THREAD, 0.0)
        threads["rest (DDS, main, others)"] = max(process - sum(threads.values()), 0.0)

        def share(cpu_s: float) -> dict[str, float]:
            return {"cpu_s": round(cpu_s, 3), "core_share": round(cpu_s / p.wall_s, 4),
                    "process_share": round(cpu_s / process, 4) if process > 0 else 0.0}  # fmt: skip

        return {
            "cores": os.cpu_count(),
            "process_share": round(process / (p.wall_s * (os.cpu_count() or 1)), 4),  # of all cores
            "per_cycle_ms": round(process / p.cycles * 1e3, 3) if p.cycles else None,
            "threads": {name: share(s) for name, s in threads.items()},
        }


def _p50_p99(ms: np.ndarray) -> dict[str, float | None]:
    if not ms.size:
        return {"p50": None, "p99": None}
    p50, p99 = np.percentile(ms, [50, 99])
    return {"p50": round(float(p50), 2), "p99": round(float(p99), 2)}


def print_breakdown(r: dict[str, Any]) -> None:
    """The breakdown under `agent bench graph`'s figures: a stage table, the true latency, CPU by node."""
    total = r["stages_total_ms"]
    print(f"  where the time goes ({total['frames']} frames, due tick -> /opd/action published), ms:")
    for name, f in [*r["stages_ms"].items(), ("total", total)]:
        print(f"    {name:<24} p50 {_ms(f['p50'])}  p99 {_ms(f['p99'])}")
    true, age = r["image_to_command_ms"], r["image_age_at_release_ms"]
    line = f"  image capture -> command: p50 {_ms(true['p50'])}, p99 {_ms(true['p99'])} ms; of which "
    line += f"capture -> release p50 {_ms(age['p50'])}, p99 {_ms(age['p99'])} ms"
    if (cam := r["proxy_camera"]) is not None:
        line += (f" (the proxy's: camera latency {cam['latency_ms']:g} ms + up to {cam['jitter_ms']:g} ms "
                 "jitter, then the wait for the next control tick)")  # fmt: skip
    print(line)
    cpu = r["cpu"]
    print(f"  CPU: {cpu['process_share']:.1%} of {cpu['cores']} cores, {cpu['per_cycle_ms']} ms per control "
          "period; by thread, share of one core:")  # fmt: skip
    for name, f in cpu["threads"].items():
        print(f"    {name:<28} {f['core_share']:6.1%}  ({f['process_share']:.1%} of the process)")


def _ms(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.1f}"
