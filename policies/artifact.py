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
from typing import Any

from policies.skill_contract import SkillContract

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
class Artifact:
    """A verified artifact directory."""

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

    @property
    def contract(self) -> SkillContract:
        return SkillContract.from_dict(self.manifest["skill_contract"], source=f"{self.root}/{MANIFEST}")

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
        return self.sha256(self.manifest["weights"]["student"])
