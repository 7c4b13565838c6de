"""A rosbag2 (MCAP) writer that finalises its bag also when the disk fills, and counts what it did not store.

rosbags' writer keeps a 1 MiB chunk of messages in memory and writes it whole; on a full disk that write
raised, the recorder's thread died with ~280 queued messages, and the bag was left without its summary and
metadata.yaml (`ros2 bag info` and `agent replay` could not open it). Here room for the ending is reserved
when the bag opens (`RESERVE_BYTES`, a file in the bag that is deleted to make the room). On a failed write
the file is cut back to the end of the last chunk written whole, the writer's own bookkeeping restored to
that point, and every message of the chunk that failed, and every later one, is counted per topic as not
stored; `close` then writes the summary, the footer and metadata.yaml into the reserved room, with the
counts in metadata.yaml's custom_data (`agent.not_stored`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter, defaultdict
from io import BytesIO
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.storage_mcap import PendingChunk

log = logging.getLogger(__name__)

# A chunk is written once it holds 1 MiB (rosbags), so the last whole one needs no room after a failure; the
# summary (schemas, channels, ~100 bytes per chunk index) and metadata.yaml need ~200 kB an hour of the graph.
RESERVE_BYTES = 2 << 20
RESERVE = ".reserve"  # the reserved room, in the bag directory until it is closed
NOT_STORED_KEY = "agent.not_stored"  # custom_data: {topic: messages not stored}, and why


class BagWriter:
    """Writes one bag at `out` (a new directory); `custom_data` goes into metadata.yaml."""

    def __init__(self, out: Path, custom_data: dict[str, str] | None = None) -> None:
        self.path = Path(out)
        self._writer = Writer(out, version=9, storage_plugin=StoragePlugin.MCAP)
        for key, value in (custom_data or {}).items():
            self._writer.set_custom_data(key, value)
        self._writer.open()
        self._storage = self._writer.storage
        self.error: OSError | None = None  # why writing stopped: nothing is stored after it
        self.not_stored: Counter[str] = Counter()  # messages given to `write` that the bag does not hold
        self._reserve = self.path / RESERVE
        try:
            with self._reserve.open("wb") as f:
                os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)
        except OSError as err:
            self._writer.abort()
            raise OSError(err.errno, f"no room to record into {self.path}: {err.strerror}") from None
        self._mark()

    def add_connection(self, topic: str, msg_type: str, **kwargs: Any) -> Any:
        """A topic to write (rosbags' `Writer.add_connection`); before the first message."""
        return self._writer.add_connection(topic, msg_type, **kwargs)

    def write(self, conn: Any, stamp_ns: int, data: bytes) -> bool:
        """Store one message; False (counted in `not_stored`) once writing has failed."""
        if self.error is not None:
            self.not_stored[conn.topic] += 1
            return False
        chunks = len(self._storage.chunks)
        try:
            self._writer.write(conn, stamp_ns, data)
            if len(self._storage.chunks) != chunks:  # a chunk went to the file: it is whole there
                self._storage.bio.flush()
                self._mark()
            return True
        except OSError as err:
            self._fail(err, conn.topic)
            return False

    def stored(self) -> Counter[str]:
        """Messages the bag holds, by topic (a chunk lost to a failure takes messages `write` took)."""
        return Counter({c.topic: self._writer.counts[c.id] for c in self._writer.connections})

    def close(self) -> None:
        """Write the summary and metadata.yaml (also after a failure: into the reserved room)."""
        self._reserve.unlink(missing_ok=True)
        if self.error is not None or +self.not_stored:
            why = f"the disk: {self.error}" if self.error is not None else ""
            record = json.dumps({"why": why, "topics": dict(self.not_stored)})
            self._writer.set_custom_data(NOT_STORED_KEY, record)
        self._writer.close()

    def _mark(self) -> None:
        """Remember the state after the last chunk written whole: what a failure rolls back to."""
        s, w = self._storage, self._writer
        self._good = {
            "end": s.bio.tell(), "chunks": len(s.chunks), "channel_stats": dict(s.channel_stats),
            "times": (s.message_start_time, s.message_end_time), "counts": dict(w.counts),
            "stamps": (w.min_timestamp, w.max_timestamp),
        }  # fmt: skip

    def _fail(self, err: OSError, topic: str) -> None:
        """Roll the bag back to its last whole chunk and count the messages that were in the failed one."""
        self.error = err
        self._reserve.unlink(missing_ok=True)  # the room to end the bag in
        s, w, good = self._storage, self._writer, self._good
        by_id = {c.id: c.topic for c in w.connections}
        self.not_stored.update({by_id[i]: n - good["counts"].get(i, 0) for i, n in w.counts.items()})
        self.not_stored[topic] += 1  # the message whose write failed was not counted by the writer
        with contextlib.suppress(OSError):
            s.bio.close()  # its buffer holds part of the failed chunk: that flush may fail too
        s.bio = s.path.open("r+b")
        s.bio.truncate(good["end"])
        s.bio.seek(good["end"])
        del s.chunks[good["chunks"] :]
        s.chunk = PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))
        # Every connection keeps its key (those added after the mark at 0): both are indexed by id.
        s.channel_stats = {i: good["channel_stats"].get(i, 0) for i in s.channel_stats}
        s.message_start_time, s.message_end_time = good["times"]
        w.counts = {i: good["counts"].get(i, 0) for i in w.counts}
        w.min_timestamp, w.max_timestamp = good["stamps"]
        lost = sum(self.not_stored.values())
        log.error("recording into %s stopped: %s; %d messages not stored", self.path, err, lost)
