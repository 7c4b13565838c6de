"""The artifact's typed accessors: they return what the export wrote, and a missing entry is named."""

import copy

import pytest
import torch

from policies.artifact import Artifact, ArtifactError, TeacherRecord
from policies.camera_model import CameraModel
from policies.export import Novelty, export_artifact, export_head_version
from policies.predictor_config import PredictorConfig
from policies.student_from_artifact import build_student
from policies.torch_files import load_torch

FIELDS = tuple(f"s{i}" for i in range(6))
TEACHER = {"checkpoint": "runs/teacher/teacher.pt", "sha256": "ab" * 32}
CAMERA = CameraModel(width=64, height=64, fx=30.0, fy=31.0, cx=31.5, cy=31.0, d=(-0.1, 0.01, 0.0, 0.0, 0.0))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, tiny_cfg, contract) -> Artifact:
    out = tmp_path_factory.mktemp("art") / "student"
    pred = PredictorConfig(in_dim=tiny_cfg.encoder.embed_dim, hidden=16)
    return Artifact.load(export_artifact(out, student_cfg=tiny_cfg, contract=contract, predictor_cfg=pred,
                                         privileged_fields=FIELDS, teacher=TEACHER,
                                         camera=CAMERA))  # fmt: skip


def test_the_accessors_return_what_the_export_wrote(artifact, tiny_cfg, contract):
    assert artifact.student_config == tiny_cfg
    assert artifact.predictor_config == PredictorConfig(in_dim=32, hidden=16, out_dim=len(FIELDS))
    assert artifact.contract.fingerprint == contract.fingerprint
    assert artifact.embed_dim == 32 and artifact.memory_frames == 1
    assert artifact.image_hw == (64, 64)
    assert artifact.imu_window == 32 and artifact.imu_rate_hz == tiny_cfg.encoder.imu.rate_hz
    root, weights = artifact.root, artifact.weights
    assert weights.student == root / "student.pt" and weights.predictor == root / "predictor.pt"
    assert weights.novelty is None and artifact.novelty_config is None
    assert artifact.teacher == TeacherRecord(**TEACHER)
    assert artifact.version is None  # an export, not a version learnt online
    assert artifact.camera == CAMERA  # the camera it was trained with, and its fields of view for a reader
    hfov, vfov = artifact.manifest["preprocessing"]["camera"]["fov_deg"]
    assert (hfov, vfov) == (
        pytest.approx(CAMERA.hfov_deg, abs=0.01),
        pytest.approx(CAMERA.vfov_deg, abs=0.01),
    )


def test_build_student_carries_the_artifacts_weights(artifact):
    student = build_student(artifact)
    saved = load_torch(artifact.weights.student)
    assert student.cfg == artifact.student_config
    assert all(torch.equal(student.state_dict()[k], v) for k, v in saved.items())


def test_a_version_names_its_number_and_its_novelty_ensemble(artifact, tmp_path):
    student = build_student(artifact)
    predictor_state = load_torch(artifact.weights.predictor)
    from policies.state_predictor import StatePredictor

    predictor = StatePredictor(artifact.predictor_config)
    predictor.load_state_dict(predictor_state)
    novelty = Novelty({"members": 2}, {"w": torch.zeros(2)})
    version = Artifact.load(export_head_version(artifact, student, predictor, tmp_path / "v3", 3, novelty))
    assert version.version == 3
    assert version.weights.novelty == version.path(Novelty.FILE)
    assert version.novelty_config == {"members": 2}
    assert version.teacher == artifact.teacher  # a version keeps its base's teacher


@pytest.mark.parametrize(
    ("path", "accessor"),
    [
        (("config", "student"), "student_config"),
        (("config", "predictor"), "predictor_config"),
        (("config", "student", "encoder", "embed_dim"), "embed_dim"),
        (("preprocessing", "image"), "image_hw"),
        (("preprocessing", "imu", "rate_hz"), "imu_rate_hz"),
        (("weights", "student"), "weights"),
        (("teacher", "sha256"), "teacher"),
    ],
)
def test_a_missing_entry_is_an_artifact_error_naming_it(artifact, path, accessor):
    manifest = copy.deepcopy(artifact.manifest)
    entry = manifest
    for key in path[:-1]:
        entry = entry[key]
    del entry[path[-1]]
    broken = Artifact(artifact.root, manifest)  # not loaded: nothing to verify
    with pytest.raises(ArtifactError, match=rf"manifest.json: no {'.'.join(path)}; re-export it"):
        getattr(broken, accessor)


def test_optional_entries_have_their_documented_defaults(artifact):
    """An artifact from before the frame memory acts on one embedding; one with no teacher names none."""
    manifest = copy.deepcopy(artifact.manifest)
    del manifest["config"]["student"]["memory"]
    del manifest["teacher"]
    del manifest["preprocessing"]["camera"]
    old = Artifact(artifact.root, manifest)
    assert old.memory_frames == 1 and old.teacher is None and old.version is None and old.camera is None


def test_a_camera_of_another_size_than_the_image_input_is_refused(tmp_path, tiny_cfg, contract):
    wide = CAMERA.model_copy(update={"width": 128})
    with pytest.raises(ValueError, match="camera 128x64 px: the student's image input is 64x64 px"):
        export_artifact(tmp_path / "a", student_cfg=tiny_cfg, contract=contract, privileged_fields=FIELDS,
                        camera=wide)  # fmt: skip
    assert not (tmp_path / "a").exists()
