"""Backend registry: robot backends chosen by name, imported only when chosen (they are heavy)."""

from __future__ import annotations

import importlib

from sim.config import BACKENDS, SimConfig
from sim.robot_interface import RobotInterface


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run on this machine; the message names what is missing."""


def make_backend(cfg: SimConfig) -> RobotInterface:
    """Build (not connect) the backend named by `cfg.backend`."""
    module, _, cls = BACKENDS[cfg.backend].partition(":")
    return getattr(importlib.import_module(module), cls)(cfg)
