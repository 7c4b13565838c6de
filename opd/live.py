"""The OPD core as a live robot runs it: built from a deployed artifact, learning on a thread of its own."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from opd.evaluation import load_teacher
from opd.online_distillation import OnlineDistillation, OPDConfig, learner_from_artifact
from policies.artifact import MANIFEST, Artifact, sha256_file
from policies.export import export_head_version
from sim.config import PROJECT_ROOT

log = logging.getLogger(__name__)

DEFAULT_TEACHER = PROJECT_ROOT / "sim/robots/diffbot/teacher/teacher.pt"
DEFAULT_OPD_CONFIG = PROJECT_ROOT / "opd/configs/live.yaml"  # its `opd:` section


def default_versions_dir(artifact: Artifact) -> Path:
    """~/.cache/agent/versions/<first 12 hex of the base artifact's manifest hash>: the artifact itself may
    be read-only on a robot, and versions of two bases never mix."""
    digest = sha256_file(artifact.root / MANIFEST)[:12]
    return Path.home() / ".cache" / "agent" / "versions" / digest


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


class VersionWriter:
    """Writes the acting student as new artifact versions, so the nodes that deploy it can swap to it.

    Every `every_s` (monotonic) the learner thread calls `write`: the acting head and predictor, copied
    under the learner's lock, become `root/vNNNNNN` (`policies.export.export_head_version`: the base's
    encoder files verbatim, new hashes, written atomically), and `on_version(path, number)` announces it.
    Only the newest `keep` versions stay on disk: a node loading one has `every_s` x (keep - 1) to do so.
    """

    def __init__(self, base: Artifact, root: str | Path, every_s: float,
                 on_version: Callable[[Path, int], None], keep: int = 3) -> None:  # fmt: skip
        if every_s <= 0 or keep < 2:
            raise ValueError(f"every_s ({every_s}) must be > 0 and keep ({keep}) >= 2")
        self.base, self.root, self.every_s, self.keep = base, Path(root), every_s, keep
        self.on_version = on_version
        existing = sorted(self.root.glob("v[0-9]*")) if self.root.is_dir() else []
        self.number = int(existing[-1].name[1:]) if existing else 0  # numbers keep rising across restarts
        self._last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every_s

    def write(self, learner: OnlineDistillation) -> Path:
        """Export the acting student now; returns the version's directory."""
        self._last = time.monotonic()
        student, predictor = learner.snapshot_policy()
        self.number += 1
        path = export_head_version(
            self.base, student, predictor, self.root / f"v{self.number:06d}", self.number
        )
        for old in sorted(self.root.glob("v[0-9]*"))[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        self.on_version(path, self.number)
        return path


class LearnerThread:
    """Calls `learner.update()` on a daemon thread, at most `max_rate_hz`, until `stop()`.

    The control callbacks only act and hand samples over; gradient steps happen here, and every
    `distill.sync_every` of them swap the acting weights in under the learner's lock, so acting never
    waits for a gradient step. With a `VersionWriter`, new student versions are written here too.
    """

    def __init__(
        self, learner: OnlineDistillation, max_rate_hz: float = 20.0, versions: VersionWriter | None = None
    ) -> None:
        self.learner, self.period_s, self.versions = learner, 1.0 / max_rate_hz, versions
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
                if self.versions is not None and self.versions.due():
                    self.versions.write(self.learner)
                self._stop.wait(max(0.0, self.period_s - (time.monotonic() - t0)))
        except Exception as err:  # noqa: BLE001 - reported on /diagnostics, acting goes on
            self.error = err
            log.exception("OPD learner thread stopped")
