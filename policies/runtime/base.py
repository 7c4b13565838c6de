"""What every inference backend provides: run one exported graph on named numpy inputs."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine; the message says which package or device is missing."""


class ModelRunner(Protocol):
    """One exported graph on one backend; numpy inputs and outputs keyed by the manifest's names."""

    backend: str
    precision: str

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...
