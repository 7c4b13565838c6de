"""Seeded evaluation, the Wilson interval, and the committed teacher checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from opd.evaluation import evaluate_teacher, load_teacher, wilson_interval
from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy, teacher_features
from sim.robots.diffbot import constants
from sim.vector_env import DiffBotVectorEnv

COMMITTED = constants.ROOT / "teacher" / "teacher.pt"
SHORT = {"task": {"time_limit_s": 4.0}}  # 20 decisions at 5 Hz


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [  # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3
        (81, 263, (0.2553, 0.3662)),
        (15, 148, (0.0624, 0.1605)),
        (0, 20, (0.0, 0.1611)),
        (1, 29, (0.0061, 0.1718)),
        (29, 29, (0.8830, 1.0)),
    ],
)
def test_wilson_interval_matches_published_values(successes: int, n: int, expected: tuple) -> None:
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=1e-4)


def test_wilson_interval_of_no_episodes_is_uninformative() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_episode_i_is_the_same_whichever_env_runs_it() -> None:
    torch.manual_seed(0)
    contract = SkillContract.load(constants.CONTRACT)
    obs_dim = DiffBotVectorEnv(1, obs_mode="privileged").single_observation_space["privileged"].shape[0]
    policy = TeacherPolicy(obs_dim + contract.num_skills, contract, TeacherConfig(hidden=[16])).eval()
    two = evaluate_teacher(policy, 5, sim_config=SHORT, num_envs=2)
    three = evaluate_teacher(policy, 5, sim_config=SHORT, num_envs=3)
    assert two["outcomes"] == three["outcomes"] and sum(two["outcomes"].values()) == 5
    assert two["mean_return"] == pytest.approx(three["mean_return"], rel=1e-5)
    assert set(two) >= {"episodes", "success_rate", "ci95", "mean_return", "sim", "proxy"}
    # where episodes end: per outcome, the share of the tour done and the episode time
    assert two["by_outcome"] == three["by_outcome"] and set(two["by_outcome"]) == set(two["outcomes"])
    for outcome, end in two["by_outcome"].items():
        assert 0.0 <= end["progress_mean"] <= 1.0 and 0.0 < end["time_s_mean"] <= 4.0
        if outcome == "timeout":
            assert end["time_s_mean"] == pytest.approx(4.0, abs=0.25)  # SHORT's time limit
        if outcome == "success":
            assert end["progress_mean"] == 1.0


def test_the_committed_teacher_loads_and_acts_inside_the_contract() -> None:
    teacher = load_teacher(COMMITTED)
    meta = yaml.safe_load(COMMITTED.with_suffix(".yaml").read_text())
    envs = DiffBotVectorEnv(8, obs_mode="privileged", action_repeat=teacher.cfg.action_repeat)
    assert meta["privileged_fields"] == list(envs.robot.spec.privileged_fields)
    assert teacher.contract == envs.contract and not teacher.training
    obs, _ = envs.reset(seed=0)
    lay = teacher.contract.layout
    for _ in range(5):
        feats = teacher_features(obs["privileged"], obs["skill"], teacher.contract.num_skills)
        skill, params = teacher.act(feats)
        assert skill.shape == (8,) and params.shape == (8, teacher.contract.num_params)
        assert np.all((0 <= skill) & (skill < teacher.contract.num_skills))
        assert np.all((lay.low <= params) & (params <= lay.high))
        others = ~teacher.contract.param_mask(skill)
        defaults = np.broadcast_to(lay.defaults, params.shape)[others].astype(np.float32)  # the head's dtype
        np.testing.assert_array_equal(params[others].astype(np.float32), defaults)
        np.testing.assert_array_equal(teacher.act(feats)[0], skill)  # greedy: deterministic
        obs, *_ = envs.step({"skill": skill, "params": params})
    envs.close()
