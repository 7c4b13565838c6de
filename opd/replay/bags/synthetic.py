"""Deterministic rosbag2 bags of camera, IMU, active skill and teacher (privileged) streams, written with
`rosbags`: the inputs of the replay tests and of `agent bench replay`. Small, generated on demand, never
committed. Images are seeded noise (the encoder's cost does not depend on content); the privileged state
follows slow sinusoids; the camera arrives `latency_s` after its stamp, as on the real-robot proxy; the
step counter restarts halfway (a new episode)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import yaml

from opd.replay.bags.reader import BagTopics, typestore
from policies.artifact import Artifact

START_S = 1_760_000_000.0  # first stamp, s (a Unix time, as a robot's clock gives)


def write_synthetic_bag(
    path: str | Path,
    artifact: Artifact,
    seconds: float = 4.0,
    *,
    storage: Literal["mcap", "sqlite3"] = "mcap",
    seed: int = 0,
    camera_hz: float = 20.0,
    imu_hz: float = 200.0,
    latency_s: float = 0.12,
    image_hw: tuple[int, int] | None = None,
    encoding: Literal["rgb8", "bgr8", "mono8", "jpeg", "png"] = "rgb8",
    topics: BagTopics | None = None,
    embedded_types: bool = True,
    split: int = 1,
    state_embeddings: bool = False,
) -> Path:
    """Write the bag directory `path` (must not exist); returns it. `split` > 1 writes that many storage
    files in one bag (a split recording); `embedded_types=False` (sqlite3 only) leaves the message
    definitions out; `state_embeddings` adds recorded embeddings (seeded noise, as if from `artifact`'s
    encoder: they name its hash, for --reuse-state)."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    if not embedded_types and storage != "sqlite3":
        raise ValueError("bags without embedded message definitions are written as sqlite3 (as Humble did)")
    path, topics = Path(path), topics or BagTopics()
    ts = typestore()
    rng = np.random.default_rng(seed)
    hw = image_hw or artifact.image_hw
    fields = artifact.model("predictor").get("fields") or []
    contract = artifact.contract
    msgs = _messages(ts, rng, seconds, camera_hz, imu_hz, latency_s, hw, encoding, fields, contract, topics)
    if state_embeddings:
        msgs += _embeddings(ts, rng, msgs, artifact, topics)
    msgs.sort(key=lambda m: m[1])  # log time
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    parts = np.array_split(np.arange(len(msgs)), split)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for i, idx in enumerate(parts):
            part = Path(tmp) / f"part{i}"
            writer = Writer(part, version=9, storage_plugin=plugin)
            writer.open()
            conns = {}
            for topic, msgtype in sorted({(m[0], m[2]) for m in msgs}):
                conns[topic] = writer.add_connection(topic, msgtype, typestore=ts)
            for j in idx:
                topic, log_s, msgtype, msg = msgs[j]
                writer.write(conns[topic], round(log_s * 1e9), ts.serialize_cdr(msg, msgtype))
            writer.close()
            if not embedded_types:  # as a Humble recorder writes them: readers need a typestore
                for db in part.glob("*.db3"):
                    with sqlite3.connect(db) as con:
                        con.execute("DELETE FROM message_definitions")
            dirs.append(part)
        _merge(dirs, path)
    return path


def _merge(parts: list[Path], out: Path) -> None:
    """One bag directory from several single-file bags: their files, and one metadata.yaml listing all."""
    out.mkdir(parents=True)
    metas = [yaml.safe_load((p / "metadata.yaml").read_text())["rosbag2_bagfile_information"] for p in parts]
    files: list[str] = []
    for i, (p, meta) in enumerate(zip(parts, metas, strict=True)):
        for rel in meta["relative_file_paths"]:
            name = f"{out.name}_{i}{Path(rel).suffix}"
            shutil.move(str(p / rel), out / name)
            files.append(name)
    info = metas[0]
    info["relative_file_paths"] = files
    info["files"] = [{**f, "path": files[i]} for i, f in enumerate(m["files"][0] for m in metas)]
    info["message_count"] = sum(m["message_count"] for m in metas)
    start = min(m["starting_time"]["nanoseconds_since_epoch"] for m in metas)
    end = max(m["starting_time"]["nanoseconds_since_epoch"] + m["duration"]["nanoseconds"] for m in metas)
    info["starting_time"]["nanoseconds_since_epoch"], info["duration"]["nanoseconds"] = start, end - start
    counts: dict[str, int] = {}
    for m in metas:
        for t in m["topics_with_message_count"]:
            name = t["topic_metadata"]["name"]
            counts[name] = counts.get(name, 0) + t["message_count"]
    for t in info["topics_with_message_count"]:
        t["message_count"] = counts[t["topic_metadata"]["name"]]
    (out / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False))


