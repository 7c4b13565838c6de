"""Teacher node: the teacher policy on the sim twin's privileged state -> /teacher/action.

The teacher (`policies.teacher_policy.TeacherPolicy`, trained by `agent train teacher`) sees what no real
robot can: the true state that the sim bridge publishes on /sim/privileged_state together with the active
skill. The teacher decides as it was trained to: with its deterministic head, on the states whose step is
a multiple of its `action_repeat` (a decision is held that many control periods; TeacherConfig), and
holds the decision in between. It answers every state with the action in force, stamped with the state's
stamp, so that OPD can pair it with the student's action for the same instant.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sensor_msgs.msg import JointState

from agent.commands.eval import DEFAULT_TEACHER
from agent.graph import TOPICS, node
from agent.lifecycle_node import AgentNode
from agent.messages import ActionCodec, MessageError, checked_stamp, msg_to_privileged, privileged_names
from agent.node_process import run_node
from policies.stream_stats import LatencyWindow, Status, StreamStats
from policies.teacher_policy import TeacherPolicy

STATE, ACTION = "/sim/privileged_state", "/teacher/action"

TeacherLoader = Callable[[Path], TeacherPolicy]


def default_checkpoint(artifact_dir: str) -> Path:
    """The teacher the deployed student was distilled from (`opd.live.loading.default_teacher`), as the opd
    node's learner uses it; the committed teacher without an artifact."""
    if not artifact_dir:
        return DEFAULT_TEACHER
    from opd.live.loading import default_teacher
    from policies.artifact import Artifact

    return default_teacher(Artifact.load(artifact_dir))


def load_checkpoint(path: Path) -> TeacherPolicy:
    """policies.teacher_policy.load_teacher, with an error that says how to get a checkpoint."""
    from policies.teacher_policy import load_teacher

    if not path.is_file():
        raise FileNotFoundError(
            f"no teacher checkpoint at {path}: train one with `agent train teacher --out DIR` and pass "
            "checkpoint:=DIR/teacher.pt"
        )
    return load_teacher(path)


class TeacherNode(AgentNode):
    """Acts on every privileged state; publishes the teacher's action with the state's stamp."""

    def __init__(self, teacher_loader: TeacherLoader = load_checkpoint, **kwargs: Any) -> None:
        self._load_teacher = teacher_loader
        self.teacher: TeacherPolicy | None = None
        super().__init__(node("teacher"), **kwargs)

    def configure(self) -> None:
        s = self.settings()
        path = Path(s["checkpoint"]) if s["checkpoint"] else default_checkpoint(s["artifact_dir"])
        self.teacher = teacher = self._load_teacher(path).eval()
        self.checkpoint = path
        self.contract = teacher.contract
        self.codec = ActionCodec(teacher.contract)
        # teacher.yaml names the privileged fields the teacher was trained on; without it the first message
        # fixes the layout (its size must still fit the teacher's input).
        meta = path.with_suffix(".yaml")
        fields = yaml.safe_load(meta.read_text()).get("privileged_fields") if meta.is_file() else None
        self.names = privileged_names(fields) if fields else None
        self.state_dim = teacher.obs_dim - teacher.contract.num_skills  # Dq
        self.repeat = teacher.cfg.action_repeat  # control periods a decision is held
        self.held: tuple[int, np.ndarray] | None = None  # decision in force: skill, params (P,)
        # a view that remembers sightings: fed the decision states in stamp order (older ones are refused
        # above), it restarts on the state's own episode counters (policies.teacher_view)
        self.sightings = teacher.new_memory(1)
        self.state_in = StreamStats("privileged_state", TOPICS[STATE].rate_hz, s["input_timeout_s"])
        self.future_tolerance_s = s["future_tolerance_s"]
        self.actions = StreamStats("action")
        self.act_time = LatencyWindow()
        self.clipped = 0
        self.pub = self.publisher(ACTION)

    def activate(self) -> None:
        self.subscribe(STATE, self.on_state, self.work_group)

    def deactivate(self) -> None:
        self.held = None
        if self.sightings is not None:
            self.sightings.reset()

    def cleanup(self) -> None:
        self.teacher = None

    def on_state(self, msg: JointState) -> None:
        now = self.now_s()
        try:
            stamp = checked_stamp(msg.header.stamp)
            skill, step, privileged = msg_to_privileged(msg, self._layout(msg), self.contract.num_skills)
            if why := self.state_in.check_stamp(stamp, now, self.future_tolerance_s):
                raise MessageError("stamp", why)
        except MessageError as err:
            self.reject(self.state_in, err, now)
            return
        with self.lock:
            self.state_in.accept(stamp, now)
        held = self.held  # read once: deactivate may clear it beside this (multi-threaded executor)
        if step % self.repeat == 0 or held is None:
            t0 = time.perf_counter()
            features = self.teacher.features(privileged[None], np.array([skill]), memory=self.sightings)
            skills, params = self.teacher.act(features)  # (1,), (1, P)
            act_s = time.perf_counter() - t0
            action = self.contract.clip(int(skills[0]), params[0])
            self.held = held = (action.skill, action.params)
            with self.lock:
                self.act_time.add(act_s)
                self.clipped += action.clipped
        self.pub.publish(self.codec.to_msg(*held, stamp, "teacher"))
        with self.lock:
            self.actions.accept(stamp, self.now_s())

    def _layout(self, msg: JointState) -> list[str]:
        """The expected names of a privileged state message (fixed by the first one without teacher.yaml)."""
        if self.names is None:
            if len(msg.name) != 2 + self.state_dim or list(msg.name[:2]) != ["skill", "step"]:
                raise MessageError("layout", f"privileged state has {len(msg.name)} names; the teacher "
                                   f"reads 'skill', 'step' and {self.state_dim} state fields")  # fmt: skip
            self.names = list(msg.name)
        return self.names

    def health(self, now: float) -> list[tuple[str, Status]]:
        out = self.actions.status(now)
        out.values.update({"act_p50_ms": f"{self.act_time.percentile_ms(50):.2f}",
                           "act_p99_ms": f"{self.act_time.percentile_ms(99):.2f}",
                           "clipped": str(self.clipped)})  # fmt: skip
        return [("privileged_state", self.state_in.status(now)), ("action", out)]

    def summary(self) -> dict[str, str]:
        if self.teacher is None:
            return {}
        return {"checkpoint": str(self.checkpoint), "action_repeat": str(self.repeat)}


def main(args: list[str] | None = None) -> None:
    """`ros2 run agent teacher`: spin until Ctrl-C, SIGTERM or shutdown."""
    run_node(TeacherNode, args)


if __name__ == "__main__":
    main()
