"""One module per `agent` subcommand (`agent.cli.COMMANDS`), and the argument types they share."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`, else argparse's error naming the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # what argparse names the type in its messages
    return parse


def device_spec(text: str) -> str:
    """An argparse type: `--device auto|cpu|cuda[:N]` (checked by name; whether the GPU is there is asked
    when the command runs, where torch is loaded)."""
    from opd.world import DEVICE_CHOICES, DEVICE_PATTERN

    if not re.fullmatch(DEVICE_PATTERN, text):
        raise argparse.ArgumentTypeError(f"expected {DEVICE_CHOICES}, got {text!r}")
    return text


device_spec.__name__ = "device"
