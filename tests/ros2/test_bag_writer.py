"""A bag whose disk fills ends finalised and readable, and every message it could not store is counted."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import yaml
from agent.bag_writer import NOT_STORED_KEY, RESERVE, BagWriter
from rosbags.rosbag2 import Reader

from opd.replay.bags.reader import typestore

STORE = typestore()
String = STORE.types["std_msgs/msg/String"]
PAYLOAD = 20_000  # bytes a message: about a camera frame, so that chunks (1 MiB) fill in ~50 messages


class FillsUp:
    """The bag's file on a disk with `room` bytes left: it takes part of the write that overflows, then fails
    as a full disk does."""

    def __init__(self, f: object, room: int) -> None:
        self.f, self.room = f, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            self.f.write(bytes(memoryview(data)[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.f, name)


def message(topic: str, i: int) -> bytes:
    return STORE.serialize_cdr(String(data=f"{topic} {i} ".ljust(PAYLOAD, "x")), String.__msgtype__)


@pytest.mark.parametrize("room", [0, 1_500_000])  # the first chunk fails, or the second
def test_a_bag_whose_disk_fills_is_finalised_and_counts_every_message_it_did_not_store(
    tmp_path: Path, room: int
) -> None:
    bag = BagWriter(tmp_path / "bag", {"agent.params": "p"})
    conns = {t: bag.add_connection(t, "std_msgs/msg/String", typestore=STORE) for t in ("/a", "/b")}
    bag._storage.bio = FillsUp(bag._storage.bio, room)
    given, stored = {"/a": 0, "/b": 0}, set()
    for i in range(200):  # ~4 MiB: past the room left
        for topic, conn in conns.items():
            given[topic] += 1
            if bag.write(conn, 1_000 + i, message(topic, i)):
                stored.add((topic, i))
    assert isinstance(bag.error, OSError) and bag.error.errno == errno.ENOSPC
    bag.close()

    assert not (tmp_path / "bag" / RESERVE).exists()
    with Reader(tmp_path / "bag") as reader:  # metadata.yaml and the MCAP summary are there
        read = set()
        for conn, stamp, data in reader.messages():
            text = STORE.deserialize_cdr(data, String.__msgtype__).data.split()
            assert text[0] == conn.topic and 1_000 + int(text[1]) == stamp  # intact, in its place
            read.add((conn.topic, int(text[1])))
        counts = {c.topic: c.msgcount for c in reader.connections}
    custom = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())
    custom = custom["rosbag2_bagfile_information"]["custom_data"]
    # Only whole chunks stay: some messages reported stored went with the chunk that failed.
    assert read <= stored and len(read) == sum(counts.values()) and counts == bag.stored()
    not_stored = json.loads(custom[NOT_STORED_KEY])
    assert "No space left" in not_stored["why"] and custom["agent.params"] == "p"
    for topic, n in given.items():  # every message given is in the bag or counted as not stored, once
        assert counts[topic] + not_stored["topics"][topic] == n == counts[topic] + bag.not_stored[topic]
    assert (len(read) > 0) == (room > 0)


def test_a_disk_without_room_to_end_a_bag_is_refused_at_the_start(tmp_path: Path, monkeypatch) -> None:
    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match="no room to record"):
        BagWriter(tmp_path / "bag")
