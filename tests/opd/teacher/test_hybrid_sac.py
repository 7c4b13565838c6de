"""Hybrid SAC learns a contextual bandit whose best action needs both the right skill and the right
parameter, and its state round-trips through torch.load(weights_only=True)."""

import numpy as np
import pytest
import torch

from opd.teacher.hybrid_sac import HybridSAC, SACConfig
from opd.teacher.replay_buffer import ReplayBuffer
from policies.hybrid_head import HeadConfig
from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy

CONTRACT = SkillContract.from_dict({
    "robot": "bandit", "safe_skill": "idle",
    "skills": [
        {"name": "aim", "params": [{"name": "x", "unit": "1", "low": -1.0, "high": 1.0, "default": 0.0}]},
        {"name": "idle", "params": [{"name": "y", "unit": "1", "low": -1.0, "high": 1.0, "default": 0.0}]},
    ],
})  # fmt: skip


def _reward(ctx: np.ndarray, skill: np.ndarray, params: np.ndarray) -> np.ndarray:
    """aim at the context for up to 1.0; idling pays 0.3 whatever y is."""
    aim = 1.0 - 4.0 * (params[:, 0] - ctx[:, 0]) ** 2
    return np.where(skill == 0, aim, 0.3)


def _learner(seed: int = 0) -> HybridSAC:
    torch.manual_seed(seed)
    actor = TeacherPolicy(1, CONTRACT, TeacherConfig(hidden=[64, 64], head=HeadConfig(hidden=[])))
    cfg = SACConfig(
        batch_size=128,
        critic_hidden=[64, 64],
        lr_actor=1e-3,
        lr_critic=1e-3,
        gamma=0.5,
        init_alpha=1.0,
        lr_alpha=3e-3,
    )
    return HybridSAC(actor, cfg, reward_scale=torch.ones(1))


def _greedy_return(sac: HybridSAC, rng: np.random.Generator) -> float:
    ctx = rng.uniform(-0.8, 0.8, size=(512, 1)).astype(np.float32)
    skill, params = sac.act(ctx, deterministic=True)
    return float(_reward(ctx, skill, params).mean())


def test_learns_skill_choice_and_parameter():
    rng = np.random.default_rng(0)
    sac = _learner()
    buf = ReplayBuffer(20_000, obs_dim=1, num_params=2, num_terms=1)
    before = _greedy_return(sac, np.random.default_rng(1))
    for _ in range(60):
        ctx = rng.uniform(-0.8, 0.8, size=(64, 1)).astype(np.float32)
        sac.actor.norm.update(torch.from_numpy(ctx))
        skill, params = sac.act(ctx)
        r = _reward(ctx, skill, params)[:, None].astype(np.float32)
        buf.add(ctx, skill, params, r, ctx, np.ones(64, np.float32))  # one-step episodes
        for _ in range(20):
            losses = sac.update(buf.sample(128, rng))
    after = _greedy_return(sac, np.random.default_rng(1))
    assert all(np.isfinite(v) for v in losses.values())
    assert after > 0.85 and after > before + 0.2, (before, after)


def test_state_round_trips_with_weights_only(tmp_path):
    sac = _learner(1)
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(1000, 1, 2, 1)
    ctx = rng.uniform(-1, 1, size=(256, 1)).astype(np.float32)
    skill, params = sac.act(ctx)
    buf.add(ctx, skill, params, np.ones((256, 1), np.float32), ctx, np.ones(256, np.float32))
    sac.update(buf.sample(64, rng))
    torch.save(sac.state_dict(), tmp_path / "ckpt.pt")
    other = _learner(2)
    other.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=True))
    for a, b in zip(sac.actor.parameters(), other.actor.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert other.updates == 1
    buf.save(tmp_path / "replay.npz")
    fresh = ReplayBuffer(1000, 1, 2, 1)
    fresh.load(tmp_path / "replay.npz")
    assert len(fresh) == 256
    np.testing.assert_array_equal(fresh.params[:256], buf.params[:256])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the CPU path: every test above)")
def test_on_a_gpu_it_learns_as_on_the_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The same updates on cuda and on the cpu (float32 both; the parameters' noise a function of each row,
    as the generators differ), and a GPU learner's checkpoint loads on the CPU."""
    monkeypatch.setattr(torch, "randn_like", lambda x, **_: torch.sin(1000.0 * x.detach()))
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(1000, 1, 2, 1)
    ctx = rng.uniform(-1, 1, size=(256, 1)).astype(np.float32)
    terms = rng.standard_normal((256, 1), np.float32)
    buf.add(ctx, rng.integers(0, 2, 256), rng.uniform(-1, 1, (256, 2)), terms, ctx, np.zeros(256, np.float32))
    batches = [buf.sample(64, rng) for _ in range(3)]
    learners = []
    for device in ("cpu", "cuda"):
        sac = _learner(3)
        sac = HybridSAC(sac.actor, sac.cfg, torch.ones(1), torch.device(device))
        sac.bc_update(batches[0])
        for batch in batches:
            sac.update(batch)
        learners.append(sac)
    cpu, gpu = (s.state_dict() for s in learners)
    for net in ("actor", "q1", "q2", "q1_target", "anchor"):
        for key, value in cpu[net].items():
            torch.testing.assert_close(gpu[net][key].cpu(), value, rtol=1e-4, atol=1e-4, msg=f"{net}.{key}")
    torch.save(gpu, tmp_path / "gpu.pt")
    _learner(4).load_state_dict(torch.load(tmp_path / "gpu.pt", map_location="cpu", weights_only=True))
