"""Sim bridge node: a sim/ backend plays the robot of the graph, in real time or faster, and owns /clock.

The simulator runs on a thread of its own (`sim.realtime_loop.RealtimeLoop`, which paces it and waits for
each observation's answer); this node converts in both directions:
- each released observation -> /clock, /agent/active_skill, /sim/privileged_state, /odom, every new IMU
  sample as its own message, and the camera frame when it is new, with its CameraInfo (the robot's camera
  at the rendered size, through the proxy's lens: `sim.real_robot_proxy.robot_camera`); IMU samples taken
  between observations are released on their own as they arrive, as a real IMU streams. Stamps are capture
  times: ROS time is the wall time at the run's start plus the simulated time since, so with
  real_time_factor 1 stamps follow the system clock (use_sim_time may stay off) and /clock carries the same
  time base;
- the executed hybrid action on /opd/action (the opd node's, whoever `drive` names) -> the robot, which
  clips it to the skill contract in `send_action`; clipped commands are counted, malformed ones rejected.
  Nothing outside the contract reaches the simulator. Without a command for `command_timeout_s` the robot
  applies the contract's safe action (`stop`) and the node reports ERROR, until commands return.
  `drive` (one launch argument with the opd node's) only says which input a command answers: the
  privileged state for the teacher, the camera image otherwise (its stamp, for answer matching and
  latency), and so which inputs go out first and which readers the readiness check waits for.
Lifecycle: configure builds and connects the backend (on the robot thread), activate starts episodes once
the controller is connected, deactivate stops them and leaves the robot on the contract's safe action,
cleanup closes the backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from agent_interfaces.msg import HybridAction
from lifecycle_msgs.msg import State, TransitionEvent
from lifecycle_msgs.srv import GetState
from rclpy.client import Client
from rclpy.subscription import MessageInfo
from rosgraph_msgs.msg import Clock

import sim
from agent.graph import NODES, TOPICS, node
from agent.lifecycle_node import AgentNode
from agent.messages import (
    ActionCodec,
    MessageError,
    camera_info_msg,
    checked_stamp,
    odometry_to_msg,
    privileged_names,
    privileged_to_msg,
    rgb_to_image,
    sample_to_imu,
    sec_to_stamp,
    skill_state_to_msg,
)
from agent.node_process import run_node
from policies.stream_stats import Level, Status, StreamStats
from sim.backends import make_backend
from sim.config import SimConfig
from sim.real_robot_proxy import ProxyConfig, RealRobotProxy, robot_camera
from sim.realtime_loop import LoopConfig, RealtimeLoop, Release
from sim.robot_interface import AppliedAction, Observation, RobotInterface

SIM_CONFIGS = Path(sim.__file__).resolve().parent / "configs"  # <sim>.yaml and proxy.yaml
CLOCK, SKILL, PRIVILEGED, ODOM = "/clock", "/agent/active_skill", "/sim/privileged_state", "/odom"
IMU, CAMERA, COMMAND = "/imu/data", "/camera/image_raw", "/opd/action"
CAMERA_INFO = "/camera/camera_info"
ARM_SWITCH = next(n.name for n in NODES if n.arms)  # the node whose activity is the robot's arming
ARM_POLL_S = 0.5  # period of asking the arm switch its state, until it answers once, s
ODOM_FIELDS = ("odom_x_m", "odom_y_m", "odom_yaw_rad", "odom_v_mps", "odom_w_radps")  # proprio columns


def sim_config(sim_name: str, path: str, camera_hz: int, width: int = 0, height: int = 0) -> SimConfig:
    """The simulator config of one env: `path` or the sim package's <sim>.yaml, camera rate and image
    width and height overridden where given (non-zero)."""
    cfg = SimConfig.from_yaml(path or SIM_CONFIGS / f"{sim_name}.yaml")
    data = cfg.model_dump()
    data["num_envs"] = 1
    if camera_hz:
        data["rates"]["camera_hz"] = camera_hz
    data["camera"].update({k: v for k, v in (("width", width), ("height", height)) if v})
    return SimConfig.from_dict(data, source=f"{path or sim_name} (sim_bridge)")


class SimBridgeNode(AgentNode):
    """The simulated robot: observations out with honest stamps, contract-clipped hybrid actions in."""

    def __init__(self, **kwargs: Any) -> None:
        self.loop: RealtimeLoop | None = None
        self.parked: AppliedAction | None = None  # what deactivate left the robot on
        self.controller_armed = True  # whether unanswered periods are missed ones (see set_controller_armed)
        self.arm_client: Client | None = None  # asks the arm switch its state (watch_arm_switch)
        # Called on the robot thread after each observation went out, with the robot (agent run --video).
        self.release_hooks: list[Callable[[Release, RobotInterface], None]] = []
        self._repeated_seen = (
            0  # commands_repeated at the last diagnostics: repeats since then name the cause
        )
        super().__init__(node("sim_bridge"), **kwargs)

    def configure(self) -> None:
        s = self.settings()
        cfg = sim_config(s["sim"], s["sim_config"], s["camera_hz"], s["camera_width"], s["camera_height"])
        robot: RobotInterface = make_backend(cfg)
        proxy = None
        if s["proxy"]:
            proxy = ProxyConfig.from_yaml(s["proxy_config"] or SIM_CONFIGS / "proxy.yaml")
            robot = RealRobotProxy(robot, proxy)
        self.camera_model = robot_camera(cfg.camera.height, cfg.camera.width, proxy)
        self.drive = s["drive"]
        loop_cfg = LoopConfig(
            real_time_factor=s["real_time_factor"],
            command_deadline_s=s["command_deadline_s"],
            command_timeout_s=s["command_timeout_s"],
            answer_stamp="state" if self.drive == "teacher" else "image",
            seed=s["seed"],
        )
        self.robot_spec = spec = robot.spec
        self.codec = ActionCodec(spec.contract)
        self.names = privileged_names(spec.privileged_fields)
        self.odom_columns = [spec.proprio_fields.index(f) for f in ODOM_FIELDS]
        self.summary_values = {
            "sim": cfg.backend, "proxy": str(s["proxy"]), "drive": self.drive,
            "real_time_factor": f"{s['real_time_factor']:g}",
            "control_hz": str(spec.control_hz), "camera_hz": str(cfg.rates.camera_hz),
        }  # fmt: skip
        self.commands = StreamStats("command", TOPICS[COMMAND].rate_hz)
        self.command_timeout_s = s["command_timeout_s"]
        self.epoch_s = 0.0  # ROS time at simulated time 0 of the current run, s
        self.pubs = {t: self.publisher(t) for t in (CLOCK, SKILL, PRIVILEGED, ODOM, IMU, CAMERA, CAMERA_INFO)}
        loop = RealtimeLoop(robot, loop_cfg, self.publish_release, self.controller_ready)
        loop.open()  # connects on the robot thread; a missing GL stack or simulator fails configure here
        self.loop = loop
        loop.set_armed(self.controller_armed)

    def set_controller_armed(self, armed: bool) -> None:
        """The arm switch was armed or disarmed: a disarmed controller's silence is no missed cycle. Told by
        `agent.sim_session` in one process, and by the arm switch itself (`watch_arm_switch`)."""
        self.controller_armed = armed
        loop = self.loop  # read once: configure may create it beside this
        if loop is not None:
            loop.set_armed(armed)

    def activate(self) -> None:
        self.command_sub = self.subscribe(COMMAND, self.on_command, self.io_group)
        self.watch_arm_switch()
        self.parked = None
        self.loop.start()

    def watch_arm_switch(self) -> None:
        """Follow the arm switch's lifecycle in its namespace: its transition events, and its state asked
        until it answers once (its activation may have come before this subscription). Under a launch no
        session tells this node, and an operator's `agent disarm` counted every period after it as missed
        (2 to 120 in 5 s). Until it answers, the bridge counts as armed: misses are not hidden."""
        on_event = lambda m: self.set_controller_armed(m.goal_state.id == State.PRIMARY_STATE_ACTIVE)  # noqa: E731
        self._active_entities.append(self.create_subscription(
            TransitionEvent, f"{ARM_SWITCH}/transition_event", on_event, 10, callback_group=self.io_group
        ))  # fmt: skip
        if self.arm_client is None:  # one client for the node's life: activations come and go
            self.arm_client = self.create_client(
                GetState, f"{ARM_SWITCH}/get_state", callback_group=self.io_group
            )
        client = self.arm_client

        def ask() -> None:
            if client.service_is_ready() and not asked:
                asked.append(client.call_async(GetState.Request()))
                asked[0].add_done_callback(answered)

        def answered(future: Any) -> None:
            poll.cancel()
            if future.result() is not None:
                self.set_controller_armed(future.result().current_state.id == State.PRIMARY_STATE_ACTIVE)

        asked: list = []
        poll = self.timer(ARM_POLL_S, ask, self.io_group, steady=True)

    def deactivate(self) -> None:
        self.halt()

    def halt(self) -> None:
        """Stop the episodes and leave the robot on the contract's safe action (once: then it stays parked).

        The in-process bringup halts the robot before it stops the other nodes, so that no control period
        runs unanswered while they shut down; deactivate then finds it parked.
        """
        loop = self.loop
        if loop is None or self.parked is not None:
            return
        self.parked = loop.stop()
        self.get_logger().info(f"robot left on the safe action ({self.robot_spec.contract.safe_skill})")

    def cleanup(self) -> None:
        self._close_loop()

    def destroy_node(self) -> None:
        self._close_loop()  # also when finalize could not run (context already shut down)
        super().destroy_node()

    def _close_loop(self) -> None:
        if self.loop is not None:
            if self.loop.running:  # not deactivated (e.g. SIGTERM shut ROS down first): park it now
                self.parked = self.loop.stop()
            self.loop.close()
            self.loop = None

    def controller_ready(self) -> bool:
        """The controller is connected: its command publisher and the readers of its inputs are matched."""
        inputs = (PRIVILEGED,) if self.drive == "teacher" else (CAMERA, IMU)
        ready = self.command_sub.get_publisher_count() > 0
        ready = ready and all(self.pubs[t].get_subscription_count() > 0 for t in inputs)
        if not ready:
            self.warn_throttled("waiting", f"waiting for the controller: a publisher on {COMMAND} and "
                                f"readers of {', '.join(inputs)}")  # fmt: skip
        return ready

    def publish_release(self, r: Release) -> None:
        """Robot thread: one observation as messages, stamped with capture times (see the module doc).

        The inputs of whoever drives go out first: the other controller's work (the teacher's or the
        encoder's) then overlaps the driver's instead of delaying its inputs.
        """
        woke = time.monotonic()
        obs, epoch = r.obs, r.epoch_s
        self.epoch_s = epoch
        if r.imu_only:  # samples that reached the controller before the observation (streamed on their own)
            self._publish_imu(r)
            return
        t = epoch + float(obs.time_s[0])
        if self.stage_marks is not None and r.new_image and self.drive != "teacher":
            self.stage_marks.begin(epoch + float(obs.image_stamp_s[0]), r.due_mono_s, woke)
        self.pubs[CLOCK].publish(Clock(clock=sec_to_stamp(t)))
        if self.drive == "teacher":
            self._publish_privileged(obs, t)
            self._publish_sensors(r, t)
        else:
            self._publish_sensors(r, t)
            self._publish_privileged(obs, t)
        if r.new_proprio:
            x, y, yaw, v, w = obs.proprio[0, self.odom_columns]
            self.pubs[ODOM].publish(odometry_to_msg(x, y, yaw, v, w, epoch + float(obs.proprio_stamp_s[0])))
        for hook in self.release_hooks:
            hook(r, self.loop.robot)

    def _publish_sensors(self, r: Release, t: float) -> None:
        """The student's inputs: active skill, the new IMU samples (S, 6), then the new camera frame."""
        obs, epoch, task = r.obs, r.epoch_s, r.obs.task
        self.pubs[SKILL].publish(
            skill_state_to_msg(int(obs.skill[0]), float(task.progress[0]), float(task.step[0]), t)
        )
        self._publish_imu(r)
        if r.new_image:
            stamp = epoch + float(obs.image_stamp_s[0])
            self.pubs[CAMERA].publish(rgb_to_image(obs.image[0], stamp))
            if self.stage_marks is not None:
                self.stage_marks.mark("publish", stamp, time.monotonic())
            self.pubs[CAMERA_INFO].publish(camera_info_msg(self.camera_model, stamp))

    def _publish_imu(self, r: Release) -> None:
        """Each new IMU sample (S, 6) of the release as its own message, stamped when it was measured."""
        for sample, stamp in zip(r.imu, r.imu_stamps_s, strict=True):  # (S, 6), (S,)
            self.pubs[IMU].publish(sample_to_imu(sample, r.epoch_s + float(stamp)))

    def _publish_privileged(self, obs: Observation, t: float) -> None:
        """The teacher's input: the sim twin's true state with the active skill and step."""
        skill, step = int(obs.skill[0]), int(obs.task.step[0])
        self.pubs[PRIVILEGED].publish(privileged_to_msg(obs.privileged[0], skill, step, t, self.names))

    def on_command(self, msg: HybridAction, info: MessageInfo) -> None:
        """A hybrid action for the robot: decoded (bounds left to the robot's clipping) and offered."""
        now = self.now_s()
        try:
            stamp = checked_stamp(msg.header.stamp)
            skill, params = self.codec.from_msg(msg, bounded=False)
        except MessageError as err:
            self.reject(self.commands, err, now)
            return
        loop = self.loop  # read once: cleanup may close it beside this (multi-threaded executor)
        if loop is None:
            return
        with self.lock:
            self.commands.accept(stamp, now)
        loop.offer(skill, params, stamp - self.epoch_s, info["source_timestamp"] * 1e-9)

    def health(self, now: float) -> list[tuple[str, Status]]:
        if self.loop is None:  # cleaned up while the diagnostics timer ran (multi-threaded executor)
            return []
        loop = self.loop.stats()
        lat = np.array(loop.latency_s) * 1e3
        values = {
            "cycles": str(loop.cycles),
            "missed_cycles": str(loop.missed),
            "disarmed_cycles": str(loop.disarmed),
            "commands_ahead": str(loop.ahead),
            "commands_repeated": str(loop.repeated),  # answering nothing newer: not applied, no sign of life
            "overruns": str(loop.overruns),
            "episodes": str(loop.episodes),
            "successes": str(loop.successes),
            "clipped": str(sum(loop.clipped.values())),
            "safe_steps": str(loop.safe_steps),
            "safe_since": "" if loop.safe_since_s is None else f"{loop.safe_since_s:.3f}",
            "latency_p50_ms": f"{np.percentile(lat, 50):.1f}" if lat.size else "nan",
            "latency_p99_ms": f"{np.percentile(lat, 99):.1f}" if lat.size else "nan",
            "sim_time_s": f"{loop.sim_time_s:.2f}",
        }
        values.update({f"clipped.{k}": str(v) for k, v in sorted(loop.clipped.items())})
        repeated_seen, self._repeated_seen = self._repeated_seen, loop.repeated
        if self.loop.error is not None:
            status = Status(Level.ERROR, f"simulation stopped: {self.loop.error!r}", values)
        elif not self.loop.running:
            status = Status(Level.WARN, "not running", values)
        elif loop.cycles == 0:
            status = Status(Level.WARN, "waiting for the controller", values)
        elif not self.controller_armed:
            status = Status(Level.OK, "the controller is disarmed: robot on the safe action", values)
        elif (age := self.loop.command_age_s()) > self.command_timeout_s:
            safe = self.robot_spec.contract.safe_skill
            what = "no new command" if loop.repeated > repeated_seen else "no command"
            status = Status(Level.ERROR, f"{what} for {age:.1f} s: robot on the safe action ({safe})"
                            + (" (the controller repeats an old answer)" if what == "no new command" else ""),
                            values)  # fmt: skip
        else:
            status = Status(Level.OK, f"{loop.episodes} episodes, {loop.successes} successes", values)
        return [("robot", status), ("command", self.commands.status(now))]

    def summary(self) -> dict[str, str]:
        return dict(getattr(self, "summary_values", {}))


def main(args: list[str] | None = None) -> None:
    """`ros2 run agent sim_bridge`: spin until a signal (the robot is left on the safe action)."""
    run_node(SimBridgeNode, args)


if __name__ == "__main__":
    main()
