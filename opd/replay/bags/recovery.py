"""What a recording cut short still holds: MCAP files without their summary and footer (the recorder
crashed, the disk filled, the power went), read record by record with the `mcap` library's stream reader.

rosbags, like rosbag2's own reader, opens an MCAP file through its footer and summary; `ros2 bag reindex`
rebuilds them offline. Every record before the cut is intact, so replay reads those directly: schemas and
channels as they come, chunks decompressed, up to the first record the file does not hold in full.
Messages come out in log-time order, as rosbags gives them: a recorder writes them as it receives them,
which is that order, and a file written otherwise is put in order in one pass, holding back only the
messages read ahead of their turn. `RecoveredMcap` offers the part of rosbags' AnyReader that
`opd.replay.bags.reader.BagInput` uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import StreamReader


@dataclass(eq=False)
class RecoveredConnection:
    """One topic of the recovered files (merged over split files), as rosbags' Connection names it."""

    topic: str
    msgtype: str
    msgcount: int = 0


@dataclass(frozen=True)
class Cut:
    """Where a file stopped being readable."""

    path: Path
    last_log_s: float  # log time of the last message read before the cut, s (0: none)
    messages: int  # messages read from the file before the cut
    error: str  # what the reader met at the cut


class RecoveredMcap:
    """The complete records of `files` (a bag's .mcap files, in order), decoded with `store`."""

    def __init__(self, files: list[Path], store: Any) -> None:
        self.files, self.store = files, store
        self.cuts: list[Cut] = []
        self._conns: dict[tuple[str, str], RecoveredConnection] = {}
        times = []  # log time of each message, in file order, ns
        for conn, t_ns, _ in self._scan(record_cuts=True):
            conn.msgcount += 1
            times.append(t_ns)
        t = np.asarray(times, np.int64)
        self.start_time, self.end_time = (int(t.min()), int(t.max())) if len(t) else (0, 0)
        # each message's place in log-time order (ties in file order); None: the files are in that order
        in_order = bool(np.all(np.diff(t) >= 0))
        self._rank = None if in_order else np.argsort(np.argsort(t, kind="stable"), kind="stable")

    @property
    def connections(self) -> list[RecoveredConnection]:
        return list(self._conns.values())

    def messages(
        self, connections: list[RecoveredConnection]
    ) -> Iterator[tuple[RecoveredConnection, int, bytes]]:
        """(connection, log time ns, serialized message) of `connections`, in log-time order."""
        wanted = {id(c) for c in connections}
        held: dict[int, tuple[RecoveredConnection, int, bytes] | None] = {}  # read ahead of their turn
        turn = 0  # the place in log-time order that goes out next
        for i, (conn, t_ns, raw) in enumerate(self._scan(record_cuts=False)):
            if self._rank is None:
                if id(conn) in wanted:
                    yield conn, t_ns, raw
                continue
            held[int(self._rank[i])] = (conn, t_ns, raw) if id(conn) in wanted else None
            while turn in held:
                message = held.pop(turn)
                turn += 1
                if message is not None:
                    yield message

    def deserialize(self, raw: bytes, msgtype: str) -> Any:
        return self.store.deserialize_cdr(raw, msgtype)

    def close(self) -> None:
        """Nothing stays open between reads."""

    def _scan(self, record_cuts: bool) -> Iterator[tuple[RecoveredConnection, int, bytes]]:
        for path in self.files:
            schemas: dict[int, Schema] = {}
            channels: dict[int, RecoveredConnection] = {}
            count, last_ns = 0, 0
            with path.open("rb") as f:
                records = iter(StreamReader(f, skip_magic=False, emit_chunks=False).records)
                while True:
                    try:
                        record = next(records)
                    except StopIteration:
                        break
                    except Exception as err:  # a record cut short, or what the cut left behind
                        if record_cuts:
                            self.cuts.append(Cut(path, last_ns * 1e-9, count, f"{type(err).__name__}: {err}"))
                        break
                    if isinstance(record, Schema):
                        schemas[record.id] = record
                    elif isinstance(record, Channel):
                        channels[record.id] = self._connection(record, schemas.get(record.schema_id))
                    elif isinstance(record, Message) and record.channel_id in channels:
                        count, last_ns = count + 1, record.log_time
                        yield channels[record.channel_id], record.log_time, record.data

    def _connection(self, channel: Channel, schema: Schema | None) -> RecoveredConnection:
        """The topic's connection; a type the store does not know is registered from the file's schema."""
        msgtype = schema.name if schema else ""
        if schema and msgtype not in self.store.types and schema.encoding == "ros2msg":
            from rosbags.typesys import get_types_from_msg

            try:
                self.store.register(get_types_from_msg(schema.data.decode(), msgtype))
            except Exception:  # an unparsable definition: its messages will not decode (counted there)
                pass
        key = (channel.topic, msgtype)
        if key not in self._conns:
            self._conns[key] = RecoveredConnection(channel.topic, msgtype)
        return self._conns[key]
