"""The deployment artifact: one directory with the ONNX graphs, torch weights and a JSON sidecar.

The sidecar (`manifest.json`) holds what deployers otherwise get wrong: input names, shapes and dtypes,
image normalisation, IMU window and rate, the skill contract, output layout, the SHA-256 of every file,
the ONNX opset and the exporting versions. Loading verifies every hash first: a truncated or edited file
is refused before any runtime parses it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policies.camera_model import CameraModel
from policies.predictor_config import PredictorConfig
from policies.skill_contract import SkillContract

if TYPE_CHECKING:
    from policies.student_policy import StudentConfig

ARTIFACT_FORMAT = "agent-artifact/1"
MANIFEST = "manifest.json"
MODELS = ("encoder", "policy", "predictor")


class ArtifactError(ValueError):
    """The artifact is missing, corrupt, modified or of an unknown format."""


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class WeightFiles:
    """The torch weights an artifact carries: the `torch` backend runs them, OPD starts from them."""

    student: Path
    predictor: Path
    novelty: Path | None  # the novelty gate's ensemble; None: the student was distilled without one


@dataclass(frozen=True)
class TeacherRecord:
    """The teacher a student was distilled from (`opd.live.loading.teacher_record` writes it)."""

    checkpoint: str  # as configured: relative to the project root when inside it
    sha256: str  # of the checkpoint when the student was exported


@dataclass(frozen=True)
class Artifact:
    """A verified artifact directory. Its manifest is read through the accessors below, which name a missing
    entry, so no caller indexes the JSON by hand (`policies.export` writes it)."""

    root: Path
    manifest: dict[str, Any]

    @classmethod
    def load(cls, root: str | Path) -> Artifact:
        """Read the manifest and verify the size and SHA-256 of every listed file."""
        root = Path(root)
        path = root / MANIFEST
        if not path.is_file():
            # policies.export renames the artifact it replaces aside until the new one is in place
            aside = sorted(root.parent.glob(f".{root.name}.*.old")) if root.name else []
            hint = f" (an export that was interrupted left the one before at {aside[-1]})" if aside else ""
            raise ArtifactError(
                f"{root}: no {MANIFEST}; is this an artifact directory written by `agent export`?{hint}"
            )
        try:
            manifest = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ArtifactError(f"{path}: corrupt manifest ({err})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != ARTIFACT_FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
            raise ArtifactError(f"{path}: format {found!r} is not {ARTIFACT_FORMAT!r}")
        for key in ("files", "models", "skill_contract", "config"):
            if key not in manifest:
                raise ArtifactError(f"{path}: missing key {key!r}")
        art = cls(root, manifest)
        art.verify()
        return art

    def verify(self) -> None:
        """Raise ArtifactError unless every file listed in the manifest is present and unmodified."""
        for name, meta in self.manifest["files"].items():
            f = self.root / name
            if not f.is_file():
                raise ArtifactError(f"{f}: listed in the manifest but missing")
            size = f.stat().st_size
            if size != meta["bytes"]:
                raise ArtifactError(
                    f"{f}: {size} bytes, manifest says {meta['bytes']} (truncated or replaced); re-export it"
                )
            digest = sha256_file(f)
            if digest != meta["sha256"]:
                raise ArtifactError(
                    f"{f}: SHA-256 {digest[:16]}... does not match the manifest's {meta['sha256'][:16]}... "
                    "(the file was modified or corrupted); re-export it"
                )

    def _read(self, *keys: str, required: bool = True) -> Any:
        """The manifest's entry at the nested `keys`: missing, an ArtifactError naming it when `required`,
        else None."""
        value: Any = self.manifest
        for depth, key in enumerate(keys):
            if not isinstance(value, dict) or key not in value:
                if not required:
                    return None
                missing = ".".join(keys[: depth + 1])
                raise ArtifactError(f"{self.root / MANIFEST}: no {missing}; re-export it with `agent export`")
            value = value[key]
        return value

    @property
    def contract(self) -> SkillContract:
        return SkillContract.from_dict(self._read("skill_contract"), source=f"{self.root}/{MANIFEST}")

    @property
    def student_config(self) -> StudentConfig:
        """The student's config as exported: the architecture its weights fit."""
        from policies.student_policy import StudentConfig  # torch: the ONNX runtimes never build a student

        source = f"{self.root / MANIFEST}: config.student"
        return StudentConfig.from_dict(self._read("config", "student"), source)

    @property
    def predictor_config(self) -> PredictorConfig:
        return PredictorConfig.from_dict(
            self._read("config", "predictor"), f"{self.root / MANIFEST}: config.predictor"
        )

    @property
    def novelty_config(self) -> dict[str, Any] | None:
        """The novelty ensemble's config as a dict (`opd.distill.config.NoveltyConfig` builds it, not
        policies/); None without one."""
        return self._read("config", "novelty", required=False)

    @property
    def embed_dim(self) -> int:
        """Width of the state embedding (E), without building the config: the ONNX path needs no torch."""
        return int(self._read("config", "student", "encoder", "embed_dim"))

    @property
    def memory_frames(self) -> int:
        """Embeddings the head acts on (W); artifacts from before the frame memory have none: one."""
        frames = self._read("config", "student", "memory", "frames", required=False)
        return 1 if frames is None else int(frames)

    @property
    def image_hw(self) -> tuple[int, int]:
        """The encoder's image input (height, width), pixels."""
        image = self._read("preprocessing", "image")
        return int(image["height"]), int(image["width"])

    @property
    def camera(self) -> CameraModel | None:
        """The camera the student was trained with; None for artifacts exported without one."""
        entry = self._read("preprocessing", "camera", required=False)
        if entry is None:
            return None
        fields = {k: v for k, v in entry.items() if k != "fov_deg"}  # fov_deg: derived, for the reader
        return CameraModel.from_dict(fields, f"{self.root / MANIFEST}: preprocessing.camera")

    @property
    def imu_window(self) -> int:
        """IMU samples per encoder input."""
        return int(self._read("preprocessing", "imu", "window"))

    @property
    def imu_rate_hz(self) -> float:
        """The IMU rate the encoder was trained at, Hz."""
        return float(self._read("preprocessing", "imu", "rate_hz"))

    @property
    def weights(self) -> WeightFiles:
        novelty = self._read("weights", "novelty", required=False)
        return WeightFiles(
            student=self.path(self._read("weights", "student")),
            predictor=self.path(self._read("weights", "predictor")),
            novelty=None if novelty is None else self.path(novelty),
        )

    @property
    def teacher(self) -> TeacherRecord | None:
        """The teacher the student was distilled from; None when the manifest names none."""
        record = self._read("teacher", required=False)
        if not record:
            return None
        return TeacherRecord(self._read("teacher", "checkpoint"), self._read("teacher", "sha256"))

    @property
    def version(self) -> int | None:
        """Number of a version learnt online (`policies.export.export_head_version`); None for an export."""
        return self._read("version", "number", required=False)

    def model(self, name: str) -> dict[str, Any]:
        """A model's entry: onnx file, optional int8 file, inputs, outputs."""
        if name not in self.manifest["models"]:
            raise ArtifactError(f"{self.root}: no model {name!r}; it has {sorted(self.manifest['models'])}")
        return self.manifest["models"][name]

    def path(self, filename: str) -> Path:
        return self.root / filename

    def sha256(self, filename: str) -> str:
        return self.manifest["files"][filename]["sha256"]

    @property
    def encoder_hash(self) -> str:
        """SHA-256 of the encoder graph: what a state embedding was computed by. Student versions written
        online keep their base's encoder (`policies.export.export_head_version`), so they share it."""
        return self.sha256(self.model("encoder")["onnx"])

    @property
    def weights_hash(self) -> str:
        """SHA-256 of the student's torch weights: which student this is, across exports (the manifest's own
        hash changes with every export: it holds the time)."""
        return self.sha256(self._read("weights", "student"))
