"""Export -> artifact -> runtimes: parity with the torch reference, integrity checks, input checks."""

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from policies.artifact import ARTIFACT_FORMAT, Artifact, ArtifactError
from policies.export import ONNX_OPSET, export_artifact
from policies.predictor_config import PredictorConfig
from policies.runtime import BackendUnavailable, load_model, load_student
from policies.tensorrt_compat import tensorrt_problems
from sim.marker_task import robot_privileged_fields

# Documented parity tolerance of the fp32 ONNX Runtime (and TensorRT fp32) backends against torch eager.
EMBED_ATOL = 1e-4


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, tiny_cfg, contract):
    out = tmp_path_factory.mktemp("art") / "student"
    pred = PredictorConfig(in_dim=tiny_cfg.encoder.embed_dim, hidden=16)
    fields = tuple(f"s{i}" for i in range(6))  # out_dim resolves to 6
    return export_artifact(
        out, student_cfg=tiny_cfg, contract=contract, predictor_cfg=pred, privileged_fields=fields, int8=True
    )


def test_the_onnx_graphs_name_no_file_of_the_exporting_machine(artifact):
    """The exporter's per-node stack traces name this checkout's files: an artifact ships without them."""
    art = Artifact.load(artifact)
    for name in ("encoder", "policy", "predictor"):
        model = onnx.load(str(art.root / art.model(name)["onnx"]))
        props = [p for n in model.graph.node for p in n.metadata_props]
        assert props, f"{name}: the exporter's node metadata is gone (namespace is kept)"
        assert not [p.key for p in props if p.key == "pkg.torch.onnx.stack_trace"], name
        assert not [p.value for p in props if str(Path(__file__).parents[2]) in p.value], name


def _cases(rt, n_random: int = 6) -> list[tuple]:
    """Random observations plus edge cases: black and saturated frames, zero IMU, progress 0 and 1."""
    rng = np.random.default_rng(0)
    h, w = rt.image_hw
    window = rt.imu_window
    cases = [
        (rng.integers(0, 256, (h, w, 3), dtype=np.uint8), rng.normal(0, 3, (window, 6)).astype(np.float32),
         int(rng.integers(0, rt.contract.num_skills)), float(rng.uniform()), float(rng.integers(0, 500)))
        for _ in range(n_random)
    ]  # fmt: skip
    cases.append((np.zeros((h, w, 3), np.uint8), np.zeros((window, 6), np.float32), 0, 0.0, 0.0))
    cases.append((np.full((h, w, 3), 255, np.uint8), np.zeros((window, 6), np.float32), 2, 1.0, 1999.0))
    return cases


def test_manifest_describes_everything_a_deployer_needs(artifact, contract):
    m = Artifact.load(artifact).manifest
    assert m["format"] == ARTIFACT_FORMAT and m["opset"] == ONNX_OPSET
    assert {"torch", "onnx", "onnxruntime", "python"} <= set(m["versions"])
    assert m["preprocessing"]["image"]["dtype"] == "uint8" and m["preprocessing"]["image"]["layout"] == "NHWC"
    assert m["preprocessing"]["imu"]["window"] == 32 and m["preprocessing"]["imu"]["rate_hz"] > 0
    assert m["skill_contract"]["skills"][0]["name"] == contract.names[0]
    assert [i["name"] for i in m["models"]["encoder"]["inputs"]] == [
        "image",
        "imu",
        "skill",
        "progress",
        "step",
    ]
    assert len(m["action_layout"]["params"]) == contract.num_params
    for f in ("encoder.onnx", "policy.onnx", "predictor.onnx", "encoder.int8.onnx", "student.pt"):
        assert len(m["files"][f]["sha256"]) == 64
    assert m["weights_source"]["student"] == "random-init"
    assert m["models"]["predictor"]["fields"] == [f"s{i}" for i in range(6)]


