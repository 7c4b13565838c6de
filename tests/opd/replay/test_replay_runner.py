"""`agent replay` on bags the tests write (opd.replay.bags.synthetic): determinism, storage formats, topic
mapping, counterfactual gates, and bad input: the bag is never modified, skips are reported with topic and
time."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from opd.replay.bags.reader import BagError, BagTopics, dumps
from opd.replay.bags.synthetic import START_S, write_synthetic_bag
from opd.replay.runner import Replay, ReplayConfig, load_config
from policies.artifact import Artifact
from policies.config import from_root

ARTIFACT = from_root("sim/robots/diffbot/student")
pytestmark = pytest.mark.slow


def tree_hash(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def artifact() -> Artifact:
    return Artifact.load(ARTIFACT)


@pytest.fixture(scope="module")
def split_bag(artifact: Artifact, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_bag(tmp_path_factory.mktemp("bags") / "split", artifact, 3.0, split=2)


def test_two_replays_give_the_same_bytes_and_leave_the_bag_untouched(split_bag: Path, tmp_path: Path) -> None:
    before = tree_hash(split_bag)
    assert len(list(split_bag.glob("*.mcap"))) == 2  # a split recording
    first = Replay(split_bag, ARTIFACT, load_config(None)).run()
    second = Replay(split_bag, ARTIFACT, load_config(None)).run()
    assert dumps(first) == dumps(second)
    assert tree_hash(split_bag) == before
    # 3 s at 20 Hz; the first frames lack a full IMU window (100 samples, 0.5 s), counted as such
    assert first["decisions"] >= 45
    assert [s["reason"] for s in first["skipped"]] == ["no_imu_window"]
    assert first["bag"]["topics"]["/imu/data"]["rate_hz"] == pytest.approx(200, rel=1e-3)
    assert first["bag"]["topics"]["/camera/image_raw"]["latency_ms"]["p50"] == pytest.approx(120.0)
    assert {"h1", "h2", "h3"} <= set(first["prediction_error"])
    assert first["episodes"]["count"] == 2  # the step counter restarts halfway
    names = [g["name"] for g in first["gates"]]
    assert names[0].startswith("replayed") and "threshold 0.05" in names and "budget 5%" in names
    rate = {g["name"]: g["teacher_rate"] for g in first["gates"]}
    assert rate["threshold 0.05"] >= rate["threshold 1"]


CASES = [
    ("sqlite3", "jpeg", False),
    ("mcap", "bgr8", True),
    ("mcap", "mono8", True),
    ("sqlite3", "png", True),
]


@pytest.mark.parametrize(("storage", "encoding", "embedded"), CASES)  # embedded: message definitions
def test_storage_and_camera_encodings(artifact, tmp_path, storage, encoding, embedded) -> None:
    bag = write_synthetic_bag(tmp_path / "bag", artifact, 1.5, storage=storage, encoding=encoding,
                              embedded_types=embedded)  # fmt: skip
    result = Replay(bag, ARTIFACT, load_config(None)).run()
    assert result["decisions"] > 10
    assert {s["reason"] for s in result["skipped"]} == {"no_imu_window"}


@pytest.mark.parametrize("distro", ["humble", "jazzy"])
def test_a_bag_without_definitions_decodes_with_the_named_distros_types(artifact, tmp_path, distro) -> None:
    bag = write_synthetic_bag(tmp_path / "bag", artifact, 1.5, storage="sqlite3", embedded_types=False)
    cfg = ReplayConfig(topics=BagTopics(distro=distro))
    assert Replay(bag, ARTIFACT, cfg).run()["decisions"] > 10


def test_a_robots_topic_names_are_mapped_by_config_never_guessed(artifact, tmp_path) -> None:
    topics = BagTopics(camera="/camera/color/image_raw", imu="/imu", privileged="", active_skill="")
    bag = write_synthetic_bag(tmp_path / "bag", artifact, 1.5, topics=topics.model_copy(
        update={"privileged": "/twin/state", "active_skill": "/task/skill"}))  # fmt: skip
    with pytest.raises(BagError, match="none of the mapped topics"):
        Replay(bag, ARTIFACT, load_config(None)).run()
    mapped = ReplayConfig(topics=BagTopics(camera="/camera/color/image_raw", imu="/imu",
                                           privileged="/twin/state", active_skill="/task/skill"))  # fmt: skip
    result = Replay(bag, ARTIFACT, mapped).run()
    assert result["decisions"] > 10
    # the recording has no embeddings, executed actions, gate or teacher actions: said, not an error
    assert set(result["missing_topics"]) == {"teacher_action", "state", "executed", "gate"}


def test_without_a_teacher_stream_the_student_acts_alone_and_the_report_says_so(artifact, tmp_path) -> None:
    bag = write_synthetic_bag(tmp_path / "bag", artifact, 1.5, topics=BagTopics(privileged="/elsewhere"))
    result = Replay(bag, ARTIFACT, load_config(None)).run()
    assert result["decisions"] > 0 and result["missing_topics"]["privileged"] == "/sim/privileged_state"
    assert set(result["gates"][0]["reasons"]) == {"student/teacher_unavailable"}
    assert result["prediction_error"] == {} and result["agreement"] == {"pairs": 0}


def test_a_novelty_gate_is_warned_about_where_the_artifact_holds_no_ensemble(
    split_bag, artifact, tmp_path, caplog
) -> None:
    from opd.distill.config import NoveltyConfig
    from opd.distill.novelty import EnsembleNovelty
    from policies.export import Novelty, export_head_version
    from policies.runtime.torch_backend import build_module

    ensemble = EnsembleNovelty(artifact.manifest["config"]["student"]["encoder"]["embed_dim"],
                               artifact.contract, NoveltyConfig())  # fmt: skip
    novelty = Novelty(NoveltyConfig().model_dump(mode="json"), ensemble.state_dict())
    student, predictor = build_module(artifact, "policy").policy, build_module(artifact, "predictor")
    carrying = export_head_version(artifact, student, predictor, tmp_path / "carrying", 1, novelty)
    for switch, root, warned in (("novelty", ARTIFACT, True), ("predictor", ARTIFACT, False),
                                 ("novelty", carrying, False)):  # fmt: skip
        opd = tmp_path / f"{switch}.yaml"
        opd.write_text(f"opd:\n  switch: {switch}\n")
        caplog.clear()
        Replay(split_bag, root, load_config(None).model_copy(update={"opd_config": str(opd)})).run()
        assert ("the replayed gate reads an untrained one" in caplog.text) == warned


def test_reuse_state_is_refused_without_embeddings_from_this_artifact(split_bag) -> None:
    with pytest.raises(BagError, match="no recorded state embeddings"):
        Replay(split_bag, ARTIFACT, load_config(None), reuse_state=True).run()


def test_reuse_state_takes_embeddings_that_name_this_encoder_and_stops_at_another(artifact, tmp_path) -> None:
    """Each recorded StateEmbedding names its encoder: those of this artifact's are decided on; the first
    of another encoder stops the replay with its topic and time."""
    ours = write_synthetic_bag(tmp_path / "ours", artifact, 2.0, state_embeddings=True)
    result = Replay(ours, ARTIFACT, load_config(None), reuse_state=True).run()
    assert result["mode"] == "reuse_state" and result["decisions"] > 30
    manifest = copy.deepcopy(artifact.manifest)
    manifest["files"][artifact.model("encoder")["onnx"]]["sha256"] = "0" * 64
    other = Artifact(artifact.root, manifest)  # another encoder (not loaded: nothing to verify)
    theirs = write_synthetic_bag(tmp_path / "theirs", other, 2.0, state_embeddings=True)
    where = r"/agent/state at log time \d+\.\d+ s holds an embedding of encoder 0000"
    with pytest.raises(BagError, match=where):
        Replay(theirs, ARTIFACT, load_config(None), reuse_state=True).run()


def test_a_truncated_sqlite3_bag_is_one_clear_error_naming_the_file(artifact, tmp_path) -> None:
    """A sqlite3 recording cut short cannot be opened: one error naming the bag and what is wrong with it,
    and the file is left as it was."""
    bag = write_synthetic_bag(tmp_path / "bag", artifact, 3.0, storage="sqlite3")
    data = next(bag.glob("*.db3"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    before = tree_hash(bag)
    with pytest.raises(BagError, match="cannot open the bag"):
        Replay(bag, ARTIFACT, load_config(None)).run()
    assert tree_hash(bag) == before


def test_an_mcap_recording_cut_short_replays_up_to_the_cut(artifact, tmp_path) -> None:
    """A recorder that died leaves an MCAP file without summary and footer, which rosbags cannot open: the
    records before the cut are read (opd.replay.bags.recovery), the cut is reported with its time, the file
    stays as it was."""
    full = write_synthetic_bag(tmp_path / "full", artifact, 12.0)  # ~3 MB: chunks of ~1 MB
    whole = Replay(full, ARTIFACT, load_config(None)).run()
    bag = tmp_path / "cut"
    shutil.copytree(full, bag)
    data = next(bag.glob("*.mcap"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size * 6 // 10])
    before = tree_hash(bag)
    result = Replay(bag, ARTIFACT, load_config(None)).run()
    (cut,) = [s for s in result["skipped"] if s["reason"] == "truncated"]
    assert cut["topic"] == "<bag>" and data.name in cut["detail"]
    assert 0 < result["decisions"] < whole["decisions"]
    assert cut["first_s"] >= START_S + 3.0  # the intact chunks, seconds of them, were read
    assert tree_hash(bag) == before
    unread = {s["topic"]: s["count"] for s in result["skipped"] if s["reason"] == "unread"}
    assert unread and all(n > 0 for n in unread.values())  # metadata.yaml's counts past the cut, per topic
    (tmp_path / "empty").mkdir()
    shutil.copy(full / "metadata.yaml", tmp_path / "empty")
    (tmp_path / "empty" / data.name).write_bytes(data.read_bytes()[:20])  # nothing but the header
    with pytest.raises(BagError, match="no record of it is readable"):
        Replay(tmp_path / "empty", ARTIFACT, load_config(None)).run()


def test_a_recording_cut_short_comes_out_in_log_time_order_however_it_was_written(artifact, tmp_path) -> None:
    """A recorder may write messages a little out of log-time order (threads); rosbags gives them sorted,
    and the reader of a file without its footer used to give them in file order: a different replay of the
    same data, with "backwards" stamps that are not in the recording."""
    import random

    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import StoragePlugin, Writer

    from opd.replay.bags.reader import typestore

    src, ts = write_synthetic_bag(tmp_path / "src", artifact, 3.0), typestore()
    shuffled = tmp_path / "shuffled"
    with AnyReader([src], default_typestore=ts) as reader:
        messages, connections = list(reader.messages()), list(reader.connections)
    order, rng = list(range(len(messages))), random.Random(0)
    for i in range(0, len(order), 20):  # each run of 20 written in another order
        block = order[i : i + 20]
        rng.shuffle(block)
        order[i : i + 20] = block
    with Writer(shuffled, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=ts) for c in connections}
        for j in order:
            conn, t, raw = messages[j]
            writer.write(conns[conn.topic], t, raw)
    whole = Replay(shuffled, ARTIFACT, load_config(None)).run()
    data = next(shuffled.glob("*.mcap"))
    data.write_bytes(data.read_bytes()[:-300])  # the footer and summary gone, every message still there
    cut = Replay(shuffled, ARTIFACT, load_config(None)).run()
    assert [s["reason"] for s in cut["skipped"] if s["topic"] == "<bag>"] == ["truncated"]
    assert cut["gates"] == whole["gates"] and cut["decisions"] == whole["decisions"]
    assert all(t["backwards"] == 0 for t in cut["bag"]["topics"].values())


def test_a_corrupt_chunk_stops_reading_with_the_error_and_where(artifact, tmp_path) -> None:
    """Bytes overwritten inside an MCAP chunk (this small bag has one): reading stops there, and with no
    frame left the error lists the read error with its log time."""
    bag = write_synthetic_bag(tmp_path / "bag", artifact, 3.0)
    data = next(bag.glob("*.mcap"))
    raw = bytearray(data.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 4000] = b"\xab" * 4000
    data.write_bytes(bytes(raw))
    with pytest.raises(BagError, match="'reason': 'read_error'"):
        Replay(bag, ARTIFACT, load_config(None)).run()
    # in a longer bag the chunks before it replay; the error counts once, however many passes met it, and
    # each topic's messages past it are counted as unread
    bag = write_synthetic_bag(tmp_path / "long", artifact, 8.0)
    data = next(bag.glob("*.mcap"))
    raw = bytearray(data.read_bytes())
    at = len(raw) * 6 // 10
    raw[at : at + 4000] = b"\xab" * 4000
    data.write_bytes(bytes(raw))
    result = Replay(bag, ARTIFACT, load_config(None)).run()
    skipped = {(s["topic"], s["reason"]): s["count"] for s in result["skipped"]}
    assert skipped[("<bag>", "read_error")] == 1 and result["decisions"] > 0
    read = result["bag"]["topics"]["/camera/image_raw"]["messages"]
    assert read + skipped[("/camera/image_raw", "unread")] == 160  # 8 s at 20 Hz


def test_bad_messages_are_skipped_and_counted_with_topic_and_time(artifact, tmp_path) -> None:
    """A camera topic of the wrong type, duplicate IMU stamps and an image with a short buffer."""
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    src = write_synthetic_bag(tmp_path / "src", artifact, 1.5)
    ts = get_typestore(Stores.ROS2_KILTED)
    out = tmp_path / "bad"
    from rosbags.highlevel import AnyReader

    with AnyReader([src], default_typestore=ts) as reader, Writer(out, version=9) as writer:
        conns = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=ts) for c in reader.connections}
        text = writer.add_connection("/teacher/action", "std_msgs/msg/String", typestore=ts)
        string = ts.types["std_msgs/msg/String"](data="x")
        writer.write(text, 1, ts.serialize_cdr(string, "std_msgs/msg/String"))
        shorted, old_privileged, first_t = False, None, 0
        for conn, t, raw in reader.messages():
            writer.write(conns[conn.topic], t, raw)
            if conn.topic == "/imu/data":
                writer.write(conns[conn.topic], t + 1, raw)  # the same stamp again
            if conn.topic == "/sim/privileged_state" and old_privileged is None:
                old_privileged, first_t = raw, t
            elif conn.topic == "/sim/privileged_state" and t > first_t + 1e9:
                writer.write(conns[conn.topic], t + 1, old_privileged)  # a stamp from 1 s back, resent
            if conn.topic == "/camera/image_raw" and not shorted:
                msg = reader.deserialize(raw, conn.msgtype)
                msg.data = msg.data[:-1]
                writer.write(conns[conn.topic], t + 1, ts.serialize_cdr(msg, conn.msgtype))
                shorted = True
    result = Replay(out, ARTIFACT, load_config(None)).run()
    reasons = {(s["topic"], s["reason"]): s for s in result["skipped"]}
    assert ("/teacher/action", "unexpected_type") in reasons
    assert reasons[("/imu/data", "duplicate")]["count"] >= 200
    assert ("/camera/image_raw", "size") in reasons
    assert result["bag"]["topics"]["/imu/data"]["duplicates"] >= 200
    assert result["bag"]["topics"]["/sim/privileged_state"]["backwards"] >= 5  # counted, and the buffer
    assert sum(result["refused_by_buffer"].values()) >= 5  # refuses the stale resends
    assert result["decisions"] > 10
    json.loads(dumps(result))  # strict JSON


def rewritten(src: Path, out: Path, change) -> Path:
    """`src` copied message by message into `out`, each (topic, msg) passed through `change`, which returns
    the message to write (None: as it was)."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer

    from opd.replay.bags.reader import typestore

    ts = typestore()  # the distro's messages and agent_interfaces
    with AnyReader([src], default_typestore=ts) as reader, Writer(out, version=9) as writer:
        conns = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=ts) for c in reader.connections}
        for conn, t, raw in reader.messages():
            msg = change(conn.topic, reader.deserialize(raw, conn.msgtype))
            writer.write(conns[conn.topic], t, raw if msg is None else ts.serialize_cdr(msg, conn.msgtype))
    return out


