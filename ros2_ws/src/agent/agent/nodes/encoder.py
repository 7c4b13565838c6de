"""Encoder node: camera + IMU window + active skill -> state embedding, stamped with the image stamp.

Camera, IMU and active skill share one callback group with inference: IMU samples go into an `ImuBuffer`,
images into a short queue of images waiting for their IMU window, and whichever message completes a pair
encodes it in the same callback, with no hand-off to another thread or executor wake-up. The image callback
first takes the IMU samples and skill states already delivered (the sim bridge and a task layer send them
ahead of the frame), so the usual frame is encoded the moment it arrives, with the skill state published
before it: not one that raced it on another thread, which is also what a bag replay can reproduce
(`agent replay` pairs each frame with the last skill state recorded before it). Encoding takes
the newest image whose IMU has reached its stamp (older waiting images are dropped: latency beats
completeness), cuts the IMU window of the last samples at or before that stamp (a window with a gap is
counted and warned about, a sustained low IMU rate too), runs the exported encoder and publishes. Images
wait while the IMU lags and are dropped once older than `max_latency_s`. While a frame encodes, IMU
samples wait in the subscription's history (200 samples, 1 s); each IMU callback takes the rest of a
burst at once (`agent.ros_io.drain`). Camera and IMU are best effort: messages their publishers sent that
never arrived are counted as dropped ("lost").

The camera's CameraInfo is compared with the camera the student was trained with (`Artifact.camera`,
`policies.camera_model.mismatches`): a field of view or distortion beyond the stated tolerance is a WARN
on /diagnostics ("camera_model") naming both values. It is compared when it changes, not per frame; an
artifact without a camera model is said so there, and nothing is checked.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from agent_interfaces.msg import StateEmbedding
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import CameraInfo, Image, Imu, JointState

from agent.graph import TOPICS, node
from agent.lifecycle_node import AgentNode
from agent.messages import (
    MessageError,
    camera_info_to_model,
    checked_stamp,
    embedding_to_msg,
    image_to_rgb,
    imu_to_sample,
    msg_to_skill_state,
)
from agent.node_process import run_node
from agent.nodes import RuntimeLoader
from agent.ros_io import drain
from agent.sequence_gaps import SequenceGaps
from policies.camera_model import CameraModel, mismatches
from policies.imu_buffer import ImuBuffer, ImuMatch, MatchStatus
from policies.preprocessing import resize_rgb
from policies.runtime import StudentRuntime, load_student
from policies.stream_stats import LatencyWindow, Level, Status, StreamStats

CAMERA, IMU, SKILL, STATE = "/camera/image_raw", "/imu/data", "/agent/active_skill", "/agent/state"
CAMERA_INFO = "/camera/camera_info"
# An IMU below 90% of its nominal rate is WARN (a half-rate one was not): IMUs keep their rate.
IMU_SLOW_FRACTION = 0.9
MAX_WAITING = 8  # images held while the IMU lags (8 x 50 ms covers max_latency_s at 20 Hz); bounds memory
# Order of the encoder's `gates` output: policies.fusion.MODALITIES (a test keeps them equal).
GATES = ("image", "imu", "skill", "time")


class EncoderNode(AgentNode):
    """Aligns camera and IMU by stamp and publishes the state embedding."""

    def __init__(self, runtime_loader: RuntimeLoader = load_student, **kwargs: Any) -> None:
        self._load_runtime = runtime_loader
        self.runtime: StudentRuntime | None = None
        # Where the node's executor also runs the opd node (`agent.bringup`, fused): called with each
        # embedding after it is published, in this callback, so the decision follows without a hop.
        self.hand_over: Callable[[StateEmbedding], None] | None = None
        super().__init__(node("encoder"), **kwargs)

    def configure(self) -> None:
        s = self.settings()
        options = {"threads": s["inference_threads"]} if s["inference_threads"] else {}
        if s["precision"]:
            options["precision"] = s["precision"]
        if not s["artifact_dir"]:
            raise ValueError("artifact_dir is empty: pass the directory written by `agent export --out DIR`")
        self.runtime = rt = self._load_runtime(s["artifact_dir"], backend=s["backend"], **options)
        if s["imu_buffer_size"] < rt.imu_window:
            raise ValueError(
                f"imu_buffer_size ({s['imu_buffer_size']}) < the model's IMU window ({rt.imu_window})"
            )
        self.max_latency_s = s["max_latency_s"]
        self.future_tolerance_s = s["future_tolerance_s"]  # images and skill states (the IMU: its own)
        imu_rate = rt.imu_rate_hz  # the rate the model was trained at
        self.imu_buffer = ImuBuffer(
            rt.imu_window, s["imu_buffer_size"], s["sync_tolerance_s"], period_s=1.0 / imu_rate,
            future_tolerance_s=s["imu_future_tolerance_s"],
        )  # fmt: skip
        self.camera = StreamStats("camera", TOPICS[CAMERA].rate_hz, s["input_timeout_s"])
        self.imu = StreamStats("imu", imu_rate, s["input_timeout_s"], slow_fraction=IMU_SLOW_FRACTION)
        self.windows_with_gap = 0  # IMU windows encoded although their samples had a gap (see ImuBuffer)
        self.skill = StreamStats("active_skill")  # published on change: no rate, no timeout
        self.camera_info = StreamStats("camera_info")  # a robot may publish none: no rate, no timeout
        self.trained_camera: CameraModel | None = rt.artifact.camera
        self.seen_camera: CameraModel | None = None
        self.camera_check = self._camera_status()
        if self.trained_camera is None:
            self.get_logger().info("no camera model in the artifact: CameraInfo is not checked")
        self.output = StreamStats("state")  # latency here = image stamp -> publish
        self.camera_gaps, self.imu_gaps = SequenceGaps(), SequenceGaps()
        self.encode_time = LatencyWindow()
        self.skew = LatencyWindow()  # |last IMU sample stamp - image stamp| of each window
        self.gates = np.full(len(GATES), np.nan)  # (4,) of the last embedding
        self.encoder_hash = rt.artifact.encoder_hash  # named in every embedding
        # Until the task layer says otherwise the robot is assumed to be at rest, executing the safe skill.
        self.active = (rt.contract.safe_skill_id, 0.0, 0.0)  # (skill id, progress, step)
        # Images waiting for their IMU window, oldest first: (stamp, rgb (h, w, 3), frame_id).
        self.waiting: deque[tuple[float, np.ndarray, str]] = deque()
        self.pub = self.publisher(STATE)

    def activate(self) -> None:
        self.subscribe(CAMERA, self.on_image, self.work_group)
        self.imu_sub = self.subscribe(IMU, self.on_imu, self.work_group)  # the camera's group: see the doc
        self.skill_sub = self.subscribe(SKILL, self.on_skill, self.work_group)  # the camera's: see the doc
        self.subscribe(CAMERA_INFO, self.on_camera_info, self.io_group)

    def deactivate(self) -> None:
        with self.lock:
            self.waiting.clear()

    def cleanup(self) -> None:
        self.runtime = None

    def on_image(self, msg: Image, info: MessageInfo) -> None:
        woke = time.monotonic()
        now = self.now_s()
        self._count_lost(self.camera, self.camera_gaps, info, now)
        try:
            stamp = checked_stamp(msg.header.stamp)
            if self.stage_marks is not None:
                self.stage_marks.mark("camera hop to encoder", stamp, woke)
            rgb = image_to_rgb(msg)
            if why := self.camera.check_stamp(stamp, now, self.future_tolerance_s):
                raise MessageError("stamp", why)
        except MessageError as err:
            self.reject(self.camera, err, now)
            return
        if now - stamp > self.max_latency_s:
            self.drop(
                self.camera,
                "late",
                f"image is {now - stamp:.3f} s old (max_latency_s {self.max_latency_s})",
                now,
            )
            return
        with self.lock:
            self.camera.accept(stamp, now)
            if len(self.waiting) == MAX_WAITING:
                self.waiting.popleft()
                self.camera.drop("superseded", now)
            self.waiting.append((stamp, rgb, msg.header.frame_id))
        self._store_imu_burst(now)  # samples delivered ahead of the frame
        for skill_msg, _ in drain(self.skill_sub):  # and the task state published before it
            self._store_skill(skill_msg, now)
        self.encode_pending()

    def on_imu(self, msg: Imu, info: MessageInfo) -> None:
        """Store this sample and the rest of its burst; encode a waiting image whose window they complete."""
        now = self.now_s()
        self._store_imu(msg, info, now)
        self._store_imu_burst(now)
        if self.waiting:
            self.encode_pending()

    def _store_imu_burst(self, now: float) -> None:
        """Store every IMU sample already queued on the subscription (see `agent.ros_io.drain`)."""
        for msg, info in drain(self.imu_sub):
            self._store_imu(msg, info, now)

    def _store_imu(self, msg: Imu, info: MessageInfo, now: float) -> None:
        """Check and buffer one IMU sample."""
        self._count_lost(self.imu, self.imu_gaps, info, now)
        try:
            stamp = checked_stamp(msg.header.stamp)
            sample = imu_to_sample(msg)
        except MessageError as err:
            self.reject(self.imu, err, now)
            return
        with self.lock:
            why = self.imu_buffer.push(stamp, sample, now)
            if why is None:
                self.imu.accept(stamp, now)
        if why is not None:
            self.reject(self.imu, MessageError(why, f"IMU sample at {stamp:.6f} not stored: {why}"), now)

    def _count_lost(self, stream: StreamStats, gaps: SequenceGaps, info: MessageInfo, now: float) -> None:
        """Sensor messages are best effort: count the ones published but never received as dropped."""
        if missing := gaps.see(info):
            with self.lock:
                for _ in range(missing):
                    stream.drop("lost", now)

    def on_camera_info(self, msg: CameraInfo) -> None:
        """The camera's calibration: compared with the trained camera when it changes."""
        now = self.now_s()
        try:
            stamp = checked_stamp(msg.header.stamp)
            seen = camera_info_to_model(msg)
        except MessageError as err:
            self.reject(self.camera_info, err, now)
            return
        with self.lock:
            self.camera_info.accept(stamp, now)
            changed = seen != self.seen_camera
            if changed:
                self.seen_camera = seen
                self.camera_check = self._camera_status()
            check = self.camera_check
        if changed and check.level == Level.WARN:
            self.get_logger().warning(f"camera: {check.message}")

    def _camera_status(self) -> Status:
        """The camera_model entry: the last CameraInfo against the trained camera."""
        trained, seen = self.trained_camera, self.seen_camera
        if trained is None:
            return Status(Level.OK, "no camera model in the artifact: CameraInfo not checked")
        values = {"trained": trained.describe()}
        if seen is None:
            return Status(Level.OK, "no CameraInfo yet", values)
        values["camera_info"] = seen.describe()
        if problems := mismatches(trained, seen):
            return Status(Level.WARN, "; ".join(problems), values)
        return Status(Level.OK, "the camera matches the one the student was trained with", values)

    def on_skill(self, msg: JointState) -> None:
        self._store_skill(msg, self.now_s())

    def _store_skill(self, msg: JointState, now: float) -> None:
        """Check the active skill, task progress and step, and make them the next frames' inputs."""
        try:
            stamp = checked_stamp(msg.header.stamp)
            active = msg_to_skill_state(msg, self.runtime.contract.num_skills)
            if why := self.skill.check_stamp(stamp, now, self.future_tolerance_s):
                raise MessageError("stamp", why)
        except MessageError as err:
            self.reject(self.skill, err, now)
            return
        with self.lock:
            self.skill.accept(stamp, now)
            self.active = active

    def encode_pending(self) -> None:
        """The newest waiting image whose IMU has reached its stamp -> encode -> publish."""
        now = self.now_s()
        with self.lock:
            ready = self._take_ready(now)
            skill, progress, step = self.active
        if ready is None:
            return  # the IMU sample that reaches a waiting stamp calls again
        (stamp, rgb, frame_id), match = ready
        if match.status is MatchStatus.MISS:
            self.drop(self.camera, "no_imu_window", match.reason, now)
            return
        hw = self.runtime.image_hw
        rgb = rgb if rgb.shape[:2] == hw else resize_rgb(rgb, *hw)  # (H, W, 3) the model's input size
        t0 = time.perf_counter()
        try:
            embedding, gates = self.runtime.encode(rgb, match.window, skill, progress, step)
        except ValueError as err:
            self.reject(self.camera, MessageError("model_input", str(err)), now)
            return
        encode_s = time.perf_counter() - t0
        active = (skill, progress, step)
        if match.gap_s:  # counted before the embedding is out: whoever sees it sees the count too
            with self.lock:
                self.windows_with_gap += 1
            nominal = (self.imu_buffer.window - 1) * self.imu_buffer.period_s
            self.warn_throttled("imu.gap", f"IMU window with a gap of {match.gap_s * 1e3:.0f} ms: it spans "
                                f"{match.span_s * 1e3:.0f} ms instead of {nominal * 1e3:.0f} ms")  # fmt: skip
        msg = embedding_to_msg(embedding, stamp, frame_id, self.encoder_hash, active)
        self.pub.publish(msg)
        if self.stage_marks is not None:
            self.stage_marks.mark("encoder callback", stamp, time.monotonic())
        with self.lock:
            self.output.accept(stamp, self.now_s())
            self.encode_time.add(encode_s)
            self.skew.add(abs(match.skew_s))
            self.gates = gates
        if self.hand_over is not None:
            self.hand_over(msg)

    def _take_ready(self, now: float) -> tuple[tuple[float, np.ndarray, str], ImuMatch] | None:
        """Under the lock: pop the newest image the IMU has reached; drop older and too old ones.

        Too old (than `max_latency_s`) is dropped whether its IMU came or not: its state would be late.
        """
        for i in range(len(self.waiting) - 1, -1, -1):
            match = self.imu_buffer.match(self.waiting[i][0])
            if match.status is not MatchStatus.WAIT:
                for _ in range(i):
                    self.waiting.popleft()
                    self.camera.drop("superseded", now)
                if now - self.waiting[0][0] <= self.max_latency_s:
                    return self.waiting.popleft(), match
                break
        while self.waiting and now - self.waiting[0][0] > self.max_latency_s:
            self.waiting.popleft()
            self.camera.drop("imu_late", now)
        return None

    def health(self, now: float) -> list[tuple[str, Status]]:
        out = self.output.status(now)
        out.values["encode_p50_ms"] = f"{self.encode_time.percentile_ms(50):.2f}"
        out.values["encode_p99_ms"] = f"{self.encode_time.percentile_ms(99):.2f}"
        out.values["imu_skew_p99_ms"] = f"{self.skew.percentile_ms(99):.2f}"
        out.values.update({f"gate_{g}": f"{v:.3f}" for g, v in zip(GATES, self.gates, strict=True)})
        out.values["imu_windows_with_gap"] = str(self.windows_with_gap)
        imu = self.imu.status(now)
        if imu.level == Level.WARN and "nominal" in imu.message:  # a sustained low rate (the 5 s window)
            self.warn_throttled("imu.rate", f"IMU rate low: {imu.message}; windows stretch over more time")
        return [("camera", self.camera.status(now)), ("imu", imu), ("active_skill", self.skill.status(now)),
                ("camera_info", self.camera_info.status(now)), ("camera_model", self.camera_check),
                ("output", out)]  # fmt: skip

    def summary(self) -> dict[str, str]:
        runtime = self.runtime  # read once: cleanup may clear it beside the diagnostics timer
        if runtime is None:
            return {}
        return {"backend": runtime.backend, "precision": runtime.precision,
                "input": f"{runtime.image_hw} image, {runtime.imu_window} IMU samples"}  # fmt: skip


def main(args: list[str] | None = None) -> None:
    """`ros2 run agent encoder`: spin until Ctrl-C, SIGTERM or shutdown."""
    run_node(EncoderNode, args)


if __name__ == "__main__":
    main()
