"""Export the student (encoder + deterministic head) and the state predictor as one artifact directory.

Files: encoder.onnx, policy.onnx, predictor.onnx (and encoder.int8.onnx with `int8=True`), the torch
weights they came from (student.pt, predictor.pt, for the `torch` reference backend), manifest.json, and
for a student distilled with a novelty gate its ensemble's weights (novelty.pt).

The predictor's output width is the robot's privileged (teacher-side) state width, never set by hand: the
manifest names its columns, in order, in `models.predictor.fields`.
"""

from __future__ import annotations

import json
import logging
import platform
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from policies.artifact import ARTIFACT_FORMAT, MANIFEST, Artifact, sha256_file
from policies.camera_model import CameraModel
from policies.predictor_config import PredictorConfig
from policies.quantize import load_calibration, quantize_int8, synthetic_calibration
from policies.skill_contract import SkillContract
from policies.state_predictor import StatePredictor
from policies.student_policy import StudentConfig, StudentPolicy
from policies.tensorrt_compat import tensorrt_problems
from policies.torch_files import load_torch

log = logging.getLogger(__name__)

# Pinned: runtimes and TensorRT parsers are validated against this opset. Change only with a re-export
# of every artifact and a rerun of the parity tests.
ONNX_OPSET = 18

DEFAULT_STUDENT_CONFIG = Path(__file__).parent / "configs" / "student.yaml"
DEFAULT_PREDICTOR_CONFIG = Path(__file__).parent / "configs" / "predictor.yaml"
DEFAULT_CONTRACT = Path(__file__).parents[1] / "sim" / "robots" / "diffbot" / "skills.yaml"


