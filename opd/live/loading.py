"""The OPD core as a live robot runs it: built from a deployed artifact; its student versions written as
artifacts (the learner itself runs in a process of its own: `opd.live.process`)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from opd.distill.config import OPDConfig
from opd.distill.from_artifact import learner_from_artifact
from opd.distill.learner import OnlineDistillation
from opd.distill.onnx_acting import OnnxActing
from policies.artifact import MANIFEST, Artifact, sha256_file
from policies.config import PROJECT_ROOT, from_root, load_yaml_mapping
from policies.export import Novelty, export_head_version
from policies.state_predictor import StatePredictor
from policies.student_from_artifact import build_student
from policies.teacher_policy import load_teacher
from policies.torch_files import load_torch
from sim.robots import diffbot

log = logging.getLogger(__name__)

DEFAULT_TEACHER = from_root(diffbot.TEACHER)
DEFAULT_OPD_CONFIG = PROJECT_ROOT / "opd/configs/live.yaml"  # its `opd:` section


def teacher_record(checkpoint: str | Path) -> dict[str, str]:
    """The manifest's record of the teacher a student was distilled from: the path as configured (relative
    to the project root when it is inside it) and the checkpoint's SHA-256."""
    return {"checkpoint": str(checkpoint), "sha256": sha256_file(from_root(checkpoint))}


def default_teacher(artifact: Artifact) -> Path:
    """The teacher the OPD core runs with `artifact` unless told otherwise: the one it was distilled from
    (its predictor predicts what that teacher sees), else the committed one. A recorded teacher that is
    missing or has changed is refused, not replaced."""
    record = artifact.teacher
    if record is None:
        return DEFAULT_TEACHER
    path = from_root(record.checkpoint)
    if not path.is_file():
        raise FileNotFoundError(f"{artifact.root} was distilled from the teacher {path}, which is missing; "
                                "pass the teacher checkpoint explicitly")  # fmt: skip
    if sha256_file(path) != record.sha256:
        raise ValueError(
            f"{artifact.root} was distilled from the teacher {path}, which has changed "
            f"since (SHA-256 {record.sha256[:12]}... recorded); pass the teacher explicitly"
        )
    return path


def default_versions_dir(artifact: Artifact) -> Path:
    """~/.cache/agent/versions/<first 12 hex of the base artifact's manifest hash>: the artifact itself may
    be read-only on a robot, and versions of two bases never mix."""
    digest = sha256_file(artifact.root / MANIFEST)[:12]
    return Path.home() / ".cache" / "agent" / "versions" / digest


def load_learner(
    artifact: Artifact, teacher: str | Path = "", opd_config: str | Path = "", learning: bool = True,
    onnx: bool = False,
) -> OnlineDistillation:  # fmt: skip
    """One-env learner on the artifact's head and predictor, the frozen teacher, the `opd:` section of a
    student training YAML (empty arguments: `default_teacher(artifact)`, opd/configs/live.yaml);
    `learning=False`: it never updates and keeps no sample store; `onnx`: it acts with the artifact's ONNX
    head and predictor (`opd.distill.onnx_acting`), as the live node and replay do."""
    path = Path(opd_config or DEFAULT_OPD_CONFIG)
    try:
        data, source = load_yaml_mapping(path, "opd_config")  # `extends:` resolved
    except OSError as err:
        raise ValueError(f"opd_config {path}: {err}") from None
    cfg = OPDConfig.from_dict(data.get("opd", {}), f"{source}: opd")
    learner = learner_from_artifact(artifact, load_teacher(teacher or default_teacher(artifact)), cfg,
                                    learning=learning)  # fmt: skip
    if onnx:
        learner.act_in_onnx(OnnxActing(artifact))
    return learner


def acting_version(path: str | Path, base: Artifact) -> tuple[OnnxActing, dict[str, torch.Tensor] | None]:
    """A student version of `base` as the OPD core acts with it: its ONNX head and predictor (and a novelty
    gate's ensemble weights, where it carries them), its hashes verified on loading. A version of another
    encoder (its embeddings would mean something else) or a corrupt one raises ValueError (ArtifactError
    for a corrupt one), and the caller keeps acting with what it has."""
    version = Artifact.load(path)
    if version.encoder_hash != base.encoder_hash:
        raise ValueError(f"{path}: its encoder is not the deployed one ({version.encoder_hash[:12]}... vs "
                         f"{base.encoder_hash[:12]}...)")  # fmt: skip
    novelty = None if version.weights.novelty is None else load_torch(version.weights.novelty)
    return OnnxActing(version), novelty


class VersionWriter:
    """Writes the acting student as new artifact versions, so the nodes that deploy it can swap to it.

    Every `every_s` (monotonic) the learner process calls `write`: the acting head and predictor (and a
    novelty gate's ensemble), copied under the learner's lock, become `root/vNNNNNN`
    (`policies.export.export_head_version`: the base's encoder files verbatim, new hashes, written
    atomically), and `on_version(path, number)` announces it.
    The export runs in a child process at low priority: torch's ONNX exporter is seconds of pure Python, and
    in this process it held the GIL against the control loop (measured: image -> command p99 173 ms and 412
    missed cycles in 5 min with a version a minute; docs/graph_learning.md). Only the newest `keep` versions
    stay on disk: a node loading one has `every_s` x (keep - 1) to do so. A failed export is logged and
    skipped.
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

    def write(self, learner: OnlineDistillation) -> Path | None:
        """Export the acting student now; returns the version's directory (None if the export failed)."""
        self._last = time.monotonic()
        student, predictor, novelty = learner.snapshot_policy()
        number = self.number + 1
        path = self.root / f"v{number:06d}"
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".weights-") as tmp:
            torch.save(student.state_dict(), Path(tmp) / "student.pt")
            torch.save(predictor.state_dict(), Path(tmp) / "predictor.pt")
            if novelty is not None:
                novelty.save(Path(tmp))
                (Path(tmp) / "novelty.json").write_text(json.dumps(novelty.config))
            cmd = [sys.executable, "-m", "opd.live.loading", str(self.base.root), tmp, str(path), str(number)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # releases the GIL
        if done.returncode != 0:
            log.warning("student version %d not written: %s", number, done.stderr.strip()[-2000:])
            return None
        self.number = number
        for old in sorted(self.root.glob("v[0-9]*"))[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        self.on_version(path, number)
        return path


def export_version_main(argv: list[str]) -> None:
    """Child process of `VersionWriter.write`: BASE WEIGHTS_DIR OUT NUMBER -> the version at OUT."""
    os.nice(10)  # below the control loop
    torch.set_num_threads(1)
    base_dir, weights, out, number = argv
    base = Artifact.load(base_dir)
    student = build_student(base, Path(weights) / "student.pt")
    predictor = StatePredictor(base.predictor_config)
    predictor.load_state_dict(load_torch(Path(weights) / "predictor.pt"))
    novelty = None
    if (Path(weights) / Novelty.FILE).is_file():
        state = load_torch(Path(weights) / Novelty.FILE)
        novelty = Novelty(json.loads((Path(weights) / "novelty.json").read_text()), state)
    export_head_version(base, student, predictor, out, int(number), novelty)


if __name__ == "__main__":
    export_version_main(sys.argv[1:])
