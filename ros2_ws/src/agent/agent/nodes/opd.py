"""OPD node: the one place the executed action comes from, the action the robot follows.

`drive` (a launch argument it shares with the sim bridge, `agent.graph.DRIVE_SOURCES`) picks whose action
is executed:
- opd: OPD's decision. The OPD core (`opd.distill.learner.OnlineDistillation`) runs here on the
  artifact's head and predictor: each /sim/privileged_state joins its buffer as a teacher entry (the
  frozen teacher's action on it), each /agent/state embedding as a student frame; on each embedding the
  gate executes the student's action, or the teacher's when the predictor's error is high, and
  /opd/gate says which, why, the error and threshold, and what the decision saw (its time and newest
  teacher stamp: `opd.distill.decision_stream`, so `agent replay` reproduces it). Without a teacher stream
  (sim:=none) the student acts alone. With `learn`, a learner process trains the head and the predictor
  online; acting uses a copy of their weights that each update swaps in, so a callback never waits for a
  gradient step; every `version_every_s` the learnt student is written as a new artifact version (hashes,
  atomic) and announced on /agent/student_version, so the policy node's proposals follow it too. Fused
  with the encoder (`agent.bringup`), the node takes its embeddings in the encoder's callback and the
  privileged states at the start of each decision (`take_privileged`);
- student: the student's /agent/action;
- teacher: the teacher's /teacher/action (sim only: with sim:=none no teacher runs).
Each executed action goes out on /opd/action, then its Twist on /cmd_vel (`agent.base_command.TwistMapping`,
the mapping the robot's base controller applies; TwistStamped stamped when issued, in `base_frame_id`, or
plain Twist with `cmd_vel_stamped:=false`), from the same decision under one lock, so the two streams pair
up message by message. It keeps the stamp of the input it answers (the camera image's for the student,
the privileged state's for the teacher), which is how the sim bridge matches answers and measures latency,
and it passes `SkillContract.clip`. The policy no longer commands the base: /agent/action is a proposal.

What reaches /cmd_vel, by state (this node is the arm switch, `agent.graph.NodeSpec.arms`):
- disarmed (configured, inactive; how a real robot starts): nothing at all, so teleop or a mux own the base;
- armed, the source acting: one command per executed action (20 Hz), unless its input is older than
  `max_input_age_s` by then (a starved process decided late): that one is not sent but counted
  (`stale_not_sent` on /diagnostics), and the watchdog below stops the base if nothing fresher follows;
- armed, the source silent: with no action from the executed source for `input_timeout_s` (none yet after
  activation; with drive teacher and sim:=none, never) the contract's safe action (`stop`, stamped when
  sent) on both topics at the next watchdog check (`watchdog_rate_hz`), then one every
  1/`safe_keepalive_hz` s (1 s) until the source acts again, and ERROR on /diagnostics, rather than act with
  another source: a decisive stop, not a 20 Hz flood (`policies.safe_fallback`);
- stopping (disarm, Ctrl-C, shutdown): the safe action once, waited for until acknowledged, then nothing.
Behind a twist_mux, give this topic a timeout under 1/`safe_keepalive_hz` (e.g. 0.5 s) and teleop a higher
priority: a stopped stack then holds the mux only for an instant per keep-alive. The policy's own safe
action on stale embeddings is a student action like any other and is executed as such.

Inputs are checked: actions against the contract (layout, skill id, bounds: malformed ones are counted and
rejected, never executed), state embeddings by stamp. Teacher presence is reported; without a teacher there
is nothing to distil from (WARN), unless the teacher is to drive (then the executed action's ERROR says so).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from agent_interfaces.msg import GateState, HybridAction, StateEmbedding
from builtin_interfaces.msg import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from agent.acting_node import ACK_TIMEOUT, ActingNode
from agent.base_command import TwistMapping
from agent.graph import DRIVE_SOURCES, TOPICS, node
from agent.messages import (
    SOURCES,
    MessageError,
    checked_stamp,
    msg_to_embedding,
    msg_to_privileged,
    privileged_names,
)
from agent.node_process import run_node
from agent.ros_io import drain
from agent.stage_marks import FINAL
from policies.artifact import MANIFEST, Artifact, sha256_file
from policies.stream_stats import Level, Status, StreamStats

if TYPE_CHECKING:
    from opd.distill.decision_stream import StreamDecision
    from opd.live.process import LearnerProcess

STATE, STUDENT, TEACHER = "/agent/state", "/agent/action", "/teacher/action"
PRIVILEGED, ACTION, CMD_VEL, GATE = "/sim/privileged_state", "/opd/action", "/cmd_vel", "/opd/gate"
VERSION = "/agent/student_version"
# With no frame for this long, the watchdog takes the privileged states instead (see `take_privileged`):
# two camera periods, well inside the topic's history (10 messages, 0.5 s at 20 Hz).
PRIVILEGED_IDLE_S = 0.1
SOURCE_NAMES = {STATE: "OPD (student or teacher)", STUDENT: "student", TEACHER: "teacher"}


class OpdNode(ActingNode):
    """Executes the `drive` source's action on /opd/action and /cmd_vel; the safe action when it is silent."""

    def __init__(self, **kwargs: Any) -> None:
        self.learner_process: LearnerProcess | None = None
        self.last_gate: Any = None  # the gate's last Decision (drive opd), for progress displays
        # Which robot this is, on /diagnostics beside its lifecycle state: what `agent arm` shows an operator
        # before it arms a stack (`agent.stack_discovery`).
        self.host = socket.gethostname()
        self.artifact_name = ""
        # Set by `agent.bringup` (fused) before activation: the encoder on this node's executor hands each
        # embedding to `take_state` in its own callback, so the node does not subscribe to /agent/state.
        self.states_in_process = False
        super().__init__(node("opd"), **kwargs)

    def configure(self) -> None:
        s = self.settings()
        if not s["artifact_dir"]:
            raise ValueError("artifact_dir is empty: pass the directory written by `agent export --out DIR`")
        artifact = Artifact.load(s["artifact_dir"])  # verifies the artifact's hashes
        self.artifact_name = f"{artifact.root} (manifest sha256 {sha256_file(artifact.root / MANIFEST)[:12]})"
        self.learner = None
        self.privileged_sub = None  # fused: polled, taken at the start of each decision
        self.privileged_taken_s = 0.0  # monotonic time privileged states were last taken, s
        if s["drive"] == "opd":
            # The OPD core (torch) only where it decides: drive student or teacher starts in ~1 s, not ~6 s.
            from opd.distill.decision_stream import DecisionStream
            from opd.live.loading import default_versions_dir, load_learner
            from opd.live.process import LearnerProcess, LearnerSpec

            # acting only: with `learn`, the store and the gradient steps are the learner process's
            # the head and predictor act in ONNX Runtime (`opd.distill.onnx_acting`); learning reaches them
            # as student versions
            self.learner = load_learner(artifact, s["teacher_checkpoint"], s["opd_config"], learning=False,
                                        onnx=True)  # fmt: skip
            self.base_artifact = artifact
            self.announced_version = 0
            self.embed_dim = self.learner.student.cfg.encoder.embed_dim
            self.encoder_hash = artifact.encoder_hash
            fields = artifact.model("predictor").get("fields") or []
            self.privileged_names = privileged_names(fields)
            self.learner_process = None
            if s["learn"]:
                versions = ""
                if s["version_every_s"] > 0:
                    versions = str(s["versions_dir"] or default_versions_dir(artifact))
                else:
                    self.get_logger().warning("learn with version_every_s 0: no version is written, so what "
                                              "is learnt never acts")  # fmt: skip
                spec = LearnerSpec(
                    str(artifact.root), s["teacher_checkpoint"], s["opd_config"], max_share=s["learn_share"],
                    nice=s["learn_nice"], versions_dir=versions, version_every_s=s["version_every_s"],
                    send_weights=False,
                )  # fmt: skip
                self.learner_process = LearnerProcess(self.learner, spec, self.take_version)
            elif self.learner.acting_novelty is not None and artifact.weights.novelty is None:
                self.get_logger().warning(
                    f"opd switch {self.learner.cfg.switch!r} without learn: the artifact holds no novelty "
                    "ensemble and nothing trains one here, so the gate reads an untrained ensemble"
                )
            self.stream = DecisionStream(self.learner)
        self.mapping = TwistMapping(artifact.contract)
        self.drive = s["drive"]
        self.source = DRIVE_SOURCES[self.drive]
        self.state = StreamStats("state", TOPICS[STATE].rate_hz)
        self.student = StreamStats("student_action", TOPICS[STUDENT].rate_hz)
        self.teacher = StreamStats("teacher_action", TOPICS[TEACHER].rate_hz, s["teacher_timeout_s"])
        self.privileged = StreamStats("privileged_state", TOPICS[PRIVILEGED].rate_hz, s["teacher_timeout_s"])
        self.executed = StreamStats("executed_action", TOPICS[ACTION].rate_hz)  # latency: stamp -> sent
        self.configure_acting(artifact.contract, s, ACTION, s["max_input_age_s"])  # clipped into its contract
        self.cmd_stamped, self.base_frame_id = s["cmd_vel_stamped"], s["base_frame_id"]
        self.pub_cmd = self.publisher(CMD_VEL, None if self.cmd_stamped else "geometry_msgs/msg/Twist")
        self.pub_gate = self.publisher(GATE)
        self.pub_version = self.publisher(VERSION)

    def activate(self) -> None:
        self.start_acting()
        if not self.states_in_process:
            self.subscribe(STATE, self.on_state, self.io_group)
        self.subscribe(STUDENT, self.on_student, self.io_group)
        self.subscribe(TEACHER, self.on_teacher, self.io_group)
        if self.states_in_process:
            self.privileged_sub = self.poll(PRIVILEGED)  # see take_privileged
        else:
            self.subscribe(PRIVILEGED, self.on_privileged, self.io_group)
        if self.learner_process is not None:
            self.learner_process.start()

    def deactivate(self) -> None:
        """Leave the robot stopped: send the safe action and give it a moment to be acknowledged."""
        self.stop_acting()  # from here on nothing else goes out, even from a callback already running
        if self.learner_process is not None:
            self.learner_process.stop()
        self.pub_action.wait_for_all_acked(ACK_TIMEOUT)
        self.pub_cmd.wait_for_all_acked(ACK_TIMEOUT)

    def halt(self) -> None:
        """No source action after a stop signal: `send` and the watchdog read `acting` under the lock, so
        at most an action already past that check goes out, before the stop that deactivate sends."""
        self.acting = False  # a plain store, safe without the lock (see AgentNode.halt)

    def cleanup(self) -> None:
        self.learner = self.learner_process = None

    def destroy_node(self) -> None:
        if self.learner_process is not None:  # also when finalize could not run (context already shut down)
            self.learner_process.stop()
        super().destroy_node()

    def on_state(self, msg: StateEmbedding) -> None:
        """A state embedding: with drive opd, a student frame for the OPD core, and its decision executed."""
        woke = time.monotonic()
        now = self.now_s()
        try:
            stamp = checked_stamp(msg.header.stamp)
            if self.stage_marks is not None and self.learner is not None:
                self.stage_marks.mark("state hop to opd", stamp, woke)
            if why := self.state.check_stamp(stamp):
                raise MessageError("stamp", why)
            learning = self.learner is not None
            embedding = msg_to_embedding(msg, self.embed_dim, self.encoder_hash) if learning else None
        except MessageError as err:
            self.reject(self.state, err, now)
            return
        if embedding is None:
            with self.lock:
                self.state.accept(stamp, now)
            return
        self.decide(embedding, stamp, now, msg.header.stamp)

    def take_state(self, msg: StateEmbedding) -> None:
        """A state embedding handed over in-process (fused with the encoder: `agent.bringup`): `on_state`
        while active, as the subscription it stands in for; nothing while disarmed."""
        if self.acting:
            self.on_state(msg)

    def decide(self, embedding: np.ndarray, stamp: float, now: float, header_stamp: Time) -> None:
        """OPD on one student frame (E,): join the buffer, let the gate choose, execute and report it.

        A frame the buffer refuses (from the future, stale, late, duplicate, non-finite, the last episode's)
        is dropped before its stamp is recorded: one frame stamped ahead must not make the next ones look
        like a clock going back."""
        if self.privileged_sub is not None:
            self.take_privileged()
        decided = self.stream.on_frame(stamp, embedding, now)
        if decided is None:
            refusals = self.stream.refusals
            self.drop(self.state, "refused", f"student frame refused by the OPD buffer: {refusals}", now)
            return
        with self.lock:
            self.state.accept(stamp, now)
        decision = decided.decision
        if self.stage_marks is not None:
            self.stage_marks.mark("opd decision", stamp, time.monotonic())
        self.execute(int(decision.skill[0]), decision.params[0], header_stamp, decided.source)
        gate = gate_state(decided)
        gate.header.stamp = header_stamp
        self.pub_gate.publish(gate)
        self.last_gate = decision
        if decided.version > self.announced_version:
            self.announce_version(decided)

    def take_version(self, path: Path, number: int) -> None:
        """A student version was written (learner process; on its receiver thread): load it, hashes checked,
        for the OPD core to act with from its next frame on. One that does not load is refused and the
        current one keeps acting."""
        from opd.live.loading import acting_version

        try:
            self.stream.offer(*acting_version(path, self.base_artifact))
        except (OSError, ValueError) as err:  # ArtifactError is a ValueError
            self.get_logger().error(f"student version {number} refused, the current one acts on: {err}")

    def announce_version(self, decided: StreamDecision) -> None:
        """The first decision with a new student version: announce it, latched, to the policy node, with
        that decision's frame stamp (`stamp`, s), where `agent replay` swaps it in too."""
        acting = self.learner.onnx
        note = {"number": decided.version, "path": str(acting.artifact.root), "stamp": decided.stamp}
        self.pub_version.publish(String(data=json.dumps(note)))
        self.announced_version = decided.version
        self.get_logger().info(f"student version {decided.version} acts: {acting.artifact.root}")

    def take_privileged(self) -> None:
        """Join every privileged state delivered so far, in arrival order, as teacher entries.

        Fused with the encoder, the node takes them here, at the start of each decision (and from the
        watchdog while no frame comes), not in callbacks of their own: on the encoder's thread such a
        callback ran after the frame's decision, which then saw the teacher a control period late. Taken
        here, a decision sees what it saw on a thread of its own (the states delivered before it, its
        `teacher_upto` on /opd/gate), so `agent replay` reproduces it. Unfused, a callback of its own
        measured faster: the teacher's inference then overlaps the encoder's (docs/graph.md, Latency)."""
        self.privileged_taken_s = time.monotonic()
        for msg, _ in drain(self.privileged_sub):
            self.on_privileged(msg)

    def watchdog(self) -> None:
        """The executed source's staleness check; while no frame comes, it takes the privileged states."""
        if self.privileged_sub is not None and time.monotonic() - self.privileged_taken_s > PRIVILEGED_IDLE_S:
            self.take_privileged()
        super().watchdog()

    def on_privileged(self, msg: JointState) -> None:
        """The sim twin's true state: the teacher entry of the OPD core (the frozen teacher acts on it)."""
        now = self.now_s()
        learner = self.learner
        try:
            stamp = checked_stamp(msg.header.stamp)
            if learner is not None:
                skill, step, state = msg_to_privileged(msg, self.privileged_names, self.contract.num_skills)
            if why := self.privileged.check_stamp(stamp):
                raise MessageError("stamp", why)
        except MessageError as err:
            self.reject(self.privileged, err, now)
            return
        # With drive opd a state the buffer refuses is dropped before its stamp is recorded (see `decide`).
        if learner is not None and not self.stream.on_teacher(stamp, skill, step, state, now):
            self.drop(self.privileged, "refused",
                      f"privileged state refused by the OPD buffer: {self.stream.refusals}", now)  # fmt: skip
            return
        with self.lock:
            self.privileged.accept(stamp, now)

    def on_student(self, msg: HybridAction) -> None:
        self._on_action(STUDENT, self.student, msg)

    def on_teacher(self, msg: HybridAction) -> None:
        self._on_action(TEACHER, self.teacher, msg)

    def _on_action(self, topic: str, stream: StreamStats, msg: HybridAction) -> None:
        """Check an action (stamp, layout, skill id, bounds), count it, and execute it if `topic` drives.

        Action stamps need not increase: the policy interleaves safe actions stamped when sent with actions
        stamped with their (older) image.
        """
        woke = time.monotonic()
        now = self.now_s()
        try:
            stamp = checked_stamp(msg.header.stamp)
            if self.stage_marks is not None and topic == self.source:
                self.stage_marks.mark("action hop to opd", stamp, woke)
            skill, params = self.codec.from_msg(msg)
        except MessageError as err:
            self.reject(stream, err, now)
            return
        with self.lock:
            stream.accept(stamp, now)
        if topic == self.source:
            self.execute(skill, params, msg.header.stamp, SOURCES[msg.source])

    def execute(self, skill: int, params: np.ndarray, stamp: Time, source: str) -> None:
        """The source's action, within the contract and with its input's stamp, to the robot; `source` (one
        of SOURCES) says who decided it: a policy's safe action on stale inputs stays "safe"."""
        action = self.clip(skill, params, "executed action")
        if self.send(action, stamp, source, self.executed):
            self.get_logger().info(f"{SOURCE_NAMES[self.source]} actions again: executing them")

    def publish(self, skill: int, params: np.ndarray, stamp: Time, source: str) -> None:
        """The executed action (within the contract) on /opd/action, then its Twist on /cmd_vel."""
        super().publish(skill, params, stamp, source)
        if self.stage_marks is not None:  # a safe action's stamp (when sent) marks no frame
            self.stage_marks.mark(FINAL, checked_stamp(stamp), time.monotonic())
        if self.cmd_stamped:
            now = self.get_clock().now().to_msg()
            self.pub_cmd.publish(self.mapping.twist_stamped(skill, params, now, self.base_frame_id))
        else:
            self.pub_cmd.publish(self.mapping.twist(skill, params))

    def silence(self, now: float) -> str:
        who = SOURCE_NAMES[self.source]
        last = self.fallback.last_action_s
        if last is None:
            absent = " (no teacher runs with sim:=none)" if self.source == TEACHER else ""
            return f"drive {self.drive}: no {who} action yet{absent}"
        timeout = self.fallback.timeout_s
        return f"drive {self.drive}: no {who} action for {now - last:.2f} s (timeout {timeout} s)"

    def health(self, now: float) -> list[tuple[str, Status]]:
        learner = self.learner  # read once: cleanup may clear it beside the diagnostics timer
        # drive opd starts no policy or teacher node (`agent.graph.NodeSpec.off_with`): the OPD core acts as
        # both, and the privileged state is the teacher's presence
        teacher = (self.privileged if learner is not None else self.teacher).status(now)
        if teacher.level == Level.ERROR and self.source != TEACHER:
            # The student still acts without a teacher; there is just nothing to distil from.
            teacher = Status(Level.WARN, f"{teacher.message}; nothing to distil from", teacher.values)
        executed = self.executed.status(now)
        executed.values.update({
            "drive": self.drive,
            "source": self.source,
            "safe_actions": str(self.fallback.safe_sent),
            "clipped": str(self.clipped),
            "stale_not_sent": str(self.stale),
        })  # fmt: skip
        if self.fallback.silent(now):
            safe, period = self.contract.safe_skill, self.fallback.keepalive_s
            executed = Status(Level.ERROR, f"{self.silence(now)}; sending the safe action ({safe}), "
                              f"repeated every {period:g} s", executed.values)  # fmt: skip
        if learner is not None:
            gate = gate_health(learner, self.learner_process)
            return [("state", self.state.status(now)), ("privileged_state", teacher),
                    ("executed_action", executed), ("gate", gate)]  # fmt: skip
        return [("state", self.state.status(now)), ("student_action", self.student.status(now)),
                ("teacher_action", teacher), ("executed_action", executed)]  # fmt: skip

    def summary(self) -> dict[str, str]:
        identity = {"host": self.host, "artifact": self.artifact_name or "(not configured)"}
        if self.fallback is None:  # not configured yet
            return identity
        who = SOURCE_NAMES[self.source]
        mode = f"executing the {who}'s action"
        if self.fallback.stopped:
            mode = f"safe action ({self.contract.safe_skill}): the {who} is silent"
        return {**identity, "drive": self.drive, "mode": mode}