def test_predictor_predicts_the_default_robots_privileged_state(tmp_path, tiny_cfg, contract):
    """Shipped predictor.yaml (out_dim null) + the default robot's fields: the MuJoCo DiffBot's privileged
    state."""
    fields = robot_privileged_fields()
    assert len(fields) == 25  # 13 pose/target + 3 obstacles x 3 + wall gap + progress + time left
    art = export_artifact(tmp_path / "a", student_cfg=tiny_cfg, contract=contract, privileged_fields=fields)
    m = Artifact.load(art).manifest
    prediction = next(o for o in m["models"]["predictor"]["outputs"] if o["name"] == "prediction")
    assert prediction["shape"][-1] == m["config"]["predictor"]["out_dim"] == 25
    assert m["models"]["predictor"]["fields"] == list(fields)
    pred = load_model(art, "predictor", "torch")
    h = np.zeros((1, 1, m["config"]["predictor"]["hidden"]), np.float32)
    frames = np.zeros((1, 5, tiny_cfg.encoder.embed_dim), np.float32)
    assert pred.run({"frames": frames, "h0": h, "c0": h.copy()})["prediction"].shape == (1, 3, 25)


def test_a_predictor_width_that_is_not_the_robots_is_refused(tmp_path, tiny_cfg, contract):
    with pytest.raises(ValueError, match=r"out_dim \(16\).*\(25 fields\)"):
        export_artifact(tmp_path / "a", student_cfg=tiny_cfg, predictor_cfg=PredictorConfig(out_dim=16),
                        privileged_fields=robot_privileged_fields())  # fmt: skip
    with pytest.raises(ValueError, match=r"out_dim \(6\).*\(2 fields\)"):
        export_artifact(
            tmp_path / "b", student_cfg=tiny_cfg, predictor_cfg=PredictorConfig(out_dim=6),
            privileged_fields=("x_m", "y_m"),
        )  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_onnxruntime_matches_torch_on_random_and_edge_inputs(artifact):
    ref = load_student(artifact, "torch")
    ort = load_student(artifact, "onnxruntime")
    for case in _cases(ref):
        e_ref, g_ref = ref.encode(*case)
        e_ort, g_ort = ort.encode(*case)
        np.testing.assert_allclose(e_ort, e_ref, atol=EMBED_ATOL, rtol=0)
        np.testing.assert_allclose(g_ort, g_ref, atol=EMBED_ATOL, rtol=0)
        l_ref, s_ref, p_ref = ref.act(e_ref)
        l_ort, s_ort, p_ort = ort.act(e_ref)
        assert s_ort == s_ref
        np.testing.assert_allclose(p_ort, p_ref, atol=1e-5)
        np.testing.assert_allclose(l_ort, l_ref, atol=1e-5)


def test_batched_calls_match_single_calls(artifact):
    ort = load_student(artifact, "onnxruntime")
    cases = _cases(ort, 3)
    batch = [np.stack([c[i] for c in cases]) for i in range(5)]
    emb, gates = ort.encode(*batch)
    assert emb.shape[0] == len(cases)
    for i, c in enumerate(cases):
        np.testing.assert_allclose(emb[i], ort.encode(*c)[0], atol=1e-5)


def test_actions_lie_in_contract_bounds(artifact, contract):
    ort = load_student(artifact, "onnxruntime")
    lay = contract.layout
    rng = np.random.default_rng(1)
    _, skills, params = ort.act(rng.normal(0, 50, size=(64, ort.embed_dim)).astype(np.float32))
    assert np.all((params >= lay.low - 1e-6) & (params <= lay.high + 1e-6))
    assert np.all((skills >= 0) & (skills < contract.num_skills))


def test_int8_encoder_agrees_with_fp32(artifact):
    ref = load_student(artifact, "onnxruntime")
    q = load_student(artifact, "onnxruntime", precision="int8")
    assert q.precision == "int8"
    cos = []
    for case in _cases(ref):
        a, b = ref.encode(*case)[0], q.encode(*case)[0]
        cos.append(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))
    assert min(cos) > 0.9, cos  # random weights and synthetic calibration: a loose but real bound


