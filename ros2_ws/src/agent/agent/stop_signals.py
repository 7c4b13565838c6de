"""SIGINT and SIGTERM as a record of arrivals, so that no later signal can cut a robot's stop short.

A Ctrl-C in a terminal reaches every process of its group. `ros2 launch` then sends each node a SIGTERM if
it is still up 5 s later, and, run without a terminal (a service, CI), a SIGINT of its own at once (launch
3.x: `send_sigint=not due_to_sigint or context.noninteractive`): a node sees two or three signals, the
first two possibly milliseconds apart. Python's default SIGINT handler raises KeyboardInterrupt at whatever
line runs when each one arrives, so the second one landed in the shutdown that the first began: before the
safe action went out, or while it waited for its acknowledgement.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Records SIGINT and SIGTERM once `install`ed; with `interrupt`, the first also raises KeyboardInterrupt.

    The handler takes no lock: it runs on the main thread between bytecodes, possibly while that thread
    holds any lock. `interrupt` suits a main thread that blocks in long calls (`agent run`): the first signal
    ends the call, and every later one, or any once `stopping` is set, is only recorded, so the stop that
    follows runs to its end. Set `stopping` by assignment (`signals.stopping = True`), not through a method:
    a pending handler runs on entry to any Python call, which would raise before the flag is set.
    """

    def __init__(self, interrupt: bool = False) -> None:
        self.received: list[int] = []  # signal numbers, in order of arrival
        self.interrupt = interrupt
        self.stopping = False  # a stop is under way: signals are only recorded
        # Called on the first signal, from the handler: it may only set flags (no lock, no I/O). A node's
        # `halt`, so that no command goes out between the signal and the stop the shutdown sends.
        self.on_first: Callable[[], None] | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        self._previous = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        return self

    def ignore(self) -> None:
        """From now on the signals do nothing at all: for when nothing is left to stop."""
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)

    def restore(self) -> None:
        """The handlers from before `install` back."""
        for s, handler in self._previous.items():
            if handler is not None:  # None: installed outside Python, nothing to put back
                signal.signal(s, handler)

    def __bool__(self) -> bool:
        return bool(self.received)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if len(self.received) == 1 and self.on_first is not None:
            self.on_first()
        if self.interrupt and not self.stopping:
            self.stopping = True
            raise KeyboardInterrupt
