"""ROS 2 test harness: DDS isolation, a model double, a probe node and spin helpers.

Isolation: each pytest process claims its own ROS_DOMAIN_ID (random, held by an exclusive file lock, so
two concurrent runs on one machine never share a domain) and keeps discovery on localhost, before any
test initialises rclpy. Subprocesses started by tests inherit both.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from ros_harness import FakeRuntime

from policies.skill_contract import SkillContract

REPO = Path(__file__).resolve().parents[2]
CONTRACT_YAML = REPO / "sim" / "robots" / "diffbot" / "skills.yaml"
_domain_lock: IO[str] | None = None


def _claim_domain_id() -> int:
    """A ROS domain id no other process on this machine holds; the lock lives as long as this process."""
    global _domain_lock
    ids = list(range(1, 101))  # FastDDS maps domain d to UDP ports 7400 + 250 d: keep well inside 0..232
    random.shuffle(ids)
    for domain in ids:
        f = open(Path(tempfile.gettempdir()) / f"agent-tests-ros-domain-{domain}.lock", "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        _domain_lock = f
        return domain
    raise RuntimeError("every ROS domain id 1..100 is held by another test run")


def pytest_configure(config: pytest.Config) -> None:
    os.environ["ROS_DOMAIN_ID"] = str(_claim_domain_id())
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_STATIC_PEERS", None)
    os.environ.pop("ROS_LOCALHOST_ONLY", None)  # deprecated since Jazzy; it would conflict with the range
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


@pytest.fixture(scope="session")
def contract() -> SkillContract:
    return SkillContract.load(CONTRACT_YAML)


@pytest.fixture
def fake_loader(contract: SkillContract) -> Callable[..., FakeRuntime]:
    """A runtime loader returning one shared FakeRuntime (inspect it via `fake_loader.runtime`)."""
    runtime = FakeRuntime(contract)

    def load(artifact_dir: str, backend: str = "onnxruntime", **options: object) -> FakeRuntime:
        load.calls.append((artifact_dir, backend, options))
        return runtime

    load.runtime = runtime
    load.calls = []
    return load


@pytest.fixture(scope="session")
def contract_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An artifact directory holding only a manifest with the diffbot contract (enough for the OPD shell)."""
    root = tmp_path_factory.mktemp("contract_artifact")
    manifest = {
        "format": "agent-artifact/1",
        "files": {},
        "models": {},
        "config": {},
        "skill_contract": SkillContract.load(CONTRACT_YAML).model_dump(mode="json"),
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture
def ros_context() -> Iterator[object]:
    """A fresh rclpy context per test, shut down afterwards."""
    import rclpy
    from rclpy.context import Context

    ctx = Context()
    with rclpy.init(context=ctx):
        yield ctx


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real exported artifact of a tiny student (32x32 image, 8 IMU samples) for the diffbot contract."""
    from policies.export import export_artifact
    from policies.predictor_config import PredictorConfig
    from policies.student_policy import StudentConfig
    from sim.marker_task import robot_privileged_fields

    cfg = StudentConfig.from_dict({
        "encoder": {
            "image": {"backbone": "resnet18", "height": 32, "width": 32},
            "imu": {"window": 8, "conv_channels": [8]},
            "fusion": {"dim": 16, "heads": 2, "queries": 2},
            "embed_dim": 16,
        },
        "head": {"hidden": [16]},
    })  # fmt: skip
    out = tmp_path_factory.mktemp("artifact") / "student"
    predictor, fields = PredictorConfig(in_dim=16, hidden=8), robot_privileged_fields()
    return export_artifact(out, student_cfg=cfg, predictor_cfg=predictor, privileged_fields=fields)


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained teacher.pt + teacher.yaml as `agent train teacher` writes them, for the MuJoCo default."""
    import torch
    import yaml

    from policies.teacher_policy import TeacherConfig, TeacherPolicy
    from sim.config import SimConfig
    from sim.marker_task import privileged_fields

    fields = privileged_fields(
        SimConfig.from_yaml(REPO / "sim" / "configs" / "mujoco.yaml").task.num_obstacles
    )
    contract = SkillContract.load(CONTRACT_YAML)
    cfg = TeacherConfig(hidden=[16], action_repeat=2)
    teacher = TeacherPolicy(len(fields) + contract.num_skills, contract, cfg)
    out = tmp_path_factory.mktemp("teacher")
    torch.save(teacher.state_dict(), out / "teacher.pt")
    meta = {"obs_dim": teacher.obs_dim, "teacher": cfg.model_dump(mode="json"),
            "contract": contract.model_dump(mode="json"), "privileged_fields": list(fields)}  # fmt: skip
    (out / "teacher.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return out / "teacher.pt"
