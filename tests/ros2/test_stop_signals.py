"""StopSignals: a signal is a record, never an exception that could cut a stop short."""

from __future__ import annotations

import os
import signal

import pytest
from agent.stop_signals import StopSignals


def deliver(sig: int) -> None:
    """Send `sig` to this process; the handler runs on the main thread at the next bytecode boundary."""
    os.kill(os.getpid(), sig)
    for _ in range(1000):  # a few bytecodes: the pending handler runs during this loop
        pass


def test_recorded_signals_raise_nothing_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signals = StopSignals().install()
    try:
        assert not signals
        for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
            deliver(sig)
        assert signals.received == [signal.SIGINT, signal.SIGINT, signal.SIGTERM] and signals
    finally:
        signals.restore()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_interrupt_raises_on_the_first_signal_only() -> None:
    signals = StopSignals(interrupt=True).install()
    try:
        with pytest.raises(KeyboardInterrupt):
            deliver(signal.SIGTERM)
        assert signals.stopping  # the stop the KeyboardInterrupt begins cannot be interrupted in turn
        deliver(signal.SIGINT)
        deliver(signal.SIGTERM)
        assert signals.received == [signal.SIGTERM, signal.SIGINT, signal.SIGTERM]
    finally:
        signals.restore()


def test_interrupt_raises_nothing_once_the_caller_is_stopping() -> None:
    signals = StopSignals(interrupt=True).install()
    try:
        signals.stopping = True  # a run that ended by itself, closing the graph
        deliver(signal.SIGINT)
        assert signals.received == [signal.SIGINT]
    finally:
        signals.restore()


def test_ignore_leaves_the_signals_without_effect() -> None:
    signals = StopSignals().install()
    try:
        signals.ignore()
        deliver(signal.SIGINT)
        assert signals.received == []
    finally:
        signals.restore()
