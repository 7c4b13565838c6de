"""Dotted command-line overrides (`opd.gate.budget=0.05`) laid over a config file, validated by its model."""

import pytest
import yaml
from pydantic import Field

from policies.config import Config, ConfigError, parse_overrides


class Gate(Config):
    budget: float = Field(0.1, ge=0, le=1)
    window: int = 10


class Train(Config):
    seed: int = 0
    name: str = "run"
    layers: list[int] = Field(default_factory=lambda: [64, 64])
    gate: Gate = Field(default_factory=Gate)


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "base.yaml"
    path.write_text("seed: 1\ngate:\n  window: 20\n")
    return path


def test_overrides_are_laid_over_the_file_as_yaml_values(base):
    cfg = Train.from_yaml(base, ["gate.budget=0.05", "layers=[8, 16]", "name=null_run", "seed=7"])
    assert (cfg.seed, cfg.name, cfg.layers) == (7, "null_run", [8, 16])
    assert (cfg.gate.budget, cfg.gate.window) == (0.05, 20)  # the file's sibling key stays


def test_the_resolved_config_holds_the_overrides(base, tmp_path):
    Train.from_yaml(base, ["gate.budget=0.25"]).to_yaml(tmp_path / "resolved.yaml")
    saved = yaml.safe_load((tmp_path / "resolved.yaml").read_text())
    assert saved["gate"] == {"budget": 0.25, "window": 20} and saved["seed"] == 1


@pytest.mark.parametrize(
    "override, words",
    [
        ("gate.budgett=0.05", r"gate.budgett = 0.05: Extra inputs are not permitted; did you mean budget\?"),
        ("gaet.budget=0.05", r"gaet: Extra inputs are not permitted; did you mean gate\?"),
        ("gate.budget=2", r"gate.budget = 2: Input should be less than or equal to 1"),
        ("seed=three", r"seed = 'three': Input should be a valid integer"),
        ("seed", "expected KEY=VALUE"),
        ("gate..budget=1", "expected KEY=VALUE"),
        ("seed=[1", "the value is not YAML"),
    ],
)
def test_a_bad_override_is_refused_naming_the_field(base, override, words):
    with pytest.raises(ConfigError, match=words):
        Train.from_yaml(base, [override])


def test_an_unknown_key_lists_the_keys_when_nothing_is_close(base):
    with pytest.raises(ConfigError, match="the keys here are budget, window"):
        Train.from_yaml(base, ["gate.zzz=1"])


def test_overrides_that_contradict_each_other_are_refused():
    with pytest.raises(ConfigError, match="'gate.budget=0.5' and 'gate=1' both set gate"):
        parse_overrides(["gate=1", "gate.budget=0.5"], "Train")
    with pytest.raises(ConfigError, match="'gate={}' replaces what 'gate.budget=0.5' sets below gate"):
        parse_overrides(["gate.budget=0.5", "gate={}"], "Train")
    with pytest.raises(ConfigError, match="'seed=2' and 'seed=1' both set seed"):
        parse_overrides(["seed=1", "seed=2"], "Train")


def test_a_commands_flags_are_given_values_and_may_not_meet_an_override_of_the_same_key(base):
    cfg = Train.from_yaml(base, ["gate.budget=0.5"], given={"seed": 9, "name": "a: b"})
    assert (cfg.seed, cfg.name, cfg.gate.budget) == (9, "a: b", 0.5)  # a flag's value is not read as YAML
    assert {"seed", "name", "gate"} <= cfg.model_fields_set and "layers" not in cfg.model_fields_set
    with pytest.raises(ConfigError, match="'seed=3' and 'seed=9' both set seed"):
        Train.from_yaml(base, ["seed=3"], given={"seed": 9})
