import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.config import ConfigError
from policies.export import DEFAULT_CONTRACT
from policies.skill_contract import SkillContract


def _contract(**changes) -> dict:
    data = {
        "robot": "r",
        "safe_skill": "stop",
        "skills": [
            {"name": "go", "params": [{"name": "v", "unit": "m/s", "low": 0.0, "high": 1.0, "default": 0.5}]},
            {"name": "stop"},
        ],
    }
    data.update(changes)
    return data


def _stop_with(*param_changes: dict) -> dict:
    """A contract whose `stop` skill has one parameter per dict, each a valid one with `changes` applied."""
    base = {"name": "v", "unit": "m/s", "low": 0.0, "high": 1.0, "default": 0.5}
    return _contract(skills=[{"name": "stop", "params": [{**base, **c} for c in param_changes]}])


def test_default_contract_loads_and_lays_out_slots():
    c = SkillContract.load(DEFAULT_CONTRACT)
    assert c.num_skills == len(c.skills) >= 2
    assert c.num_params == sum(len(s.params) for s in c.skills)
    assert c.safe_skill in c.names
    # Every slot is owned by the skill whose slice covers it.
    for k, sl in enumerate(c.layout.slices):
        assert np.all(c.layout.owner[sl] == k)
    assert np.all(c.layout.low < c.layout.high)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (_contract(safe_skill="brake"), "safe_skill"),
        (_contract(skills=[]), "skills"),
        (_contract(skills=[{"name": "stop"}, {"name": "stop"}]), "duplicate skill"),
        (_stop_with({"low": 1.0, "high": 1.0, "default": 1.0}), "low (1.0) must be < high"),
        (_stop_with({"default": 2.0}), "default 2.0 is outside"),
        (_stop_with({"unit": ""}), "unit"),
        (_stop_with({}, {}), "duplicate parameter"),
        (_contract(robot="r", extra_key=1), "extra_key"),
    ],
)  # fmt: skip
def test_invalid_contracts_name_the_field(bad, field):
    with pytest.raises(ConfigError, match=re.escape(field)):
        SkillContract.from_dict(bad)


def test_yaml_errors_name_the_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("robot: [unclosed")
    with pytest.raises(ConfigError, match="c.yaml"):
        SkillContract.load(p)
    with pytest.raises(ConfigError, match="not found"):
        SkillContract.load(tmp_path / "missing.yaml")


def test_action_builds_named_params_and_rejects_out_of_range():
    c = SkillContract.from_dict(_contract())
    k, params = c.action("go", v=0.8)
    assert k == 0 and params.tolist() == [0.8]
    assert c.named_params(k, params) == {"v": 0.8}
    with pytest.raises(ValueError, match="outside"):
        c.action("go", v=1.5)
    with pytest.raises(ValueError, match="no parameter"):
        c.action("go", w=0.1)
    with pytest.raises(ValueError, match="unknown skill"):
        c.action("fly")
    with pytest.raises(ValueError, match="out of range"):
        c.check_skill_id(7)


@given(
    skill=st.one_of(st.integers(-3, 6), st.floats(allow_nan=True)),
    params=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=5),
)
def test_clip_always_returns_an_executable_action(skill, params):
    c = SkillContract.load(DEFAULT_CONTRACT)
    out = c.clip(skill, np.asarray(params, dtype=np.float64))
    assert 0 <= out.skill < c.num_skills
    assert out.params.shape == (c.num_params,)
    assert np.all(np.isfinite(out.params))
    assert np.all((out.params >= c.layout.low) & (out.params <= c.layout.high))
    valid = isinstance(skill, int) and 0 <= skill < c.num_skills
    if not valid or len(params) != c.num_params or not np.all(np.isfinite(params)):
        assert out.skill == c.safe_skill_id and out.clipped


def test_clip_keeps_in_bounds_actions_and_resets_other_slots():
    c = SkillContract.load(DEFAULT_CONTRACT)
    k, params = c.action(0, **{p.name: p.high for p in c.skills[0].params})
    noisy = params.copy()
    other = c.layout.owner != 0
    noisy[other] = c.layout.high[other]  # other skills' slots are ignored, reset to defaults
    out = c.clip(k, noisy)
    assert not out.clipped and out.skill == k
    np.testing.assert_array_equal(out.params[~other], params[~other])
    np.testing.assert_array_equal(out.params[other], c.layout.defaults[other])
