"""Policy node: state embedding -> hybrid action within the skill contract -> the student's action topic.

The student's action is a proposal: the opd node decides what is executed and is the one that commands
the base (/opd/action and /cmd_vel), whatever `drive` is.

Acting is event-driven: each fresh embedding is acted on and published at once, stamped with its image
stamp, so the camera-to-command latency does not include a timer phase. An embedding counts as fresh only
once everything that uses it has accepted it (the stamp checks, the float32 conversion and the model's own
input checks): a stream of unusable embeddings is a stale input, however regular. The head acts on the
window of the last fresh embeddings (`memory.frames` of the student; one for a head without memory),
emptied when the embeddings' step goes back (a new episode) or after a gap longer than `input_timeout_s`.
A watchdog timer (ROS clock, so it follows /clock with use_sim_time) checks freshness
(`policies.safe_fallback.SafeFallback`): with no usable embedding for `input_timeout_s` it proposes the
contract's safe action (`stop`) once, then every 1/`safe_keepalive_hz` s, and reports ERROR; acting resumes
with the next fresh embedding. Every published action goes through `SkillContract.clip`, so it is within
the contract bounds whatever the model returns.

Student versions: the opd node, learning online, announces new artifact versions on
/agent/student_version. Each is loaded on a thread of its own (its hashes verified), checked against the
acting student (contract, embedding width) and swapped in between two actions; a version that fails any
check is refused, counted, and the old student keeps acting.
"""

from __future__ import annotations

import json
import time
from threading import Thread
from typing import Any

import numpy as np
from agent_interfaces.msg import StateEmbedding
from std_msgs.msg import String

from agent.acting_node import ACK_TIMEOUT, ActingNode
from agent.graph import TOPICS, node
from agent.messages import MessageError, checked_stamp, msg_to_embedding, sec_to_stamp
from agent.node_process import run_node
from agent.nodes import RuntimeLoader
from policies.embedding_window import EmbeddingWindow
from policies.runtime import StudentRuntime, load_student
from policies.stream_stats import LatencyWindow, Level, Status, StreamStats

STATE, ACTION, VERSION = "/agent/state", "/agent/action", "/agent/student_version"


