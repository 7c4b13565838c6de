"""One module per `agent` subcommand (`agent.cli.COMMANDS`), and the argument types they share."""

from __future__ import annotations

import argparse
import contextlib
import re
import time
from collections.abc import Callable, Iterator


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


@contextlib.contextmanager
def stage_status(what: str) -> Iterator[Callable[[str], None]]:
    """A rich spinner on stderr for a command's stages, each shown with when it began (stdout stays the
    command's result); yields `stage(name)`. Off a terminal rich draws nothing: the log lines say the rest."""
    from rich.console import Console

    started = time.monotonic()
    with Console(stderr=True).status(what) as status:

        def stage(name: str) -> None:
            status.update(f"{what}: {name} (at {time.monotonic() - started:.0f} s)")

        yield stage