def export_artifact(
    out_dir: str | Path,
    student_cfg: StudentConfig | None = None,
    contract: SkillContract | None = None,
    predictor_cfg: PredictorConfig | None = None,
    *,
    privileged_fields: tuple[str, ...],
    student_weights: str | Path | None = None,
    predictor_weights: str | Path | None = None,
    int8: bool = False,
    calibration: str | Path | None = None,
    seed: int = 0,
    teacher: dict[str, str] | None = None,
    novelty: Novelty | None = None,
    weights_named: dict[str, str] | None = None,
    camera: CameraModel | None = None,
    on_stage: Callable[[str], None] = lambda stage: None,
) -> Path:
    """Build the models (loading weights when given), export them and write the manifest.

    The directory is written next to its final place and renamed into it, so a crash never leaves a
    half-written artifact behind.

    Args:
        privileged_fields: names of the teacher-side state columns the predictor predicts, in order
            (`RobotSpec.privileged_fields`; the default robot's: `sim.marker_task.robot_privileged_fields()`,
            passed in: policies/ does not import the sim). predictor.out_dim None resolves to their number;
            any other number must equal it.
        teacher: the teacher it was distilled from, {"checkpoint": path as configured, "sha256": its hash}
            (`opd.live.loading.teacher_record`): its predictor predicts what that teacher sees, so the OPD
            core deploys it with that teacher by default (`opd.live.loading.default_teacher`).
        novelty: the novelty gate's trained ensemble, for a student distilled with one (`novelty.pt`): a
            gate that reads it on the live graph or in a replay then reads this one, not an untrained one.
        weights_named: what the manifest names as the source of the student and predictor weights, where the
            files passed are scratch copies (e.g. a run's checkpoint: `export_checkpoint`), not worth naming.
        on_stage: told each stage as it starts (a command's progress: an export takes up to a minute).
        camera: the camera the student was trained with (`sim.real_robot_proxy.robot_camera`), written to
            `preprocessing.camera` for the robot's camera to be checked against; None writes none. Its size
            must be the image input's.
    """
    out_dir = Path(out_dir)
    student_cfg = student_cfg or StudentConfig.from_yaml(DEFAULT_STUDENT_CONFIG)
    contract = contract or SkillContract.load(DEFAULT_CONTRACT)
    predictor_cfg = predictor_cfg or PredictorConfig.from_yaml(DEFAULT_PREDICTOR_CONFIG)
    if predictor_cfg.in_dim is None:
        predictor_cfg = predictor_cfg.model_copy(update={"in_dim": student_cfg.encoder.embed_dim})
    if predictor_cfg.in_dim != student_cfg.encoder.embed_dim:
        raise ValueError(
            f"predictor.in_dim ({predictor_cfg.in_dim}) must equal encoder.embed_dim "
            f"({student_cfg.encoder.embed_dim}): the predictor reads state embeddings"
        )
    predictor_cfg, privileged_fields = _resolve_out_dim(predictor_cfg, privileged_fields)
    image = student_cfg.encoder.image
    if camera is not None and (camera.height, camera.width) != (image.height, image.width):
        raise ValueError(f"camera {camera.width}x{camera.height} px: the student's image input is "
                         f"{image.width}x{image.height} px; pass the camera it was trained with")  # fmt: skip
    on_stage("building the models")
    torch.manual_seed(seed)
    student = StudentPolicy(student_cfg, contract).eval()
    predictor = StatePredictor(predictor_cfg).eval()
    sources = {
        "student": _load_weights(student, student_weights, "student"),
        # the trunk's own start only matters when no student weights cover it
        "image_trunk": student.encoder.weights_source if student_weights is None else "the student weights",
        "predictor": _load_weights(predictor, predictor_weights, "predictor"),
    }
    sources |= weights_named or {}

    with _written_atomically(out_dir) as tmp:
        encoder, head = student.deployed_encoder(), student.deployed_head()
        models = {}
        for name, module, axes in (("encoder", encoder, None), ("policy", head, None),
                                   ("predictor", predictor, _predictor_axes())):  # fmt: skip
            on_stage(f"{name}.onnx")
            models[name] = _export_onnx(module, tmp / f"{name}.onnx", batch_axes=axes)
        models["predictor"]["fields"] = list(privileged_fields)  # prediction's last axis, in order
        on_stage("checking the graphs against TensorRT's operators")
        for name, entry in models.items():  # TensorRT refusals show here, on the CPU, not on the robot
            entry["tensorrt_problems"] = tensorrt_problems(tmp / entry["onnx"])
            if entry["tensorrt_problems"]:
                log.warning("%s.onnx would not build with TensorRT 10: %s", name, entry["tensorrt_problems"])
        if int8:
            on_stage("INT8 calibration of the encoder")
            feeds = (
                load_calibration(Path(calibration))
                if calibration
                else synthetic_calibration(models["encoder"])
            )
            quantize_int8(tmp / "encoder.onnx", tmp / "encoder.int8.onnx", feeds)
            models["encoder"]["int8"] = "encoder.int8.onnx"
            models["encoder"]["int8_calibration"] = str(calibration) if calibration else "synthetic"
        torch.save(student.state_dict(), tmp / "student.pt")
        torch.save(predictor.state_dict(), tmp / "predictor.pt")
        if novelty is not None:
            novelty.save(tmp)
        manifest = _manifest(student_cfg, contract, predictor_cfg, models, sources, tmp)
        if novelty is not None:
            novelty.describe(manifest, "trained with the student")
        if teacher is not None:
            manifest["teacher"] = teacher
        if camera is not None:
            fov = [round(camera.hfov_deg, 2), round(camera.vfov_deg, 2)]  # derived from fx, fy: for reading
            manifest["preprocessing"]["camera"] = {**camera.model_dump(mode="json"), "fov_deg": fov}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
    log.info("exported artifact to %s (weights: %s)", out_dir, manifest["weights_source"])
    return out_dir


HEAD_FILES = ("policy.onnx", "predictor.onnx", "student.pt", "predictor.pt")  # what a head version rewrites


@dataclass(frozen=True)
class Novelty:
    """A novelty gate's ensemble as an artifact carries it: its config (`opd.distill.novelty.NoveltyConfig`,
    as a dict: policies/ does not build it) and its weights (the `EnsembleNovelty` state dict)."""

    config: dict[str, Any]
    state: dict[str, torch.Tensor]

    FILE: ClassVar[str] = "novelty.pt"

    def save(self, root: Path) -> None:
        torch.save(self.state, root / self.FILE)

    def describe(self, manifest: dict, source: str) -> None:
        """Name the ensemble in `manifest` (written after `save`: its file entry is already there)."""
        manifest["config"]["novelty"] = self.config
        manifest["weights"]["novelty"] = self.FILE
        manifest["weights_source"] = {**manifest.get("weights_source", {}), "novelty": source}


