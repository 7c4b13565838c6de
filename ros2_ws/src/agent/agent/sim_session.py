"""The whole graph against a simulator, in this process: what `agent run` and `agent bench graph` start.

One `Bringup` (every node of `agent.graph` for the simulator, each on its own executor), the parameter file
rendered from the graph with the session's choices applied, and optionally a `BagRecorder` beside it.
Figures come from the nodes themselves: the sim bridge's real-time loop (control cycles, missed cycles,
camera-to-command latency measured against each command's DDS publication time) and every node's
rejected and dropped messages.

Settings chosen for a small, shared CPU (measured on the 2-core CI machine, see `agent bench graph`):
- a single-threaded executor per node (see `agent.bringup`), but one for the encoder and the opd node with
  drive opd, the encoder's callback handing each embedding straight to the OPD decision (`fused`);
- one intra-op thread per inference backend: two make the INT8 encoder alone 25% faster (8.2 vs 10.9 ms),
  but in the graph, next to the other threads, back-to-back runs measured no clear gain (p99 31-37 ms with
  two, 32-35 ms with one);
- the interpreter's thread switch interval at 0.5 ms instead of 5 ms: a dozen threads hand the GIL to each
  other per message, and at 5 ms the robot thread fell behind real time;
- use_sim_time only when the simulation is not real time: in real time the stamps follow the system clock
  and every node saves a /clock callback per control period;
- `gc.freeze()` once the nodes are up (see `SimSession.start`).
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import rclpy
import yaml
from rclpy.context import Context
from rclpy.signals import SignalHandlerOptions

from agent import graph
from agent.bringup import Bringup
from agent.graph.render import params_yaml
from agent.recorder import BagRecorder, RecordingReport, RecordingStopped
from agent.stop_signals import StopSignals
from sim.robot_interface import AppliedAction

if TYPE_CHECKING:  # made only for agent run --video: imageio and the third-person renderer load then
    from agent.run_video import RunVideo

GIL_SWITCH_S = 0.0005  # sys.setswitchinterval for the session's process, s (see the module doc)
START_TIMEOUT_S = 120.0  # models load and the simulator connects within this, s


@dataclass(frozen=True)
class SessionConfig:
    """What to run: the artifact, the inference settings, the simulator and who drives it."""

    artifact_dir: Path  # written by `agent export`
    sim: str = "mujoco"  # launch argument `sim`: mujoco | isaacsim
    backend: str = "onnxruntime"  # inference backend of encoder and policy
    precision: str = ""  # encoder precision; "" = the backend's default (int8 needs `agent export --int8`)
    threads: int = 1  # intra-op threads of each inference backend; 0 = the backend's default
    executor: str = "single"  # executor of each node: single | multi (agent.bringup)
    fused: bool = True  # drive opd, single executors: encoder and opd node as one callback (agent.bringup)
    drive: str = "opd"  # whose action the robot executes: launch argument `drive` (graph.DRIVES)
    teacher: Path | None = None  # teacher checkpoint; None = the committed one of the robot
    proxy: bool = False  # run the simulator behind the real-robot proxy
    learn: bool = False  # drive opd: the opd node trains the head and the predictor online (learner process)
    speed: float = 1.0  # real-time factor; 0 = lockstep (as fast as the graph answers)
    seed: int = 0  # seed of the first episode
    record: Path | None = None  # bag directory to write; None = no recording
    video: Path | None = None  # MP4 of the robot as it runs (agent.run_video); None = none

    def params(self) -> dict:
        """The graph's parameter file with this session's choices applied."""
        params = yaml.safe_load(params_yaml())
        node = {name: params[name]["ros__parameters"] for name in params}
        node["encoder"].update(inference_threads=self.threads)
        node["policy"].update(inference_threads=self.threads)
        height, width = self.camera_hw()
        node["sim_bridge"].update(camera_width=width, camera_height=height, proxy=self.proxy,
                                  real_time_factor=float(self.speed), seed=self.seed)  # fmt: skip
        node["teacher"].update(checkpoint=str(self.teacher or ""))
        node["opd"].update(teacher_checkpoint=str(self.teacher or ""), learn=self.learn)  # the same teacher
        return params

    def fuses(self) -> bool:
        """Whether the encoder and the opd node run as one callback: `fused` where the graph allows it."""
        return self.fused and self.drive == "opd" and self.executor == "single"

    def camera_hw(self) -> tuple[int, int]:
        """The artifact's input (height, width): the sim renders it. Read through `Artifact`, which checks
        the manifest and its files: a corrupt artifact is its one clear error here, before any node starts."""
        from policies.artifact import Artifact

        return Artifact.load(self.artifact_dir).image_hw


@dataclass(frozen=True)
class Progress:
    """Figures since the session started counting (`SimSession.restart_counting`)."""

    wall_s: float  # wall time counted, s
    resetting_s: float  # of which between episodes (the robot settles after a reset, no control), s
    sim_time_s: float  # simulated time of the last observation, s
    episodes: int
    successes: int
    episode_progress: float  # of the running episode, [0, 1]
    cycles: int  # control periods stepped
    missed: int  # periods stepped without the command answering their observation
    overruns: int  # observations released more than a control period late
    disarmed: int  # periods stepped while the arm switch was disarmed (unanswered, not missed)
    arm_state: str  # the arm switch's lifecycle state: active = armed
    latency_ms: np.ndarray  # image stamp -> command published, per answered observation, ms
    latency_at_s: np.ndarray  # monotonic time each of them was taken, s
    image_age_ms: np.ndarray  # of each: image stamp -> its release (behind the proxy, the proxy's share), ms
    lateness_ms: np.ndarray  # observation released - due, ms
    missed_at_s: np.ndarray  # monotonic due time of each missed or overrun period, s
    dropped: Counter[str] = field(default_factory=Counter)  # rejected/dropped/lost, by "node: stream.reason"
    recorded: int = 0  # messages written to the bag so far
    gate: str = ""  # the OPD gate (drive opd): teacher share and the last decision; "" without the OPD core

    @property
    def control_rate_hz(self) -> float:
        """Control periods stepped per wall second while episodes ran (resets left out)."""
        controlled = self.wall_s - self.resetting_s
        return self.cycles / controlled if controlled > 0 else 0.0

    @property
    def missed_cycles(self) -> int:
        return self.missed + self.overruns

    def latency_percentile(self, q: float) -> float:
        return float(np.percentile(self.latency_ms, q)) if self.latency_ms.size else math.nan


class SimSession:
    """Starts the graph on `cfg` in the given rclpy context; `close()` stops it (robot on the safe action)."""

    def __init__(self, cfg: SessionConfig, context: Context | None = None) -> None:
        self.cfg = cfg
        sys.setswitchinterval(GIL_SWITCH_S)
        self.params = cfg.params()
        self._params_dir = tempfile.TemporaryDirectory(prefix="agent-run-")
        params_file = Path(self._params_dir.name) / graph.PARAMS_FILE
        params_file.write_text(yaml.safe_dump(self.params, sort_keys=False))
        sim_time = "false" if cfg.speed == 1.0 else "true"
        launch_args = {"artifact_dir": str(cfg.artifact_dir), "backend": cfg.backend, "sim": cfg.sim,
                       "drive": cfg.drive, "use_sim_time": sim_time, "precision": cfg.precision}  # fmt: skip
        self.recorder = None
        if cfg.record is not None:
            # The resolved configuration beside the data: parameters, and the launch arguments (`drive`).
            metadata = {"agent.params": params_file.read_text(), "agent.launch_args": json.dumps(launch_args)}
            self.recorder = BagRecorder(cfg.record, graph.TOPICS.values(), context, metadata)
        try:
            self.bringup = Bringup(
                context=context, executor=cfg.executor, fused=cfg.fuses(), params_file=str(params_file),
                **launch_args,
            )  # fmt: skip
        except BaseException:
            if self.recorder is not None:
                self.recorder.stop()
            self._params_dir.cleanup()
            raise
        self.bridge = self.bringup.node("sim_bridge")
        self.arm_switch = self.bringup.node(next(n.name for n in graph.NODES if n.arms))
        # Before any transition: a disarmed controller's silence is no missed cycle (agent arm/disarm).
        self.arm_switch.state_listeners.append(
            lambda label: self.bridge.set_controller_armed(label == "active")
        )
        self._baseline: Counter[str] = Counter()
        self.video: RunVideo | None = None
        self.video_summary = ""  # what the MP4 holds, once closed

    def start(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, str]:
        """Spin until every node is active or has failed; returns the failures by node name.

        Raises RuntimeError when a node the session cannot run without failed or nothing came up in time.
        """
        nodes = self.bringup.nodes

        def settled() -> bool:
            return all(n.lifecycle_state == "active" or n.fault for n in nodes)

        if not self.bringup.spin(timeout_s, until=settled):
            waiting = [n.get_name() for n in nodes if n.lifecycle_state != "active" and not n.fault]
            raise RuntimeError(f"nodes not active after {timeout_s:g} s: {waiting}")
        # Startup objects (modules, models, nodes) leave the cyclic collector's view: its full collections
        # then scan only what the run allocates, instead of pausing every thread for tens of ms.
        gc.collect()
        gc.freeze()
        failed = {n.get_name(): n.fault for n in nodes if n.fault}
        optional = {"teacher"} if self.cfg.drive != "teacher" else set()
        if set(failed) - optional:
            raise RuntimeError("; ".join(f"{name}: {fault}" for name, fault in failed.items()))
        if self.cfg.video is not None:
            self.video = self._video(self.cfg.video)
        return failed

    def _video(self, path: Path) -> RunVideo:
        """The robot into an MP4 from now on: who decided the command the base follows, and what it is."""
        from agent.run_video import RunVideo
        from opd.episode_video import action_text

        bridge, contract = self.bridge, self.bridge.robot_spec.contract

        def who() -> str:
            if bridge.loop.command_age_s() > bridge.command_timeout_s:
                return "safe action (no command: the base's watchdog)"
            if not bridge.controller_armed:
                return "safe action (disarmed)"
            opd, _ = self._opd_core()
            last = getattr(opd, "last_gate", None)
            if self.cfg.drive != "opd" or last is None:
                return self.cfg.drive
            return f"{'teacher' if last.use_teacher[0] else 'student'} ({last.reason[0]})"

        def applied() -> str:
            a = bridge.loop.applied
            if a is None:  # before the first step: the robot starts on the safe action
                return action_text(contract, contract.safe_skill_id, contract.layout.defaults)
            return action_text(contract, int(a.skill[0]), a.params[0])

        video = RunVideo(path, bridge.robot_spec.control_hz, who, applied)
        bridge.release_hooks.append(video)
        return video

    def spin(self, seconds: float) -> None:
        self.bringup.spin(seconds)
        if self.bridge.loop is not None and self.bridge.loop.error is not None:
            raise RuntimeError(f"the simulation stopped: {self.bridge.loop.error!r}")
        if self.recorder is not None and self.recorder.failure:
            raise RecordingStopped(f"the recording stopped ({self.recorder.failure}): stopping the robot")

    def restart_counting(self) -> None:
        """Count from now on (e.g. after a warm-up)."""
        self.bridge.loop.reset_stats()
        self._baseline = self._losses()

    def progress(self) -> Progress:
        s = self.bridge.loop.stats()
        dropped = self._losses()
        dropped.subtract(self._baseline)
        return Progress(
            wall_s=time.monotonic() - s.started_mono_s,
            resetting_s=s.resetting_s,
            sim_time_s=s.sim_time_s,
            episodes=s.episodes,
            successes=s.successes,
            episode_progress=s.progress,
            cycles=s.cycles,
            missed=s.missed,
            overruns=s.overruns,
            disarmed=s.disarmed,
            arm_state=self.arm_switch.fault or self.arm_switch.lifecycle_state,
            latency_ms=np.array(s.latency_s) * 1e3,
            latency_at_s=np.array(s.latency_at_s),
            image_age_ms=np.array(s.image_age_s) * 1e3,
            lateness_ms=np.array(s.lateness_s) * 1e3,
            missed_at_s=np.array(s.missed_at_s),
            dropped=+dropped,
            recorded=sum(self.recorder.report.written.values()) if self.recorder else 0,
            gate=self._gate(),
        )

    def _opd_core(self) -> tuple[Any, Any]:
        """The opd node and its OPD core (read once: cleanup may clear it); (None, None) without them."""
        try:
            opd = self.bringup.node("opd")
        except KeyError:
            return None, None
        return opd, getattr(opd, "learner", None)

    def learner_updates(self) -> int | None:
        """Gradient steps the opd node's learner process has taken; None where nothing learns."""
        opd, _ = self._opd_core()
        process = getattr(opd, "learner_process", None)
        return None if process is None else process.updates

    def learner_error(self) -> BaseException | None:
        """Why the opd node's learner process stopped; None while it runs, or where nothing learns."""
        opd, _ = self._opd_core()
        process = getattr(opd, "learner_process", None)
        return None if process is None else process.error

    def _gate(self) -> str:
        """The OPD node's gate in one line: who acted how often, and its last decision."""
        opd, learner = self._opd_core()
        stats = learner.stats() if learner is not None else {}
        if not stats.get("decisions"):
            return ""
        last = opd.last_gate
        share = stats["teacher_decisions"] / stats["decisions"]
        text = f"teacher on {share:.1%} of {stats['decisions']} decisions, {stats['switches']} switches"
        if last is not None:
            who = "teacher" if last.use_teacher[0] else "student"
            text += f"; now {who} ({last.reason[0]}, error {last.error[0]:.2f} vs {last.threshold:.2f})"
        return text

    def failures(self) -> dict[str, str]:
        """Nodes that are not running, with why."""
        return {n.get_name(): n.fault or n.lifecycle_state for n in self.bringup.nodes
                if n.lifecycle_state != "active"}  # fmt: skip

    def close(self) -> tuple[AppliedAction | None, RecordingReport | None]:
        """Stop the graph (the robot is parked on the safe action), then the recording.

        Returns what the robot was left on and what the bag holds.
        """
        try:
            self.bridge.halt()  # the robot first: no period runs unanswered while the controllers stop
            self.bringup.close()
        finally:
            report = self.recorder.stop() if self.recorder is not None else None
            if self.video is not None:
                self.video_summary = self.video.close()
            self._params_dir.cleanup()
        return self.bridge.parked, report

    def _losses(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for n in self.bringup.nodes:
            out.update({f"{n.get_name()}: {k}": v for k, v in n.losses().items()})
        if self.recorder is not None:
            out.update({f"recorder: {t}.lost": n for t, n in self.recorder.lost().items()})
            out.update({f"recorder: {t}.not_stored": n for t, n in self.recorder.not_stored().items()})
        return out


@contextmanager
def ros_interruptible() -> Iterator[StopSignals]:
    """rclpy initialised without its signal handlers; the first SIGINT or SIGTERM raises KeyboardInterrupt.

    rclpy's own SIGTERM handler shuts the context down at once, under the running graph: the safe action
    could no longer be published nor the bag closed. Here the first signal ends up in the caller's
    `except KeyboardInterrupt`, which stops the graph while the context is still valid; later ones (a
    second Ctrl-C, a SIGTERM after it) are only recorded, as is any once the caller has set `stopping`
    before its own stop (`agent.stop_signals`).
    """
    signals = StopSignals(interrupt=True).install()
    try:
        with rclpy.init(signal_handler_options=SignalHandlerOptions.NO):
            yield signals
    finally:
        # After a stop nothing is left to stop: a later signal of the same burst (a supervisor escalating
        # SIGTERM, Ctrl-C) must not turn the clean exit into a kill. A stop as fast as the graph's with
        # drive opd ends before a burst 0.2 s long does.
        if signals.stopping:
            signals.ignore()
        else:
            signals.restore()


def cached_artifact(config: Path, int8: bool, cache_root: Path | None = None) -> tuple[Path, bool]:
    """An untrained student exported from `config` into the cache, reused while the config, the contract, the
    predictor config and the model code (policies/*.py) match: an artifact of older code is exported again.

    Returns (artifact directory, whether it was exported now). The cache is $XDG_CACHE_HOME/agent/artifacts
    (~/.cache/agent/artifacts); a corrupt entry is exported again.
    """
    from policies.artifact import Artifact, ArtifactError
    from policies.export import DEFAULT_CONTRACT, DEFAULT_PREDICTOR_CONFIG, export_artifact
    from policies.student_policy import StudentConfig
    from sim.marker_task import robot_privileged_fields
    from sim.real_robot_proxy import robot_camera

    root = cache_root or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agent/artifacts"
    code = sorted(DEFAULT_PREDICTOR_CONFIG.parents[1].glob("*.py"))  # policies/*.py
    sources = [config, DEFAULT_CONTRACT, DEFAULT_PREDICTOR_CONFIG, *code]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + bytes([int8]))
    key = digest.hexdigest()[:12]
    out = root / f"untrained-{config.stem}{'-int8' if int8 else ''}-{key}"
    if out.is_dir():
        try:
            Artifact.load(out)
            return out, False
        except ArtifactError:
            shutil.rmtree(out)
    root.mkdir(parents=True, exist_ok=True)
    student_cfg = StudentConfig.from_yaml(config)
    image = student_cfg.encoder.image
    camera = robot_camera(image.height, image.width)
    return export_artifact(out, student_cfg, privileged_fields=robot_privileged_fields(), int8=int8,
                           camera=camera), True  # fmt: skip