def test_predictor_parity_with_explicit_state(artifact):
    ref = load_model(artifact, "predictor", "torch")
    ort = load_model(artifact, "predictor", "onnxruntime")
    rng = np.random.default_rng(2)
    h = np.zeros((1, 2, 16), np.float32)
    feeds = {"frames": rng.normal(size=(2, 5, 32)).astype(np.float32), "h0": h, "c0": h.copy()}
    for _ in range(3):  # step the carried LSTM state through both backends
        a, b = ref.run(feeds), ort.run(feeds)
        for k in ("prediction", "h1", "c1"):
            np.testing.assert_allclose(b[k], a[k], atol=EMBED_ATOL)
        assert a["prediction"].shape == (2, 3, 6)
        feeds = {"frames": feeds["frames"][:, ::-1].copy(), "h0": a["h1"], "c0": a["c1"]}


# Stated tolerances of the TensorRT engines against torch fp32 (embeddings and gates): fp32 differs by
# kernel choice only; fp16 (the default) keeps ~3 significant digits through the ResNet and attention.
TRT_ATOL = {"fp32": 1e-3, "fp16": 5e-2}


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_tensorrt_parity(artifact, precision):
    try:
        trt = load_student(artifact, "tensorrt", precision=precision)
    except BackendUnavailable as err:
        pytest.skip(f"TensorRT backend unavailable: {err}")
    ref = load_student(artifact, "torch")
    for case in _cases(ref):
        (emb, gates), (ref_emb, ref_gates) = trt.encode(*case), ref.encode(*case)
        np.testing.assert_allclose(emb, ref_emb, atol=TRT_ATOL[precision])
        np.testing.assert_allclose(gates, ref_gates, atol=TRT_ATOL[precision])
        assert trt.act(ref_emb)[1] == ref.act(ref_emb)[1]


def test_exported_graphs_pass_the_tensorrt_check(artifact):
    """Review defect: encoder.onnx began with a uint8 Transpose, which TensorRT refuses."""
    manifest = Artifact.load(artifact).manifest
    for name in ("encoder", "policy", "predictor"):
        entry = manifest["models"][name]
        assert entry["tensorrt_problems"] == [] == tensorrt_problems(artifact / entry["onnx"]), name
    first = onnx.load(str(artifact / "encoder.onnx")).graph.node
    image_users = [n.op_type for n in first if "image" in n.input]
    assert image_users == ["Cast"]  # the image is cast before anything else touches it


