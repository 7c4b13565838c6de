"""The OPD core as a live robot runs it: built from a deployed artifact, learning on a thread of its own."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import torch
import yaml

from opd.evaluation import load_teacher
from opd.online_distillation import OnlineDistillation, OPDConfig, learner_from_artifact
from policies.artifact import Artifact
from sim.config import PROJECT_ROOT

log = logging.getLogger(__name__)

DEFAULT_TEACHER = PROJECT_ROOT / "sim/robots/diffbot/teacher/teacher.pt"
DEFAULT_OPD_CONFIG = PROJECT_ROOT / "opd/configs/live.yaml"  # its `opd:` section


def load_learner(
    artifact: Artifact, teacher: str | Path = "", opd_config: str | Path = ""
) -> OnlineDistillation:
    """One-env learner on the artifact's head and predictor, the frozen teacher, the `opd:` section of a
    student training YAML (empty arguments: the committed teacher, opd/configs/live.yaml)."""
    path = Path(opd_config or DEFAULT_OPD_CONFIG)
    try:
        section = (yaml.safe_load(path.read_text()) or {}).get("opd", {})
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"opd_config {path}: {err}") from None
    cfg = OPDConfig.from_dict(section, f"{path}: opd")
    return learner_from_artifact(artifact, load_teacher(teacher or DEFAULT_TEACHER), cfg)


class LearnerThread:
    """Calls `learner.update()` on a daemon thread, at most `max_rate_hz`, until `stop()`.

    The control callbacks only act and hand samples over; gradient steps happen here, and every
    `distill.sync_every` of them swap the acting weights in under the learner's lock, so acting never
    waits for a gradient step.
    """

    def __init__(self, learner: OnlineDistillation, max_rate_hz: float = 20.0) -> None:
        self.learner, self.period_s = learner, 1.0 / max_rate_hz
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="opd-learner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        torch.set_num_threads(1)  # the control loop's inference keeps the other core
        # Adam drives weights into denormal floats, which slow every later forward pass ~10x on a CPU
        # (measured in student training). Flushed on this thread only (the flag is per thread): the updates
        # it computes, and so the acting copies, hold none, and no other thread's floats change behaviour.
        torch.set_flush_denormal(True)
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                self.learner.update()
                self._stop.wait(max(0.0, self.period_s - (time.monotonic() - t0)))
        except Exception as err:  # noqa: BLE001 - reported on /diagnostics, acting goes on
            self.error = err
            log.exception("OPD learner thread stopped")
