"""The batched vector env: Gymnasium's vector API over one backend, a drop-in for SyncVectorEnv."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import sim.gym_env
from sim.vector_env import DiffBotVectorEnv

IDS = sorted(sim.gym_env.ENV_IDS)
ISAAC = pytest.mark.skipif(importlib.util.find_spec("isaacsim") is None, reason="Isaac Sim is not installed")
RUNNABLE = [pytest.param(i, marks=ISAAC) if "Isaac" in i else i for i in IDS]
SHORT = {"task": {"time_limit_s": 1.0}}  # 20 control periods: episodes end within a few decisions


def actions(n: int, steps: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Seeded batches of full-speed drives with random curvature (some end in walls, the rest time out)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        params = np.tile(np.array([0.5, 0.0, 0.0, 1.0]), (n, 1))
        params[:, 1] = rng.uniform(-2.5, 2.5, n)
        out.append({"skill": np.zeros(n, dtype=np.int64), "params": params})
    return out


@pytest.mark.parametrize("env_id", RUNNABLE)
def test_make_vec_uses_one_backend_and_steps_every_registered_env(env_id: str) -> None:
    envs = gym.make_vec(env_id, num_envs=2)
    assert isinstance(envs.unwrapped, DiffBotVectorEnv) and envs.unwrapped.robot.spec.num_envs == 2
    obs, _ = envs.reset(seed=0)
    assert obs in envs.observation_space
    zero = {"skill": np.zeros(2, dtype=np.int64), "params": np.zeros((2, 4), dtype=np.float32)}
    obs, reward, terminated, truncated, info = envs.step(zero)
    assert obs in envs.observation_space
    assert reward.shape == terminated.shape == truncated.shape == (2,)
    assert info["clipped"].all() and info["_clipped"].all()  # zero speed is below the drive skill's bound
    for key, value in obs.items():
        assert value.shape[0] == 2 and np.all(np.isfinite(value)), key
    envs.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_matches_sync_vector_env_of_single_envs(mode: AutoresetMode) -> None:
    kwargs = {"config": SHORT, "action_repeat": 3}
    sync = gym.make_vec(
        "agent/DiffBotPrivileged-v0", 3, "sync", vector_kwargs={"autoreset_mode": mode}, **kwargs
    )
    ours = gym.make_vec("agent/DiffBotPrivileged-v0", 3, autoreset_mode=mode, **kwargs)
    a, b = sync.reset(seed=7), ours.reset(seed=7)
    np.testing.assert_array_equal(a[0]["privileged"], b[0]["privileged"])
    ends = 0
    for action in actions(3, 16):
        a, b = sync.step(action), ours.step(action)
        for key in a[0]:
            np.testing.assert_allclose(a[0][key], b[0][key], rtol=1e-6, err_msg=key)
        for x, y in zip(a[1:4], b[1:4], strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6)
        info_a, info_b = a[4], b[4]
        for key in ("outcome", "success", "clipped"):
            mask = info_a.get(f"_{key}", np.zeros(3, dtype=bool))  # Gymnasium drops a key no env has
            np.testing.assert_array_equal(mask, info_b[f"_{key}"], err_msg=key)
            np.testing.assert_array_equal(
                info_a[key][mask] if mask.any() else [], info_b[key][mask], err_msg=key
            )
        if "final_obs" in info_a:
            np.testing.assert_array_equal(info_a["_final_info"], info_b["_final_info"])
            for i in np.flatnonzero(info_a["_final_obs"]):
                np.testing.assert_array_equal(
                    info_a["final_obs"][i]["privileged"], info_b["final_obs"][i]["privileged"]
                )
                for term, value in info_a["final_info"]["reward_terms"].items():
                    assert value[i] == pytest.approx(info_b["final_info"]["reward_terms"][term][i], rel=1e-6)
        ends += int((a[2] | a[3]).sum())
    assert ends >= 3  # the comparison covered autoresets
    sync.close(), ours.close()


def test_disabled_autoreset_holds_ended_envs_until_a_masked_reset() -> None:
    envs = DiffBotVectorEnv(2, config=SHORT, obs_mode="privileged", action_repeat=4,
                            autoreset_mode=AutoresetMode.DISABLED)  # fmt: skip
    envs.reset(seed=[3, 11])
    done = np.zeros(2, dtype=bool)
    for action in actions(2, 10):
        obs, reward, terminated, truncated, _ = envs.step(action)
        reward_after_end = reward[done]
        done |= terminated | truncated
        np.testing.assert_array_equal(reward_after_end, 0.0)  # a held env scores nothing
    assert done.all()
    held = obs["privileged"].copy()
    obs, _ = envs.reset(seed=[None, 42], options={"reset_mask": np.array([False, True])})
    np.testing.assert_array_equal(obs["privileged"][0], held[0])  # env 0 untouched
    single = sim.gym_env.DiffBotEnv(config=SHORT, obs_mode="privileged")
    np.testing.assert_array_equal(obs["privileged"][1], single.reset(seed=42)[0]["privileged"])  # seed 42
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": np.array([1, 0])})
    envs.close(), single.close()