def _graph(ops: list[tuple[str, str, str, dict]], in_type: int, out_type: int) -> onnx.ModelProto:
    from onnx import helper

    nodes = [helper.make_node(op, [i], [o], **attrs) for op, i, o, attrs in ops]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("image", in_type, [1, 8, 8, 3])],
        [helper.make_tensor_value_info("out", out_type, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_the_tensorrt_check_flags_uint8_outside_cast_and_unknown_ops():
    from onnx import TensorProto

    perm = {"perm": [0, 3, 1, 2]}
    cast = {"to": TensorProto.FLOAT}
    bad = _graph([("Transpose", "image", "t", perm), ("Cast", "t", "out", cast)], TensorProto.UINT8,
                 TensorProto.FLOAT)  # fmt: skip
    assert any("uint8 tensor 't'" in p for p in tensorrt_problems(bad))
    good = _graph([("Cast", "image", "c", cast), ("Transpose", "c", "out", perm)], TensorProto.UINT8,
                  TensorProto.FLOAT)  # fmt: skip
    assert tensorrt_problems(good) == []
    unknown = _graph([("Cast", "image", "c", cast), ("Hardmax", "c", "out", {})], TensorProto.UINT8,
                     TensorProto.FLOAT)  # fmt: skip
    assert tensorrt_problems(unknown) == ["Hardmax (unnamed): op not supported by TensorRT 10"]
    double = _graph([("Cast", "image", "out", {"to": TensorProto.DOUBLE})], TensorProto.UINT8,
                    TensorProto.DOUBLE)  # fmt: skip
    assert any("DOUBLE" in p for p in tensorrt_problems(double))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda c: (c[0].astype(np.float32), *c[1:]), "image: expected dtype uint8"),
        (lambda c: (c[0].transpose(2, 0, 1).copy(), *c[1:]), r"image: expected shape"),
        (lambda c: (c[0][:, :-1], *c[1:]), r"image: expected shape"),
        (lambda c: (c[0], np.where(np.arange(32)[:, None] == 3, np.nan, c[1]), *c[2:]), r"imu: non-finite"),
        (lambda c: (c[0], np.full_like(c[1], np.inf), *c[2:]), r"imu: non-finite"),
        (lambda c: (c[0], c[1][:10], *c[2:]), r"imu: expected shape"),
        (lambda c: (*c[:2], 9, *c[3:]), r"skill: id 9 out of range"),
        (lambda c: (*c[:2], -1, *c[3:]), r"skill: id -1 out of range"),
        (lambda c: (*c[:2], 1.5, *c[3:]), r"skill: expected integer"),
        (lambda c: (*c[:3], 1.2, c[4]), r"progress: value 1.2 outside"),
        (lambda c: (*c[:3], float("nan"), c[4]), r"progress: non-finite"),
        (lambda c: (*c[:4], -3.0), r"step: value -3.0 outside"),
    ],
)  # fmt: skip
def test_bad_inputs_are_refused_with_a_message_naming_the_input(artifact, change, match):
    ort = load_student(artifact, "onnxruntime")
    case = _cases(ort, 1)[0]
    with pytest.raises(ValueError, match=match):
        ort.encode(*change(case))


def test_bad_embedding_is_refused(artifact):
    ort = load_student(artifact, "onnxruntime")
    with pytest.raises(ValueError, match="embedding: non-finite"):
        ort.act(np.full(ort.embed_dim, np.nan, np.float32))
    with pytest.raises(ValueError, match="embedding: expected shape"):
        ort.act(np.zeros(3, np.float32))


@pytest.fixture
def copy_of(artifact, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(artifact, dst)
    return dst


def test_modified_file_is_refused(copy_of):
    f = copy_of / "encoder.onnx"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="SHA-256"):
        load_student(copy_of, "onnxruntime")


def test_truncated_file_is_refused(copy_of):
    f = copy_of / "student.pt"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(ArtifactError, match="truncated"):
        load_student(copy_of, "torch")