def export_head_version(
    base: Artifact,
    student: StudentPolicy,
    predictor: StatePredictor,
    out_dir: str | Path,
    number: int,
    novelty: Novelty | None = None,
) -> Path:
    """A new version of `base` whose head and predictor are `student`'s and `predictor`'s (learnt online),
    and whose novelty ensemble is `novelty`'s when given (else the base's, if it has one).

    The encoder files are the base's, byte for byte (the live learner trains the head on the embeddings of
    that fixed encoder, and a re-export could differ in bytes), so the encoder node keeps its sessions. The
    manifest gets the new hashes and `version` (number, parent manifest hash); the directory is written next
    to `out_dir` and renamed into it, so a reader sees a whole version or none. Shapes must match the base
    (a head of another config is refused by its state dict).
    """
    out_dir = Path(out_dir)
    manifest = json.loads((base.root / MANIFEST).read_text())
    with _written_atomically(out_dir) as tmp:
        rewritten = HEAD_FILES + ((Novelty.FILE,) if novelty is not None else ())
        for name in manifest["files"]:
            if name not in rewritten:  # the encoder's files: linked, or copied across file systems
                try:
                    (tmp / name).hardlink_to(base.path(name))
                except OSError:
                    shutil.copy2(base.path(name), tmp / name)
        student, predictor = student.eval(), predictor.eval()
        for name, module, axes in (("policy", student.deployed_head(), None),
                                   ("predictor", predictor, _predictor_axes())):  # fmt: skip
            entry = {
                **manifest["models"][name],
                **_export_onnx(module, tmp / f"{name}.onnx", batch_axes=axes),
            }
            entry["tensorrt_problems"] = tensorrt_problems(tmp / entry["onnx"])
            manifest["models"][name] = entry
        torch.save(student.state_dict(), tmp / "student.pt")
        torch.save(predictor.state_dict(), tmp / "predictor.pt")
        if novelty is not None:
            novelty.save(tmp)
            novelty.describe(manifest, "online (OPD)")
        manifest["version"] = {"number": number, "parent_manifest_sha256": sha256_file(base.root / MANIFEST),
                               "created_utc": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
        manifest["weights_source"] = {**manifest.get("weights_source", {}), "student": "online (OPD)",
                                      "predictor": "online (OPD)"}  # fmt: skip
        manifest["files"] = _file_entries(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return out_dir


def _resolve_out_dim(
    cfg: PredictorConfig, fields: tuple[str, ...]
) -> tuple[PredictorConfig, tuple[str, ...]]:
    """Set predictor.out_dim to the number of privileged fields; refuse a hand-set width that differs."""
    fields = tuple(fields)
    if cfg.out_dim is None:
        resolved = {**cfg.model_dump(), "out_dim": len(fields)}  # validated: no fields is refused
        return PredictorConfig.from_dict(resolved, "predictor, out_dim from privileged_fields"), fields
    if cfg.out_dim != len(fields):
        raise ValueError(
            f"predictor.out_dim ({cfg.out_dim}) must equal the robot's privileged state width "
            f"({len(fields)} fields): the predictor predicts the teacher's state; set out_dim to null"
        )
    return cfg, fields


def _load_weights(module: nn.Module, path: str | Path | None, what: str) -> str:
    if path is None:
        log.info("%s: no weights file given, exporting the random initialisation", what)
        return "random-init"
    state = load_torch(path)
    module.load_state_dict(state)
    return str(path)


@contextmanager
def _written_atomically(out_dir: Path) -> Iterator[Path]:
    """A temporary directory next to `out_dir`, renamed into it when the block ends without an error: a
    crash never leaves a half-written artifact behind. An artifact already there is renamed aside first
    and deleted only once the new one is in place: deleting it in place, a crash left it half deleted."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    old = tmp.with_name(f"{tmp.name}.old")
    try:
        yield tmp
        if out_dir.exists():
            out_dir.rename(old)
        try:
            tmp.rename(out_dir)
        except OSError:
            if old.exists():  # the old one goes back
                old.rename(out_dir)
            raise
        out_dir.chmod(0o755)  # mkdtemp creates 0700; an artifact is meant to be shared
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _file_entries(root: Path) -> dict[str, dict]:
    """The manifest's `files`: size and SHA-256 of every file in `root`."""
    files = sorted(p for p in root.iterdir() if p.is_file())
    return {p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size} for p in files}


def _predictor_axes() -> tuple[dict[int, str], ...]:
    # frames (B, T, F): batch axis 0; h0, c0 (L, B, H): batch axis 1.
    return ({0: "batch"}, {1: "batch"}, {1: "batch"})


def _export_onnx(module: nn.Module, path: Path, batch_axes: tuple[dict[int, str], ...] | None = None) -> dict:
    """Export with a dynamic batch axis; return the model's manifest entry."""
    names = module.input_names
    batch = torch.export.Dim("batch", min=1, max=1024)
    axes = batch_axes or tuple({0: "batch"} for _ in names)
    dynamic = tuple({ax: batch for ax in a} for a in axes)
    with warnings.catch_warnings(), _quiet("onnxscript", "onnx_ir", "torch.onnx"):
        warnings.simplefilter("ignore")  # exporter chatter about internal torch deprecations
        torch.onnx.export(
            module, module.dummy_inputs(2), str(path), dynamo=True, opset_version=ONNX_OPSET,
            input_names=list(names), output_names=list(module.output_names), dynamic_shapes=dynamic,
            external_data=False, verbose=False,
        )  # fmt: skip
    _strip_stack_traces(path)
    return {"onnx": path.name, **module.io_spec()}


STACK_TRACE = "pkg.torch.onnx.stack_trace"  # per node: the exporting machine's source paths and lines


def _strip_stack_traces(path: Path) -> None:
    """Drop the exporter's per-node stack traces: they name the files of the machine that exported (an
    artifact must not carry a checkout's absolute paths) and change with any edit of the source, not of the
    model. The nodes' module names (`namespace`) stay, for profiling."""
    import onnx

    model = onnx.load(str(path))
    for node in model.graph.node:
        kept = [p for p in node.metadata_props if p.key != STACK_TRACE]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    onnx.save(model, str(path))


@contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """Silence the exporter's per-node INFO logging while exporting."""
    saved = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _manifest(
    student_cfg: StudentConfig,
    contract: SkillContract,
    predictor_cfg: PredictorConfig,
    models: dict,
    sources: dict,
    root: Path,
) -> dict:
    ec = student_cfg.encoder
    return {
        "format": ARTIFACT_FORMAT,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "opset": ONNX_OPSET,
        "versions": {
            "agent-stack": _version("agent-stack"),
            "torch": torch.__version__,
            "onnx": _version("onnx"),
            "onnxruntime": _version("onnxruntime"),
            "python": platform.python_version(),
        },
        "weights_source": sources,
        "preprocessing": {
            "image": {
                "layout": "NHWC",
                "channels": "RGB",
                "dtype": "uint8",
                "height": ec.image.height,
                "width": ec.image.width,
                "normalisation": "inside the graph: (x / 255 - mean) / std per channel; feed raw pixels",
                "mean": list(ec.image.mean),
                "std": list(ec.image.std),
            },
            "imu": {
                "window": ec.imu.window,
                "rate_hz": ec.imu.rate_hz,
                "window_s": ec.imu.window_s,
                "order": "oldest sample first, the last sample at the image stamp",
                "channels": ["accel_x", "accel_y", "accel_z", "gyro_x", "gyro_y", "gyro_z"],
                "units": ["m/s^2"] * 3 + ["rad/s"] * 3,
                "normalisation": (
                    f"inside the graph: accel / {ec.imu.accel_scale}, gyro / {ec.imu.gyro_scale}"
                ),
            },
            "progress": "task progress in [0, 1]",
            "step": "control steps since episode start, float32",
        },  # fmt: skip
        "models": models,
        "skill_contract": contract.model_dump(mode="json"),
        "action_layout": {
            "skill": contract.names,
            "params": [
                {"slot": i, "skill": s.name, "name": p.name, "unit": p.unit, "low": p.low, "high": p.high}
                for i, (s, p) in enumerate((s, p) for s in contract.skills for p in s.params)
            ],
        },
        "config": {
            "student": student_cfg.model_dump(mode="json"),
            "predictor": predictor_cfg.model_dump(mode="json"),
        },
        "weights": {"student": "student.pt", "predictor": "predictor.pt"},
        "files": _file_entries(root),
    }


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"