def gate_state(decided: StreamDecision) -> GateState:
    """A gate decision as /opd/gate (the caller stamps it with the frame's header stamp): who acts, why,
    error and threshold, and the context replay decides in (`opd.distill.decision_stream`)."""
    decision = decided.decision
    return GateState(source=SOURCES.index(decided.source), reason=decided.reason,
                     error=float(decision.error[0]), threshold=float(decision.threshold),
                     decided_at=decided.now, teacher_upto=decided.teacher_upto)  # fmt: skip


def gate_health(learner: Any, process: LearnerProcess | None) -> Status:
    """The gate's counts on /diagnostics: teacher share, switches, reasons, and the learner's progress."""
    stats = learner.stats()
    decisions, teacher = stats["decisions"], stats["teacher_decisions"]
    values = {"decisions": str(decisions), "teacher_share": f"{teacher / max(decisions, 1):.3f}",
              "switches": str(stats["switches"]), "learning": str(process is not None)}  # fmt: skip
    if process is not None:
        values.update({"samples": str(process.sent), "samples_dropped": str(process.dropped),
                       "updates": str(process.updates)})  # fmt: skip
    values.update({f"count.{k}": str(v) for k, v in sorted(stats["gate_counts"].items())})
    if process is not None and process.error is not None:
        return Status(Level.ERROR, f"learner process stopped: {process.error!r}; acting goes on", values)
    return Status(Level.OK, f"teacher on {teacher} of {decisions} decisions", values)


def main(args: list[str] | None = None) -> None:
    """`ros2 run agent opd`: spin until a signal (the safe action goes out on the way) or shutdown."""
    run_node(OpdNode, args)


if __name__ == "__main__":
    main()
