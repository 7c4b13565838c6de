"""Replay reproduces live decisions: a run recorded by `agent run --record` with a fixed student, replayed
offline, gives the gate decisions and executed actions the live graph published, message for message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(sys.executable).with_name("agent")
# an untrained small student (`agent run`'s default before it drove the committed one, which costs more)
SMALL = Path(__file__).parents[2] / "policies" / "configs" / "student_small.yaml"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("live") / "bag"
    cmd = [str(AGENT), "run", "--config", str(SMALL), "--drive", "opd", "--duration", "8", "--record"]
    out = subprocess.run([*cmd, str(bag)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return bag


def replay(bag: Path, *extra: str) -> dict:
    out = subprocess.run([str(AGENT), "replay", str(bag), "--json", *extra], capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_the_recorded_embeddings_replay_to_the_live_decisions_exactly(recorded: Path) -> None:
    result = replay(recorded, "--reuse-state")
    live = result["live_match"]
    assert live["live_decisions"] > 60  # 8 s at 20 Hz, less the start
    assert live["compared"] == live["live_decisions"]  # every live decision was replayed
    assert live["gate_equal"] == live["compared"]  # source and reason, decision for decision
    assert live["actions_compared"] == live["compared"]
    assert live["actions_equal"] == live["actions_compared"]  # the executed action's skill and parameters
    paired = result["paired_latency_ms"]  # as the bag holds them: encoder and opd node, each under 300 ms
    assert paired["image_to_embedding"]["n"] == paired["embedding_to_executed"]["n"] == live["compared"]
    assert 0 < paired["image_to_embedding"]["p50"] < 300 and 0 < paired["embedding_to_executed"]["p50"] < 300


def test_re_encoding_the_camera_reproduces_the_live_decisions_too(recorded: Path) -> None:
    """The camera and IMU re-encoded in batches, each frame with the skill state recorded before it (the
    encoder takes the skill states delivered before the frame, as replay does): the same decisions."""
    result = replay(recorded)
    live = result["live_match"]
    assert result["frames"]["live_frames_without_image"] == 0
    assert live["compared"] == live["live_decisions"] > 60
    assert live["gate_equal"] == live["compared"]
    assert live["actions_equal"] == live["actions_compared"] == live["compared"]
    again = replay(recorded)
    assert again == result  # deterministic


def test_a_frame_the_live_gate_never_saw_is_not_decided_in_replay(recorded: Path, tmp_path: Path) -> None:
    """A lagging opd node skips embeddings (its reader keeps the newest only); the recorder still has them.
    Replay decides exactly the frames with a live decision: here one /opd/gate record is taken out."""
    import yaml
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer

    from opd.replay.bags.reader import typestore

    ts = typestore()
    custom = yaml.safe_load((recorded / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    out = tmp_path / "one_less"
    with AnyReader([recorded], default_typestore=ts) as reader, Writer(out, version=9) as writer:
        for key, value in custom["custom_data"].items():
            writer.set_custom_data(key, value)
        conns = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=ts) for c in reader.connections}
        gates = 0
        for conn, t, raw in reader.messages():
            gates += conn.topic == "/opd/gate"
            if not (conn.topic == "/opd/gate" and gates == 40):
                writer.write(conns[conn.topic], t, raw)
    full, less = replay(recorded, "--reuse-state"), replay(out, "--reuse-state")
    assert less["frames"]["frames_not_decided_live"] == full["frames"].get("frames_not_decided_live", 0) + 1
    live = less["live_match"]
    assert live["compared"] == live["live_decisions"] == full["live_match"]["live_decisions"] - 1
    assert less["decisions"] == full["decisions"] - 1