def test_a_recorded_state_with_fields_out_of_range_is_skipped_not_fatal(artifact, tmp_path) -> None:
    """A recorded embedding's skill id out of range (or a NaN progress) used to stop a re-encoding replay
    with an error naming no topic or time; it is skipped and counted, and its frame, which the recording
    no longer says the live encoder used, is not replayed."""
    src = write_synthetic_bag(tmp_path / "src", artifact, 1.5, state_embeddings=True)
    seen = [0]

    def bad_fields(topic, msg):
        if topic != "/agent/state":
            return None
        seen[0] += 1
        if seen[0] == 20:
            msg.skill = 200
        elif seen[0] == 24:
            msg.progress = float("nan")
        else:
            return None
        return msg

    bag = rewritten(src, tmp_path / "bad", bad_fields)
    result = Replay(bag, ARTIFACT, load_config(None)).run()
    reasons = {(s["topic"], s["reason"]): s["count"] for s in result["skipped"]}
    assert reasons[("/agent/state", "skill")] == 1 and reasons[("/agent/state", "range")] == 1
    assert result["decisions"] == Replay(src, ARTIFACT, load_config(None)).run()["decisions"] - 2


def test_a_bag_whose_metadata_does_not_match_its_files_says_what_it_could_not_read(
    artifact, tmp_path
) -> None:
    """A split recording missing a file (rosbags refuses it; its other file is read) and a metadata.yaml
    naming another camera type than the file's: each used to replay what was left and report nothing."""
    import yaml

    split = write_synthetic_bag(tmp_path / "split", artifact, 3.0, split=2)
    whole = Replay(split, ARTIFACT, load_config(None)).run()
    bag = tmp_path / "missing"
    shutil.copytree(split, bag)
    (lost,) = [f for f in bag.glob("*.mcap") if f.name.endswith("_1.mcap")]
    lost.unlink()
    result = Replay(bag, ARTIFACT, load_config(None)).run()
    (missing,) = [s for s in result["skipped"] if s["reason"] == "missing_file"]
    assert missing["topic"] == "<bag>" and lost.name in missing["detail"] and missing["count"] > 0
    assert 0 < result["decisions"] < whole["decisions"]

    liar = tmp_path / "liar"
    shutil.copytree(write_synthetic_bag(tmp_path / "plain", artifact, 1.5), liar)
    meta = yaml.safe_load((liar / "metadata.yaml").read_text())
    for topic in meta["rosbag2_bagfile_information"]["topics_with_message_count"]:
        if topic["topic_metadata"]["name"] == "/camera/image_raw":
            topic["topic_metadata"]["type"] = "sensor_msgs/msg/CompressedImage"
    (liar / "metadata.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(BagError, match="'topic': '/camera/image_raw', 'reason': 'unread', 'count': 30"):
        Replay(liar, ARTIFACT, load_config(None)).run()


@pytest.mark.parametrize(
    "custom",
    [[1, 2], {"agent.launch_args": "[1]"}, {"agent.params": "- a"}, {"agent.params": "opd: 3"},
     {"agent.params": "opd: {ros__parameters: {opd_config: [1]}}"}],
)  # fmt: skip
def test_custom_data_of_an_unexpected_shape_is_ignored(artifact, tmp_path, custom) -> None:
    """metadata.yaml is the recorder's to write: odd custom_data used to end the replay in a traceback."""
    import yaml

    bag = write_synthetic_bag(tmp_path / "bag", artifact, 1.5)
    meta = yaml.safe_load((bag / "metadata.yaml").read_text())
    meta["rosbag2_bagfile_information"]["custom_data"] = custom
    (bag / "metadata.yaml").write_text(yaml.safe_dump(meta))
    assert Replay(bag, ARTIFACT, load_config(None)).run()["decisions"] > 10


def test_a_missing_bag_is_one_clear_error(tmp_path) -> None:
    with pytest.raises(BagError, match="no such bag"):
        Replay(tmp_path / "none", ARTIFACT, load_config(None)).run()
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_batched_model_outputs_change_no_decision(split_bag, monkeypatch) -> None:
    """Replay evaluates the head, predictor and teacher in batches ahead (opd.distill.model_memo); with an
    empty memo every output is computed at batch 1, as live. Both make the same decisions."""
    from opd.distill.model_memo import ModelMemo

    batched = Replay(split_bag, ARTIFACT, load_config(None))
    first = batched.run()
    # the speculation holds, across the episode reset halfway too: the head's window is the committed
    # student's memory (128 frames), which a one-episode speculation would miss for the whole second half
    assert first["episodes"]["count"] >= 2
    for model in ("head", "predictor"):
        assert batched.memo.hits[model] >= 0.9 * first["decisions"]
    assert batched.memo.hits["teacher"] > 0
    monkeypatch.setattr(Replay, "_precompute", lambda self, *args: ModelMemo())
    single = Replay(split_bag, ARTIFACT, load_config(None)).run()
    assert single["decisions"] == first["decisions"]
    for a, b in zip(single["gates"], first["gates"], strict=True):  # same decisions, float sums aside
        assert {k: v for k, v in a.items() if k != "threshold_mean"} == {
            k: v for k, v in b.items() if k != "threshold_mean"}  # fmt: skip
        assert a["threshold_mean"] == pytest.approx(b["threshold_mean"], rel=1e-6)
    assert single["agreement"].keys() == first["agreement"].keys()
    for key, value in first["agreement"].items():  # None where the student never chose the teacher's skill
        assert single["agreement"][key] == (value if value is None else pytest.approx(value, rel=1e-5))


def test_the_memo_holds_windows_as_views_and_serves_only_exact_matches() -> None:
    """A long recording's 128-frame windows are not copied into the memo (it keeps views of the
    embeddings), and a window that shares only its newest frame with a held one is not served its outputs."""
    import numpy as np

    from opd.distill.model_memo import ModelMemo

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((300, 8)).astype(np.float32)  # (F, E)
    padded = np.concatenate([np.zeros((15, 8), np.float32), emb])
    windows = np.lib.stride_tricks.sliding_window_view(padded, (16, 8))[:, 0]  # (F, 16, E), read-only view

    def fn(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows[:] += 0.0  # the model may take a writable array
        return rows.sum(axis=(1, 2)), rows[:, -1] * 2.0

    memo = ModelMemo()
    memo.fill("head", windows, fn, batch=64)
    held = [row for rows in memo.tables["head"].values() for row, _ in rows]
    assert len(held) == 300 and all(np.shares_memory(row, padded) for row in held)
    some = np.ascontiguousarray(windows[[3, 150, 299]])
    total, last = memo.get("head", some)
    np.testing.assert_allclose(total, some.sum(axis=(1, 2)), rtol=1e-6)
    np.testing.assert_array_equal(last, some[:, -1] * 2.0)
    other = windows[150].copy()
    other[0] += 1.0  # same newest frame, another window
    assert memo.get("head", other[None]) is None and memo.misses["head"] == 1 and memo.hits["head"] == 1
    with pytest.raises(ValueError, match="2 input rows"):  # outputs computed elsewhere must match row for row
        memo.put("head", windows[:2], (np.zeros(2), np.zeros((3, 8))))


def test_a_bare_mcap_file_cut_short_replays_what_is_intact(artifact, tmp_path) -> None:
    """The file a recorder killed mid-write leaves, given alone (no folder, no metadata.yaml): its intact
    records replay as they do in a folder, and the report says how many messages followed the cut is
    unknown, rather than nothing."""
    full = write_synthetic_bag(tmp_path / "full", artifact, 12.0)
    data = next(full.glob("*.mcap"))
    bare = tmp_path / "killed.mcap"
    bare.write_bytes(data.read_bytes()[: data.stat().st_size * 6 // 10])
    result = Replay(bare, ARTIFACT, load_config(None)).run()
    assert result["decisions"] > 0
    reasons = {s["reason"]: s for s in result["skipped"] if s["topic"] == "<bag>"}
    assert bare.name in reasons["truncated"]["detail"]
    assert "unknown" in reasons["unread_unknown"]["detail"]
