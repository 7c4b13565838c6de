"""OPD node shell: the topics and parameters of Online Policy Distillation, passing the student through.

The OPD core (opd/, its own issue) will pair student states with teacher actions by stamp and decide the
executed action. Until it lands this node checks every input against the skill contract, reports whether
a teacher is present, and republishes the student's action unchanged on /opd/action.
"""

from __future__ import annotations

from typing import Any

from sensor_msgs.msg import JointState

from agent.graph import TOPICS, node
from agent.lifecycle_node import AgentNode, run_node
from agent.messages import ActionCodec, MessageError, checked_stamp
from policies.artifact import Artifact
from policies.stream_stats import Level, Status, StreamStats

STATE, STUDENT, TEACHER, OUT = "/agent/state", "/agent/action", "/teacher/action", "/opd/action"


class OpdNode(AgentNode):
    """Pass-through of the student action, with checked inputs and teacher presence on /diagnostics."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(node("opd"), **kwargs)

    def configure(self) -> None:
        s = self.settings()
        if not s["artifact_dir"]:
            raise ValueError("artifact_dir is empty: pass the directory written by `agent export --out DIR`")
        # Only the contract is needed until the OPD core lands; loading verifies the artifact's hashes.
        self.codec = ActionCodec(Artifact.load(s["artifact_dir"]).contract)
        self.state = StreamStats("state", TOPICS[STATE].rate_hz)
        self.student = StreamStats("student_action", TOPICS[STUDENT].rate_hz)
        self.teacher = StreamStats("teacher_action", TOPICS[TEACHER].rate_hz, s["teacher_timeout_s"])
        self.pub = self.publisher(OUT)

    def activate(self) -> None:
        self.subscribe(STATE, self.on_state, self.io_group)
        self.subscribe(STUDENT, self.on_student, self.io_group)
        self.subscribe(TEACHER, self.on_teacher, self.io_group)

    def on_state(self, msg: JointState) -> None:
        self._checked(self.state, msg, action=False)

    def on_student(self, msg: JointState) -> None:
        if self._checked(self.student, msg, action=True):
            self.pub.publish(msg)

    def on_teacher(self, msg: JointState) -> None:
        self._checked(self.teacher, msg, action=True)

    def _checked(self, stream: StreamStats, msg: JointState, action: bool) -> bool:
        """Check the stamp (and an action's layout and bounds); count the message; True if usable.

        Action stamps need not increase: the policy interleaves safe actions stamped when sent with actions
        stamped with their (older) image. States carry image stamps, which must.
        """
        now = self.now_s()
        try:
            stamp = checked_stamp(msg.header.stamp)
            if action:
                self.codec.from_msg(msg)
            elif why := stream.check_stamp(stamp):
                raise MessageError("stamp", why)
        except MessageError as err:
            self.reject(stream, err, now)
            return False
        with self.lock:
            stream.accept(stamp, now)
        return True

    def health(self, now: float) -> list[tuple[str, Status]]:
        teacher = self.teacher.status(now)
        if teacher.level == Level.ERROR:
            # The student still acts without a teacher; there is just nothing to distil from.
            teacher = Status(Level.WARN, f"{teacher.message}; nothing to distil from", teacher.values)
        return [("state", self.state.status(now)), ("student_action", self.student.status(now)),
                ("teacher_action", teacher)]  # fmt: skip

    def summary(self) -> dict[str, str]:
        return {"mode": "pass_through (OPD core not yet available)"}


def main(args: list[str] | None = None) -> None:
    """`ros2 run agent opd`: spin until Ctrl-C, SIGTERM or shutdown."""
    run_node(OpdNode, args)


if __name__ == "__main__":
    main()
