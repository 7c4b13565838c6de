"""The OPD core acting in ONNX Runtime: parity with the torch models it was exported from, the same
decisions, and student versions swapped in between two frames with their hashes checked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from opd.distill.decision_stream import DecisionStream
from opd.distill.onnx_acting import OnnxActing
from opd.live.loading import acting_version, load_learner
from policies.artifact import Artifact, ArtifactError
from policies.export import DEFAULT_CONTRACT, export_artifact, export_head_version
from policies.predictor_config import PredictorConfig
from policies.runtime import load_model
from policies.skill_contract import SkillContract
from policies.student_policy import StudentConfig
from policies.teacher_policy import TeacherConfig, TeacherPolicy

DQ, E, W, PERIOD = 6, 32, 8, 0.05  # teacher state width, embedding width, head window, control period
# float32 graphs of the same weights through other kernels: what they agree to (measured ~1e-6)
ATOL = 1e-5


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Artifact, str, str]:
    """A tiny deployed student with a GRU memory head, its teacher and an `opd:` config on disk."""
    tmp = tmp_path_factory.mktemp("onnx_acting")
    contract = SkillContract.load(DEFAULT_CONTRACT)
    cfg = StudentConfig.from_dict({
        "encoder": {"image": {"backbone": "resnet18", "stages": 1, "height": 32, "width": 32},
                    "imu": {"window": 32, "conv_channels": [8, 16]},
                    "fusion": {"dim": 32, "heads": 4, "queries": 2}, "embed_dim": E},
        "head": {"hidden": [32]},
        "memory": {"frames": W, "hidden": 16},
    })  # fmt: skip
    fields = tuple(f"q{i}" for i in range(DQ))
    artifact = Artifact.load(export_artifact(tmp / "base", student_cfg=cfg, contract=contract, seed=3,
                                             predictor_cfg=PredictorConfig(in_dim=E, hidden=8),
                                             privileged_fields=fields))  # fmt: skip
    torch.manual_seed(0)
    teacher = TeacherPolicy(DQ + contract.num_skills, contract, TeacherConfig(hidden=[16]))
    torch.save(teacher.state_dict(), tmp / "teacher.pt")
    meta = {"obs_dim": DQ + contract.num_skills, "contract": contract.model_dump(mode="json"),
            "teacher": TeacherConfig(hidden=[16]).model_dump(mode="json")}  # fmt: skip
    (tmp / "teacher.yaml").write_text(yaml.safe_dump(meta))
    (tmp / "opd.yaml").write_text(yaml.safe_dump({"opd": {"align": {"period_s": PERIOD}}}))
    return artifact, str(tmp / "teacher.pt"), str(tmp / "opd.yaml")


def windows(n: int, t: int, seed: int = 0) -> np.ndarray:
    """(n, t, E) float32 windows, the oldest rows zero as at an episode's start."""
    out = np.random.default_rng(seed).normal(size=(n, t, E)).astype(np.float32)
    out[0, : t // 2] = 0.0
    return out


def test_the_onnx_graphs_agree_with_the_torch_models_they_came_from(base):
    artifact, teacher, opd = base
    torch_learner = load_learner(artifact, teacher, opd, learning=False)
    onnx = OnnxActing(artifact)
    frames, history = windows(5, W), windows(5, torch_learner.predictor_cfg.history, seed=1)
    skill, params = onnx.head_outputs(frames)
    want_skill, want_params = torch_learner.head_outputs(frames)
    assert skill.dtype == want_skill.dtype and params.dtype == want_params.dtype == np.float64
    np.testing.assert_array_equal(skill, want_skill)
    np.testing.assert_allclose(params, want_params, atol=ATOL)
    with torch.no_grad():
        logits = torch_learner.acting.act_dist(torch.from_numpy(frames)).logits.numpy()
    np.testing.assert_allclose(onnx.skill_logits(frames), logits, atol=ATOL)
    np.testing.assert_allclose(onnx.predictions(history), torch_learner.predictions_of(history), atol=ATOL)
    # the embeddings the head reads: the artifact's encoder graph against its torch encoder
    encoder = load_model(artifact, "encoder", "onnxruntime", threads=1)
    reference = load_model(artifact, "encoder", "torch")
    rng = np.random.default_rng(2)
    feeds = {"image": rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
             "imu": rng.normal(size=(2, 32, 6)).astype(np.float32), "skill": np.array([0, 2]),
             "progress": np.array([0.1, 0.9], np.float32),
             "step": np.array([3.0, 40.0], np.float32)}  # fmt: skip
    np.testing.assert_allclose(encoder.run(feeds)["state_embedding"],
                               reference.run(feeds)["state_embedding"], atol=ATOL)  # fmt: skip


def test_a_batch_gives_each_row_bit_for_bit_what_batch_one_gives(base):
    """What lets replay compute a recording's head and predictor outputs in batches and still reproduce the
    live decisions, which are made one frame at a time."""
    onnx = OnnxActing(base[0])
    frames, history = windows(33, W, seed=4), windows(33, 5, seed=5)
    skill, params = onnx.head_outputs(frames)
    pred = onnx.predictions(history)
    for i in range(len(frames)):
        one_skill, one_params = onnx.head_outputs(frames[i : i + 1])
        assert one_skill[0] == skill[i] and np.array_equal(one_params[0], params[i])
        assert np.array_equal(onnx.predictions(history[i : i + 1])[0], pred[i])


def stream_of(learner, steps: int = 30) -> list:
    """Decisions of a one-env stream: teacher states on time, embeddings 0.12 s late."""
    stream, rng, out = DecisionStream(learner), np.random.default_rng(7), []
    for k in range(steps):
        t = 1.0 + k * PERIOD
        stream.on_teacher(t, 0, k, np.sin(t + np.arange(DQ)).astype(np.float32), t)
        if k >= 3:
            out.append(stream.on_frame(t - 0.12, rng.normal(size=E).astype(np.float32), t))
    return out


def test_acting_in_onnx_decides_as_acting_in_torch(base):
    artifact, teacher, opd = base
    in_torch = stream_of(load_learner(artifact, teacher, opd, learning=False))
    in_onnx = stream_of(load_learner(artifact, teacher, opd, learning=False, onnx=True))
    assert [d.version for d in in_onnx] == [0] * len(in_onnx) and in_torch[0].version == -1
    assert [(d.source, d.reason) for d in in_onnx] == [(d.source, d.reason) for d in in_torch]
    for a, b in zip(in_onnx, in_torch, strict=True):
        assert a.decision.skill[0] == b.decision.skill[0]
        np.testing.assert_allclose(a.decision.params, b.decision.params, atol=ATOL)
        np.testing.assert_allclose(a.decision.error, b.decision.error, atol=ATOL)


def test_a_version_acts_from_the_next_frame_and_a_bad_one_is_refused(base, tmp_path: Path):
    artifact, teacher, opd = base
    learner = load_learner(artifact, teacher, opd, learning=False, onnx=True)
    student, predictor = load_learner(artifact, teacher, opd).get_policy()
    with torch.no_grad():  # a learnt head: its weights moved
        for p in student.head.parameters():
            p.add_(0.5 * torch.randn_like(p))
    path = export_head_version(artifact, student, predictor, tmp_path / "v000001", 1)
    stream = DecisionStream(learner)
    frames = windows(1, W, seed=9)[0]  # (W, E): fed one by one, the head's window is these frames
    for k, row in enumerate(frames[:-1]):
        assert stream.on_frame(1.0 + k * PERIOD, row, 1.0 + k * PERIOD).version == 0
    stream.offer(*acting_version(path, artifact))
    assert learner.acting_version == 0  # nothing changes between two frames
    last = stream.on_frame(1.0 + (W - 1) * PERIOD, frames[-1], 1.0 + (W - 1) * PERIOD)
    assert last.version == 1
    want = OnnxActing(Artifact.load(path)).head_outputs(frames[None])
    assert last.decision.skill[0] == want[0][0] and np.array_equal(learner.env.student_params[0], want[1][0])
    corrupt = tmp_path / "corrupt"
    shutil.copytree(path, corrupt)
    (corrupt / "policy.onnx").write_bytes((corrupt / "policy.onnx").read_bytes()[:-9] + b"tampered!")
    with pytest.raises(ArtifactError):
        acting_version(corrupt, artifact)
    other = tmp_path / "other_encoder"
    shutil.copytree(path, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["models"]["encoder"]["onnx"] = "policy.onnx"  # names another graph as its encoder
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="not the deployed one"):
        acting_version(other, artifact)