def test_missing_file_and_corrupt_manifest_are_refused(copy_of, tmp_path):
    (copy_of / "policy.onnx").unlink()
    with pytest.raises(ArtifactError, match="missing"):
        Artifact.load(copy_of)
    (copy_of / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt manifest"):
        Artifact.load(copy_of)
    (copy_of / "manifest.json").write_text(json.dumps({"format": "other/9"}))
    with pytest.raises(ArtifactError, match="format"):
        Artifact.load(copy_of)
    with pytest.raises(ArtifactError, match="no manifest.json"):
        Artifact.load(tmp_path / "nowhere")


def test_replacing_an_artifact_never_leaves_it_half_deleted(
    artifact, tmp_path, monkeypatch, tiny_cfg, contract
):
    """The artifact already at OUT is renamed aside, not deleted in place, until the new one is there: a
    failure (or a kill) in between leaves the old one whole."""
    out = tmp_path / "student"
    shutil.copytree(artifact, out)
    before = Artifact.load(out).manifest
    rename = Path.rename

    def failing(self: Path, target: Path) -> Path:
        if Path(target) == out and not self.name.endswith(".old"):  # the new artifact moving in
            raise OSError("no space left on device")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    pred = PredictorConfig(in_dim=tiny_cfg.encoder.embed_dim, hidden=16)
    fields = tuple(f"s{i}" for i in range(6))
    with pytest.raises(OSError, match="no space"):
        export_artifact(
            out, student_cfg=tiny_cfg, contract=contract, predictor_cfg=pred, privileged_fields=fields
        )
    monkeypatch.undo()
    assert Artifact.load(out).manifest == before
    assert [p.name for p in tmp_path.iterdir()] == ["student"]  # nothing left beside it
    export_artifact(
        out, student_cfg=tiny_cfg, contract=contract, predictor_cfg=pred, privileged_fields=fields
    )
    assert Artifact.load(out).manifest != before and [p.name for p in tmp_path.iterdir()] == ["student"]
    out.rename(tmp_path / ".student.abc.old")  # killed between the two renames: it says where the old one is
    with pytest.raises(ArtifactError, match=r"interrupted left the one before at .*\.student\.abc\.old"):
        Artifact.load(out)


def test_unknown_backend_and_precision(artifact):
    with pytest.raises(ValueError, match="unknown backend"):
        load_student(artifact, "openvino")
    with pytest.raises(ValueError, match="precision"):
        load_student(artifact, "onnxruntime", precision="fp8")


def test_default_config_parity(tmp_path):
    """The shipped configuration (ResNet34, 128x128) holds the same tolerance as the tiny test model."""
    art = export_artifact(tmp_path / "default", privileged_fields=robot_privileged_fields())
    ref, ort = load_student(art, "torch"), load_student(art, "onnxruntime")
    for case in _cases(ref, 2):
        e_ref, e_ort = ref.encode(*case)[0], ort.encode(*case)[0]
        np.testing.assert_allclose(e_ort, e_ref, atol=EMBED_ATOL, rtol=0)
        assert ort.act(e_ort)[1] == ref.act(e_ref)[1]


def test_a_head_version_keeps_the_encoder_bytes_and_carries_the_new_head(artifact, tmp_path):
    """What the live learner publishes: the base's encoder files verbatim, the new head and predictor."""
    import torch

    from policies.export import export_head_version
    from policies.state_predictor import StatePredictor
    from policies.student_policy import StudentConfig, StudentPolicy

    base = Artifact.load(artifact)
    m = base.manifest
    student = StudentPolicy(StudentConfig.from_dict(m["config"]["student"]), base.contract)
    student.load_state_dict(torch.load(base.path("student.pt"), weights_only=True))
    predictor = StatePredictor(PredictorConfig.from_dict(m["config"]["predictor"]))
    predictor.load_state_dict(torch.load(base.path("predictor.pt"), weights_only=True))
    with torch.no_grad():  # a learnt head: its weights moved
        for p in student.head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    out = export_head_version(base, student, predictor, tmp_path / "v000001", 1)
    version = Artifact.load(out)  # every hash verified
    assert version.manifest["version"]["number"] == 1
    for name in ("encoder.onnx", "encoder.int8.onnx"):
        assert version.sha256(name) == base.sha256(name)  # byte for byte
    assert version.sha256("policy.onnx") != base.sha256("policy.onnx")
    ort = load_student(out, "onnxruntime")
    emb = np.random.default_rng(5).normal(size=(4, ort.embed_dim)).astype(np.float32)
    with torch.no_grad():
        want = student.head.deterministic(student.head(torch.from_numpy(emb)))
    for i in range(4):
        _, skill, params = ort.act(emb[i])
        assert skill == int(want[0][i])
        np.testing.assert_allclose(params, want[1][i].numpy(), atol=1e-4)
    (out / "policy.onnx").write_bytes((out / "policy.onnx").read_bytes()[:-10])  # a crash mid-copy, say
    with pytest.raises(ArtifactError, match="policy.onnx"):
        Artifact.load(out)