class PolicyNode(ActingNode):
    """Acts on fresh state embeddings; falls back to the safe action when they stop."""

    def __init__(self, runtime_loader: RuntimeLoader = load_student, **kwargs: Any) -> None:
        self._load_runtime = runtime_loader
        self.runtime: StudentRuntime | None = None
        super().__init__(node("policy"), **kwargs)

    def configure(self) -> None:
        s = self.settings()
        threads = {"threads": s["inference_threads"]} if s["inference_threads"] else {}
        if not s["artifact_dir"]:
            raise ValueError("artifact_dir is empty: pass the directory written by `agent export --out DIR`")
        self.load_options = {"backend": s["backend"], **threads}  # student versions load the same way
        self.runtime = rt = self._load_runtime(s["artifact_dir"], **self.load_options)
        self.embed_dim, self.encoder_hash = rt.embed_dim, rt.artifact.encoder_hash
        self.window = EmbeddingWindow(1, rt.memory, rt.embed_dim)  # the head's input: the last frames
        self.window_step, self.window_stamp = -1, -np.inf  # of the newest frame in the window
        self.input_timeout_s = s["input_timeout_s"]
        self.future_tolerance_s = s["future_tolerance_s"]
        self.state_in = StreamStats("state", TOPICS[STATE].rate_hz, self.input_timeout_s)
        self.actions = StreamStats("action")  # model actions; latency here = image stamp -> publish
        self.act_time = LatencyWindow()
        self.configure_acting(rt.contract, s, ACTION)  # model outputs clipped into its contract
        self.versions = StreamStats("student_version")  # announced versions: swapped (accepted) or refused
        self.version = 0  # the student version acting; 0 = the artifact as deployed

    def activate(self) -> None:
        self.start_acting()
        self.subscribe(STATE, self.on_state, self.work_group)
        self.subscribe(VERSION, self.on_version, self.io_group)

    def deactivate(self) -> None:
        """Leave the robot stopped: send the safe action and give it a moment to be acknowledged."""
        self.stop_acting()  # from here on no model action goes out, even from a callback already running
        self.pub_action.wait_for_all_acked(ACK_TIMEOUT)

    def cleanup(self) -> None:
        self.runtime = None

    def on_state(self, msg: StateEmbedding) -> None:
        woke = time.monotonic()
        now = self.now_s()
        try:
            stamp = checked_stamp(msg.header.stamp)
            if self.stage_marks is not None:
                self.stage_marks.mark("state hop to policy", stamp, woke)
            embedding = msg_to_embedding(msg, self.embed_dim, self.encoder_hash)  # (E,)
            if why := self.state_in.check_stamp(stamp, now, self.future_tolerance_s):
                raise MessageError("stamp", why)
        except MessageError as err:
            self.reject(self.state_in, err, now)
            return
        if now - stamp > self.input_timeout_s:
            self.drop(
                self.state_in,
                "late",
                f"state is {now - stamp:.3f} s old (timeout {self.input_timeout_s} s)",
                now,
            )
            return
        if msg.step < self.window_step or stamp - self.window_stamp > self.input_timeout_s:
            self.window.reset()  # a new episode, or a gap: the frames before it are no history of this one
        self.window_step, self.window_stamp = msg.step, stamp
        t0 = time.perf_counter()
        try:
            _, skill, params = self.runtime.act_window(self.window.push(np.array([0]), embedding[None]))
            skill, params = int(skill[0]), params[0]
        except ValueError as err:
            self.reject(self.state_in, MessageError("model_input", str(err)), now)
            return
        act_s = time.perf_counter() - t0
        action = self.clip(skill, params, "policy output")
        with self.lock:  # fresh only now that the model has used it
            self.state_in.accept(stamp, now)
            self.act_time.add(act_s)
        if self.stage_marks is not None:
            self.stage_marks.mark("policy decision", stamp, time.monotonic())
        if self.send(action, sec_to_stamp(stamp), "student", self.actions):
            self.get_logger().info("fresh state embeddings: acting")

    def on_version(self, msg: String) -> None:
        """A new student version: verify and load it on a thread of its own, then swap between two actions."""
        now = self.now_s()
        try:
            note = json.loads(msg.data)
            number, path = int(note["number"]), str(note["path"])
        except (ValueError, KeyError, TypeError, OverflowError) as err:  # OverflowError: a number of Infinity
            self.reject(self.versions, MessageError("format", f"not a version note: {err}"), now)
            return
        if number <= self.version:
            self.drop(self.versions, "old", f"version {number} is not newer than {self.version}", now)
            return
        Thread(target=self._swap_to, args=(number, path), name=f"load-v{number}", daemon=True).start()

    def _swap_to(self, number: int, path: str) -> None:
        """Load (hashes verified), check it fits the acting student, swap; else keep the old one."""
        now = self.now_s()
        try:
            runtime = self._load_runtime(path, **self.load_options)
            current = self.runtime
            if current is None:
                raise ValueError("the node was cleaned up meanwhile")
            if runtime.contract.model_dump() != current.contract.model_dump():
                raise ValueError("its skill contract differs from the acting student's")
            if runtime.artifact.encoder_hash != current.artifact.encoder_hash:
                raise ValueError("its encoder differs from the acting student's: it reads other embeddings")
            if runtime.memory != current.memory:
                raise ValueError(
                    f"its head acts on {runtime.memory} frames, the acting one's on {current.memory}"
                )
        # Whatever a loader raises refuses the version (ONNX Runtime's load errors subclass only Exception):
        # an uncaught one would end this thread unreported.
        except Exception as err:
            self.reject(self.versions, MessageError("refused", f"version {number} ({path}): {err}"), now)
            return
        with self.lock:
            if number <= self.version:  # a newer one swapped in while this one loaded
                return
            self.runtime, self.version = runtime, number  # on_state reads it once per action: between two
            self.versions.accept(now, now)
        self.get_logger().info(f"acting with student version {number} ({path})")

    def silence(self, now: float) -> str:
        return f"no fresh state for {self.input_timeout_s} s"

    def health(self, now: float) -> list[tuple[str, Status]]:
        state = self.state_in.status(now)
        if state.level == Level.ERROR:
            state.message += f"; sending the safe action ({self.contract.safe_skill})"
        out = self.actions.status(now)
        out.values.update({
            "act_p50_ms": f"{self.act_time.percentile_ms(50):.2f}",
            "act_p99_ms": f"{self.act_time.percentile_ms(99):.2f}",
            "clipped": str(self.clipped),
            "safe_actions": str(self.fallback.safe_sent),
        })  # fmt: skip
        return [("state", state), ("action", out), ("student_version", self.versions.status(now))]

    def summary(self) -> dict[str, str]:
        runtime = self.runtime  # read once: cleanup may clear it beside the diagnostics timer
        if runtime is None:
            return {}
        stale = self.fallback.stopped
        mode = f"safe action ({self.contract.safe_skill}): inputs stale" if stale else "acting"
        return {"backend": runtime.backend, "precision": runtime.precision, "mode": mode,
                "student_version": str(self.version)}  # fmt: skip


def main(args: list[str] | None = None) -> None:
    """`ros2 run agent policy`: spin until a signal (the safe action goes out on the way) or shutdown."""
    run_node(PolicyNode, args)


if __name__ == "__main__":
    main()
