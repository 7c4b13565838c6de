"""Gymnasium registration: every registered env resets, steps, matches its spaces and vectorises."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sim.gym_env
from sim.scripted_controller import ScriptedController

IDS = sorted(i for i in gym.registry if i.startswith("agent/"))
ISAAC = pytest.mark.skipif(importlib.util.find_spec("isaacsim") is None, reason="Isaac Sim is not installed")
RUNNABLE = [pytest.param(i, marks=ISAAC) if "Isaac" in i else i for i in IDS]


def test_the_declared_ids_are_registered() -> None:
    assert IDS == sorted(sim.gym_env.ENV_IDS)


@pytest.mark.parametrize("env_id", RUNNABLE)
def test_reset_and_zero_action_step(env_id: str) -> None:
    env = gym.make(env_id)
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space
    zero = {"skill": 0, "params": np.zeros(env.action_space["params"].shape, dtype=np.float32)}
    obs, reward, terminated, truncated, info = env.step(zero)
    assert obs in env.observation_space
    assert info["clipped"]  # zero speed is below the drive skill's bound
    assert np.isfinite(reward) and not terminated and not truncated
    for key, value in obs.items():
        assert np.all(np.isfinite(value)), key
    if "image" in obs:
        assert obs["image"].shape == (128, 128, 3) and obs["image"].dtype == np.uint8
        assert obs["imu"].shape == (100, 6)
    env.close()


@pytest.mark.parametrize("env_id", ["agent/DiffBotPrivileged-v0", "agent/DiffBot-v0"])
def test_passes_the_gymnasium_env_checker(env_id: str) -> None:
    env = gym.make(env_id)
    with pytest.warns(UserWarning):  # Gymnasium recommends [-1, 1] boxes; ours are the contract's bounds
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_seeded_episodes_repeat() -> None:
    def run() -> list[np.ndarray]:
        env = gym.make("agent/DiffBotPrivileged-v0")
        env.action_space.seed(3)
        obs, _ = env.reset(seed=42)
        out = [obs["privileged"]]
        for _ in range(10):
            obs, reward, *_ = env.step(env.action_space.sample())
            out.append(np.append(obs["privileged"], reward))
        env.close()
        return out

    for a, b in zip(run(), run(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vectorises_with_the_gymnasium_vector_api(mode: str) -> None:
    envs = gym.make_vec("agent/DiffBotPrivileged-v0", num_envs=2, vectorization_mode=mode)
    obs, _ = envs.reset(seed=0)
    assert obs["privileged"].shape == (2, envs.single_observation_space["privileged"].shape[0])
    assert not np.array_equal(obs["privileged"][0], obs["privileged"][1])  # env i is seeded with seed + i
    for _ in range(3):
        obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
    assert reward.shape == (2,) and np.isfinite(reward).all()
    envs.close()


def test_an_episode_ends_terminated_on_success() -> None:
    env = gym.make("agent/DiffBotPrivileged-v0")
    controller = ScriptedController(env.unwrapped.robot.spec)
    obs, _ = env.reset(seed=1)
    terminated = truncated = False
    total = 0.0
    while not (terminated or truncated):
        skill, params = controller.act(obs["privileged"][None])
        obs, reward, terminated, truncated, info = env.step({"skill": int(skill[0]), "params": params[0]})
        total += reward
    assert terminated and info["success"] and info["outcome"] == "success"
    assert obs["progress"][0] == 1.0 and total > 0


@pytest.mark.skipif(importlib.util.find_spec("isaacsim") is not None, reason="Isaac Sim is installed here")
def test_the_isaac_env_fails_at_once_without_isaac_sim() -> None:
    from sim.backends import BackendUnavailable

    with pytest.raises(BackendUnavailable, match="isaacsim"):
        gym.make("agent/DiffBotPrivilegedIsaac-v0")


def test_rejects_unknown_observation_modes() -> None:
    with pytest.raises(ValueError, match="obs_mode"):
        sim.gym_env.DiffBotEnv(obs_mode="pixels")


def test_action_repeat_holds_each_action_and_sums_rewards() -> None:
    one = sim.gym_env.DiffBotEnv(obs_mode="privileged")
    four = sim.gym_env.DiffBotEnv(obs_mode="privileged", action_repeat=4)
    action = {"skill": 0, "params": np.array([0.5, 1.0, 0.0, 1.0], dtype=np.float32)}
    one.reset(seed=4), four.reset(seed=4)
    rewards = [one.step(action)[1] for _ in range(4)]
    obs, reward, *_, info = four.step(action)
    assert obs["step"][0] == 4
    assert reward == pytest.approx(sum(rewards), rel=1e-5)
    np.testing.assert_allclose(obs["privileged"], one.unwrapped.robot.observation().privileged[0])
    assert info["reward_terms"]["time"] == 4.0
    with pytest.raises(ValueError, match="action_repeat"):
        sim.gym_env.DiffBotEnv(obs_mode="privileged", action_repeat=0)
