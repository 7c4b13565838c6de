"""Messages lost on the way: gaps in each publisher's sequence numbers.

Every DDS publisher numbers what it publishes from 1 on, and rclpy hands the number and the publisher's id
to a subscription callback that takes a second argument (MessageInfo). A reader that sees 7 after 4 from
one publisher knows 5 and 6 were published and never delivered, however the loss happened (a best-effort
sample dropped, a reader history overwritten before the executor took it, a reader matched late).
"""

from __future__ import annotations

from typing import Any


class SequenceGaps:
    """Counts messages missing from each publisher's sequence numbers."""

    def __init__(self) -> None:
        self._next: dict[bytes, int] = {}  # publisher gid -> next expected number
        self.missing = 0  # published, never received
        self.unnumbered = 0  # received without a number (an RMW that gives none): not checkable

    def see(self, info: dict[str, Any]) -> int:
        """Record one received message from its MessageInfo; returns how many were found missing before it."""
        gid, number = info.get("publisher_gid"), info.get("publication_sequence_number")
        if gid is None or number is None:
            self.unnumbered += 1
            return 0
        publisher = bytes(gid["data"])
        expected = self._next.get(publisher, 1)
        missing = max(0, number - expected)
        self.missing += missing
        self._next[publisher] = max(expected, number + 1)
        return missing
