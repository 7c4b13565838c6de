"""`agent run`: the whole graph in one process against a simulator, with live progress.

    agent run [--sim mujoco] [--duration S] [--record DIR] [--drive opd|student|teacher] ...

Every node of `agent.graph` runs as the launch file would start it (`agent.sim_session`); the sim bridge
plays the robot in real time. Ctrl-C or the end of --duration stops the graph and leaves the robot on the
contract's safe action. Without --artifact it drives the committed OPD student (sim/robots/diffbot/student,
what the main job runs); `--config C` without --artifact exports an untrained student of config C once
into the cache instead (it acts at random). `agent bench graph` has the same default: its figures are of
the graph the robot runs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agent import graph
from agent.commands import at_least
from sim.robots import diffbot

if TYPE_CHECKING:  # imported when the command runs: `agent --help` must not load rclpy or the models
    from rich.console import Console
    from rich.table import Table

    from agent.sim_session import Progress, SessionConfig, SimSession

DEFAULT_CONFIG = "policies/configs/student_small.yaml"  # relative to the repository root


def add_graph_arguments(parser: argparse.ArgumentParser, committed_student: bool = False) -> None:
    """Options shared by `agent run` and `agent bench graph`. `committed_student`: without --artifact and
    --config, the committed student drives (`agent run`), else an untrained one from DEFAULT_CONFIG."""
    untrained = "an untrained student exported once from --config into ~/.cache/agent/"
    trunk = f"{DEFAULT_CONFIG}: ResNet18, the trunk for small CPU-only machines"
    if committed_student:
        artifact = f"the committed OPD student {diffbot.STUDENT}; with --config, {untrained}"
        config = f"drive an untrained student of this config instead of the committed one (e.g. {trunk})"
    else:
        artifact, config = untrained, f"student config exported without --artifact (default {trunk})"
    parser.add_argument("--sim", choices=["mujoco", "isaacsim"], default="mujoco", help="simulator backend")
    parser.add_argument("--artifact", type=Path, help=f"artifact from `agent export`; default: {artifact}")
    parser.add_argument("--config", type=Path, help=config)
    parser.add_argument("--backend", choices=["onnxruntime", "torch", "tensorrt"], default="onnxruntime",
                        help="inference backend of encoder and policy")  # fmt: skip
    parser.add_argument("--precision", choices=["fp32", "fp16", "int8"],
                        help="encoder precision; default: int8 (ONNX Runtime's quantised encoder) for an "
                        "untrained student, else the backend's default")  # fmt: skip
    parser.add_argument(
        "--threads", type=at_least(1), default=1, help="intra-op threads per inference backend"
    )
    parser.add_argument("--executor", choices=graph.EXECUTORS, default="single",
                        help="each node's executor: single or multi-threaded (agent.bringup)")  # fmt: skip
    parser.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True,
                        help="drive opd with single-threaded executors: the encoder and the opd node on one "
                        "executor, the encoder's callback handing each embedding straight to the OPD "
                        "decision (agent.bringup); --no-fused: each on its own, /agent/state between them "
                        "over DDS, as the launch file runs them")  # fmt: skip
    parser.add_argument("--drive", choices=graph.DRIVES, default="opd",
                        help="whose action the robot executes (launch argument drive; opd = the OPD "
                        "gate's choice between student and teacher)")  # fmt: skip
    parser.add_argument("--teacher", type=Path, help="teacher.pt (teacher.yaml beside it); default: the one "
                        "the artifact's student was distilled from, else the committed "
                        f"{diffbot.TEACHER}")  # fmt: skip
    parser.add_argument("--proxy", action="store_true", help="run the simulator behind the real-robot proxy")
    parser.add_argument("--learn", action="store_true", help="drive opd: train the student's head and the "
                        "predictor online in the opd node's learner process")  # fmt: skip
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="real-time factor (1 = real time; 0 = as fast as the graph answers)",
    )
    parser.add_argument("--seed", type=at_least(0), default=0, help="seed of the first episode")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_graph_arguments(parser, committed_student=True)
    parser.add_argument("--duration", type=float, help="stop after this many wall seconds; default: Ctrl-C")
    parser.add_argument("--record", type=Path, help="write a rosbag2 bag (MCAP) of every graph topic here")
    parser.add_argument("--video", type=Path, metavar="PATH", help="also write an MP4: the camera frame the "
                        "graph was sent beside a camera following the robot, who decided the command the "
                        "base follows and what it is (10 frames a second; rendering costs CPU)")  # fmt: skip


def session_config(
    args: argparse.Namespace, record: Path | None = None, committed_student: bool = False
) -> SessionConfig:
    """The SessionConfig for the parsed options. Without --artifact: the committed student with
    `committed_student` and no --config (`agent run`), else an untrained student exported from --config.

    Raises FileNotFoundError when the teacher is to drive and its checkpoint is missing.
    """
    from agent.nodes.teacher import default_checkpoint
    from agent.sim_session import SessionConfig, cached_artifact
    from policies.config import from_root
    from policies.export import DEFAULT_STUDENT_CONFIG

    if args.threads < 0 or args.speed < 0:
        raise ValueError("--threads and --speed must be >= 0")
    artifact, precision = args.artifact, args.precision or ""
    if artifact is None and args.config is None and committed_student:
        artifact = from_root(diffbot.STUDENT)  # found from the project root, whatever the working directory
    if artifact is None:
        precision = args.precision or "int8"
        config = args.config or DEFAULT_STUDENT_CONFIG.with_name("student_small.yaml")
        artifact, fresh = cached_artifact(config, int8=precision == "int8")
        learns = args.learn and args.drive == "opd"
        then = ("until the opd node's learner trains it online (--learn)" if learns else "(with --drive opd "
                "--learn, Online Policy Distillation would train it as it runs)")  # fmt: skip
        print(f"{'exported' if fresh else 'using'} an untrained student ({config.name}) at {artifact}: it "
              f"acts at random {then}", file=sys.stderr)  # fmt: skip
    # OPD's gate executes the teacher too; the nodes resolve an unset teacher the same way (the artifact's,
    # else the committed one)
    needs_teacher = args.drive in ("teacher", "opd")
    teacher = (args.teacher or default_checkpoint(str(artifact))) if needs_teacher else None
    if teacher is not None and not teacher.is_file():
        raise FileNotFoundError(
            f"--drive {args.drive} needs a teacher checkpoint: none at {teacher}; train one with "
            "`agent train teacher --out DIR`, then pass --teacher DIR/teacher.pt"
        )
    return SessionConfig(
        artifact_dir=artifact, sim=args.sim, backend=args.backend, precision=precision,
        threads=args.threads, executor=args.executor, fused=args.fused, drive=args.drive,
        teacher=args.teacher, proxy=args.proxy, learn=args.learn, speed=args.speed, seed=args.seed,
        record=record, video=getattr(args, "video", None),
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agent.recorder import RecordingStopped
    from agent.sim_session import SimSession, ros_interruptible

    if args.duration is not None and args.duration <= 0:
        raise ValueError("--duration must be > 0")
    if args.record is not None and args.record.exists():
        raise ValueError(f"--record {args.record}: exists already; the bag directory must be new")
    if args.video is not None:
        from sim.video import mp4_path

        args.video = mp4_path(args.video)  # checked before anything starts
    cfg = session_config(args, args.record, committed_student=True)
    console = Console(soft_wrap=True)  # summary lines stay whole in logs and pipes
    # Ctrl-C and SIGTERM raise KeyboardInterrupt: the graph stops (robot parked) while the context is valid.
    failed = 0
    with ros_interruptible() as signals:
        session = SimSession(cfg)
        try:
            for name, why in session.start().items():
                console.print(f"[yellow]{name} is not running: {why}[/yellow]")
            _watch(session, args.duration, console)
        except KeyboardInterrupt:
            console.print("stopping (interrupted)")
        except RecordingStopped as err:  # a run that records runs for the record: without one, it stops
            console.print(f"[red]{err}[/red]")
            failed = 1
        finally:
            signals.stopping = True  # first, and by assignment: no later signal may cut the stop short
            progress = session.progress()
            parked, report = session.close()
    console.print(_summary(progress, cfg.drive), markup=False, highlight=False)
    if parked is not None:
        skill, names = int(parked.skill[0]), session.bridge.robot_spec.contract.names
        console.print(f"robot left on the safe action (skill {skill}: {names[skill]})")
    if report is not None:
        style = "red" if sum(report.lost.values()) or report.failure else "green"
        console.print(f"[{style}]{report.summary()}[/{style}]")
    if session.video_summary:
        console.print(session.video_summary, markup=False, highlight=False)
    return failed


def _watch(session: SimSession, duration: float | None, console: Console) -> None:
    """Spin until the duration ends or ROS shuts down (SIGTERM), showing progress: a live table on a
    terminal, else one line every 5 s."""
    import rclpy
    from rich.live import Live

    end = math.inf if duration is None else time.monotonic() + duration

    def running() -> bool:
        return time.monotonic() < end and rclpy.ok(context=session.bringup.context)

    if not console.is_terminal:
        while running():
            session.spin(min(5.0, end - time.monotonic()))
            console.print(_summary(session.progress(), session.cfg.drive), markup=False, highlight=False)
        return
    with Live(_table(session.progress(), session.cfg.drive), console=console, refresh_per_second=2) as live:
        while running():
            session.spin(min(0.5, end - time.monotonic()))
            live.update(_table(session.progress(), session.cfg.drive))


def _table(p: Progress, drive: str) -> Table:
    from rich.table import Table

    table = Table(title=f"agent run: driven by {drive} (Ctrl-C stops)", show_header=False)
    for key, value in _figures(p, drive).items():
        table.add_row(key, value)
    return table


def _figures(p: Progress, drive: str) -> dict[str, str]:
    rate = f"{p.successes / p.episodes:.0%}" if p.episodes else "-"
    dropped = sum(p.dropped.values())
    worst = ", ".join(f"{k} {v}" for k, v in p.dropped.most_common(3))
    answered = "state" if drive == "teacher" else "camera"  # the teacher answers the privileged state
    latency = f"p50 {p.latency_percentile(50):.1f} ms, p99 {p.latency_percentile(99):.1f} ms"
    control = f"{p.control_rate_hz:.1f} Hz, {p.missed_cycles} missed cycles"
    if p.disarmed:
        control += f", {p.disarmed} more while disarmed (nothing answers them: not counted as missed)"
    return {
        "robot": _arm_line(p.arm_state),
        "time": f"{p.wall_s:.0f} s wall, {p.sim_time_s:.1f} s simulated",
        "episodes": f"{p.episodes} finished, {p.successes} successes ({rate}); "
                    f"running one at {p.episode_progress:.0%}",
        "control": control,
        f"{answered} -> command": latency,
        "dropped": f"{dropped} messages" + (f" ({worst})" if dropped else ""),
        "recorded": f"{p.recorded} messages",
        **({"OPD gate": p.gate} if p.gate else {}),
    }  # fmt: skip


def _arm_line(state: str) -> str:
    """The arm switch's state in words: armed, disarmed (and how to arm), or why it is neither."""
    if state == "active":
        return "armed"
    if state == "inactive":
        return "disarmed: no motion commands, the robot on the safe action (agent arm arms it)"
    return f"not armed: the arm switch is {state}"


def _summary(p: Progress, drive: str) -> str:
    return f"[{drive}] " + "; ".join(f"{k}: {v}" for k, v in _figures(p, drive).items())