def _messages(ts, rng, seconds, camera_hz, imu_hz, latency_s, hw, encoding, fields, contract, topics):
    T = ts.types
    Time, Header = T["builtin_interfaces/msg/Time"], T["std_msgs/msg/Header"]

    def header(stamp: float, frame: str = ""):
        ns = round(stamp * 1e9)
        return Header(stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9), frame_id=frame)

    def joint(stamp: float, names: list[str], values: np.ndarray):
        return T["sensor_msgs/msg/JointState"](
            header=header(stamp), name=names, position=np.asarray(values, np.float64),
            velocity=np.zeros(0), effort=np.zeros(0),
        )  # fmt: skip

    out = []
    half = seconds / 2
    period = 1.0 / camera_hz
    skill = contract.names.index("drive") if "drive" in contract.names else 0
    for k in range(int(seconds * camera_hz)):
        stamp = START_S + k * period
        step = k if stamp - START_S < half else k - int(half * camera_hz)  # a new episode halfway
        phase = 2 * np.pi * 0.2 * (stamp - START_S)
        state = np.sin(phase + np.arange(len(fields))) + 0.01 * rng.normal(size=len(fields))
        out.append(
            (
                topics.name("privileged"),
                stamp + 0.001,
                "sensor_msgs/msg/JointState",
                joint(stamp, ["skill", "step", *fields], np.concatenate([[skill, step], state])),
            )
        )
        out.append(
            (
                topics.name("active_skill"),
                stamp,
                "sensor_msgs/msg/JointState",
                joint(stamp, ["skill", "progress", "step"], [skill, min(step / 200, 1.0), step]),
            )
        )
        image = _image(T, header(stamp, "camera"), rng, hw, encoding)
        out.append((topics.name("camera"), stamp + latency_s, *image))
    imu_period = 1.0 / imu_hz
    cov = np.zeros(9)
    for k in range(int(seconds * imu_hz)):
        stamp = START_S + k * imu_period
        a = rng.normal(size=3) * 0.1 + np.array([0.0, 0.0, 9.81])
        g = rng.normal(size=3) * 0.05
        V, Q = T["geometry_msgs/msg/Vector3"], T["geometry_msgs/msg/Quaternion"]
        msg = T["sensor_msgs/msg/Imu"](
            header=header(stamp, "imu"), orientation=Q(x=0.0, y=0.0, z=0.0, w=1.0),
            orientation_covariance=np.array([-1.0, *[0.0] * 8]), angular_velocity=V(x=g[0], y=g[1], z=g[2]),
            angular_velocity_covariance=cov, linear_acceleration=V(x=a[0], y=a[1], z=a[2]),
            linear_acceleration_covariance=cov,
        )  # fmt: skip
        out.append((topics.name("imu"), stamp + 0.002, "sensor_msgs/msg/Imu", msg))
    return out


def _embeddings(ts, rng, msgs, artifact, topics):
    """One embedding per camera frame, stamped with it, arriving 10 ms after the image."""
    dim = artifact.embed_dim
    key = lambda h: (h.stamp.sec, h.stamp.nanosec)  # noqa: E731
    active = {key(m.header): m.position for t, _, _, m in msgs if t == topics.name("active_skill")}
    out = []
    for topic, log_s, _, msg in msgs:
        if topic == topics.name("camera"):
            skill, progress, step = active[key(msg.header)]  # the skill state the frame is encoded with
            state = ts.types["agent_interfaces/msg/StateEmbedding"](
                header=msg.header, encoder_hash=artifact.encoder_hash, skill=int(skill),
                progress=float(progress), step=int(step), data=rng.normal(size=dim).astype(np.float32),
            )  # fmt: skip
            out.append((topics.name("state"), log_s + 0.01, "agent_interfaces/msg/StateEmbedding", state))
    return out


def _image(T, head, rng, hw, encoding):
    h, w = hw
    rgb = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    if encoding in ("jpeg", "png"):
        import io

        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format=encoding.upper())
        msg = T["sensor_msgs/msg/CompressedImage"](
            header=head, format=encoding, data=np.frombuffer(buf.getvalue(), np.uint8)
        )
        return "sensor_msgs/msg/CompressedImage", msg
    channels = 1 if encoding == "mono8" else 3
    pixels = rgb[:, :, :1] if channels == 1 else (rgb[:, :, ::-1] if encoding == "bgr8" else rgb)
    msg = T["sensor_msgs/msg/Image"](
        header=head,
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=0,
        step=channels * w,
        data=np.ascontiguousarray(pixels).reshape(-1),
    )
    return "sensor_msgs/msg/Image", msg
