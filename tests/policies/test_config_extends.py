"""`extends:` in config YAML: a file holds only what it changes from its base, and resolves to the same
validated config as writing every field out."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policies.config import PROJECT_ROOT, ConfigError
from policies.student_policy import StudentConfig
from sim.config import SimConfig


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_file_overrides_its_base_key_by_key(tmp_path: Path) -> None:
    base = SimConfig.from_yaml(PROJECT_ROOT / "sim/configs/mujoco.yaml").model_dump(mode="json")
    write(tmp_path / "base.yaml", base)
    clearance = base["task"]["clearance_m"] + 0.1
    write(tmp_path / "child.yaml", {"extends": "base.yaml", "task": {"clearance_m": clearance}})
    child = SimConfig.from_yaml(tmp_path / "child.yaml")
    assert child == SimConfig.from_dict({**base, "task": {**base["task"], "clearance_m": clearance}})
    assert child != SimConfig.from_dict(base)


def test_lists_are_replaced_whole_and_siblings_kept(tmp_path: Path) -> None:
    base = StudentConfig().model_dump(mode="json")
    base["encoder"]["imu"]["window"] = 50  # not the default: kept from the base, not filled in
    assert len(base["encoder"]["imu"]["conv_channels"]) > 1
    write(tmp_path / "base.yaml", base)
    write(tmp_path / "child.yaml", {"extends": "base.yaml", "encoder": {"imu": {"conv_channels": [8]}}})
    child = StudentConfig.from_yaml(tmp_path / "child.yaml")
    assert child.encoder.imu.conv_channels == [8]
    assert child.encoder.imu.window == 50


def test_a_chain_of_bases_resolves_in_order_and_the_base_is_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "deep").mkdir()
    write(tmp_path / "root.yaml", {"head": {"hidden": [64], "gumbel_tau": 0.5}})
    write(tmp_path / "deep" / "mid.yaml", {"extends": "../root.yaml", "head": {"hidden": [32, 32]}})
    write(tmp_path / "deep" / "leaf.yaml", {"extends": "mid.yaml", "head": {"gumbel_tau": 2.0}})
    leaf = StudentConfig.from_yaml(tmp_path / "deep" / "leaf.yaml")
    assert leaf.head.hidden == [32, 32] and leaf.head.gumbel_tau == 2.0


def test_a_typo_in_an_extending_file_names_the_field_and_both_files(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", {})
    write(tmp_path / "child.yaml", {"extends": "base.yaml", "head": {"hiden": [8]}})
    with pytest.raises(ConfigError, match=r"child\.yaml extends .*base\.yaml[\s\S]*head\.hiden"):
        StudentConfig.from_yaml(tmp_path / "child.yaml")


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({"a.yaml": {"extends": "missing.yaml"}}, r"not found: .*missing\.yaml \(extended by .*a\.yaml\)"),
        ({"a.yaml": {"extends": "b.yaml"}, "b.yaml": {"extends": "a.yaml"}}, r"a\.yaml extends itself"),
        ({"a.yaml": {"extends": "a.yaml"}}, r"a\.yaml extends itself"),
        ({"a.yaml": {"extends": ["b.yaml"]}}, r"extends must be one file name"),
        ({"a.yaml": {"extends": "b.yaml"}, "b.yaml": [1, 2]}, r"b\.yaml must hold a mapping"),
    ],
)
def test_a_bad_base_is_one_clear_error(tmp_path: Path, files: dict, match: str) -> None:
    for name, data in files.items():
        write(tmp_path / name, data)
    with pytest.raises(ConfigError, match=match):
        StudentConfig.from_yaml(tmp_path / "a.yaml")


def test_the_opd_node_reads_the_opd_section_of_an_extending_training_config() -> None:
    """`opd_config` may name a training YAML that extends another: the node's learner gets the resolved
    section (the base's gate and distillation settings with the file's own change), not the few lines the
    file holds."""
    from opd.live.loading import load_learner
    from opd.student.trainer import StudentTrainConfig
    from policies.artifact import Artifact

    path = PROJECT_ROOT / "docs/experiments/configs/student_transfer_wide_bf16_store64.yaml"
    assert "gate" not in yaml.safe_load(path.read_text())["opd"]  # the gate lives in its bases
    learner = load_learner(Artifact.load(PROJECT_ROOT / "sim/robots/diffbot/student"), opd_config=path,
                           learning=False)  # fmt: skip
    resolved = StudentTrainConfig.from_yaml(path).opd
    assert learner.cfg.gate == resolved.gate
    # the live learner keeps the artifact's encoder fixed: every other distillation setting is the file's
    assert learner.cfg.distill == resolved.distill.model_copy(update={"train_encoder": False})
    assert learner.cfg.distill.capacity == 64000 and learner.cfg.distill.precision == "bf16"


def test_a_directory_or_a_file_that_is_not_text_is_one_clear_error(tmp_path: Path) -> None:
    """Both used to escape as IsADirectoryError or UnicodeDecodeError, the latter naming no file."""
    with pytest.raises(ConfigError, match=rf"cannot read {tmp_path}"):
        SimConfig.from_yaml(tmp_path)
    (tmp_path / "a.yaml").write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"cannot read .*a\.yaml"):
        SimConfig.from_yaml(tmp_path / "a.yaml")


@pytest.mark.parametrize(
    "data, field",
    [({"settle_s": ".inf"}, "settle_s"),
     ({"task": {"rewards": {"progress": ".nan"}}}, "task.rewards.progress"),
     ({"task": {"time_limit_s": ".inf"}}, "task.time_limit_s")],
)  # fmt: skip
def test_nan_or_an_infinity_in_a_config_is_refused_naming_the_field(tmp_path: Path, data, field) -> None:
    """`gt=0` lets `.inf` through: it then overflowed in the simulator (a raw OverflowError), and a NaN
    reward weight made every reward NaN."""
    text = yaml.safe_dump(data).replace("'.inf'", ".inf").replace("'.nan'", ".nan")  # YAML's own floats
    (tmp_path / "sim.yaml").write_text(text)
    with pytest.raises(ConfigError, match=rf"{field}"):
        SimConfig.from_yaml(tmp_path / "sim.yaml")
