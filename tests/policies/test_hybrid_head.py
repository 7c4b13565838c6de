import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.config import ConfigError
from policies.hybrid_head import HeadConfig, HybridActionHead, HybridDist


@pytest.fixture
def head(contract) -> HybridActionHead:
    torch.manual_seed(0)
    return HybridActionHead(8, contract, HeadConfig(hidden=[16]))


@settings(deadline=None, max_examples=60)
@given(u=st.lists(st.floats(-1e30, 1e30, allow_nan=False), min_size=3, max_size=3))
def test_bounds_mapping_stays_inside_bounds_for_extreme_inputs(contract, u):
    head = HybridActionHead(8, contract, HeadConfig(hidden=[16]))
    params = head.to_bounds(torch.tensor([u], dtype=torch.float32))
    assert torch.all(params >= head.low) and torch.all(params <= head.high)
    # The contract's formula, verbatim.
    expected = head.low + (head.high - head.low) * (torch.tanh(torch.tensor(u, dtype=torch.float32)) + 1) / 2
    torch.testing.assert_close(params[0], expected)


@settings(deadline=None, max_examples=40)
@given(scale=st.floats(1.0, 1e6), sign=st.sampled_from([-1.0, 1.0]))
def test_deterministic_action_respects_bounds_and_masks_for_extreme_logits(contract, scale, sign):
    head = HybridActionHead(8, contract, HeadConfig(hidden=[16]))
    logits = torch.tensor([[sign * scale, 0.0, -sign * scale]])
    mean = torch.full((1, contract.num_params), sign * scale)
    skill, params = head.deterministic(HybridDist(logits, mean, torch.zeros_like(mean)))
    assert skill.item() == (0 if sign > 0 else 2)
    assert torch.all(params >= head.low) and torch.all(params <= head.high)
    other = head.slot_mask(skill)[0] == 0
    torch.testing.assert_close(params[0][other], head.defaults[other])


def test_log_density_integrates_to_one(contract, head):
    # Integrate exp(log p) over a slot's bounds: a wrong tanh or affine correction breaks this.
    mean = torch.tensor([[0.3, -0.7, 1.1]])
    log_std = torch.tensor([[-0.5, 0.2, -1.0]])
    dist = HybridDist(torch.zeros(1, 3), mean, log_std)
    for slot in range(contract.num_params):
        lo, hi = head.low[slot].item(), head.high[slot].item()
        xs = torch.linspace(lo, hi, 20001)[1:-1]
        params = head.defaults.repeat(len(xs), 1)
        params[:, slot] = xs
        u = head.from_bounds(params)
        d = HybridDist(dist.logits.expand(len(xs), -1), mean.expand(len(xs), -1), log_std.expand(len(xs), -1))
        density = head._slot_log_prob(d, u)[:, slot].double().exp()
        integral = torch.trapezoid(density, xs.double()).item()
        assert integral == pytest.approx(1.0, abs=2e-3), f"slot {slot}"


def test_sample_log_prob_matches_log_prob_of_the_same_action(head):
    torch.manual_seed(1)
    dist = head(torch.randn(64, 8))
    s = head.sample(dist)
    assert torch.all(s.skill_onehot.sum(-1) == 1)
    lp_skill, lp_params = head.log_prob(dist, s.skill, s.params)
    torch.testing.assert_close(lp_skill, s.logp_skill)
    expected = (s.logp_slots * head.slot_mask(s.skill)).sum(-1)
    torch.testing.assert_close(lp_params, expected, rtol=1e-3, atol=1e-3)


def test_gumbel_sample_is_differentiable_through_both_parts(head):
    dist = head(torch.randn(4, 8))
    s = head.sample(dist)
    (s.skill_onehot[:, 0].sum() + s.params.sum() + s.logp_skill.sum()).backward()
    assert head.logits.weight.grad is not None and head.logits.weight.grad.abs().sum() > 0
    assert head.mean.weight.grad is not None and head.mean.weight.grad.abs().sum() > 0


def test_per_skill_sums_slots_of_each_skill(head, contract):
    values = torch.arange(contract.num_params, dtype=torch.float32)[None]
    per = head.per_skill(values)[0]
    assert per.tolist() == [0.0 + 1.0, 2.0, 0.0]  # drive: slots 0+1, turn: slot 2, stop: none


def test_entropy_is_log_k_for_uniform_logits(head):
    dist = HybridDist(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3))
    torch.testing.assert_close(head.entropy_skill(dist), torch.full((2,), math.log(3)))


def test_head_config_rejects_inverted_std_range():
    with pytest.raises(ConfigError, match="log_std_min"):
        HeadConfig.from_dict({"log_std_min": 2.0, "log_std_max": 1.0})


def test_unmasked_slots_follow_the_network(head):
    dist = head(torch.randn(5, 8))
    skill, params = head.deterministic(dist)
    mapped = head.to_bounds(dist.mean)
    mask = head.slot_mask(skill).bool()
    np.testing.assert_allclose(params[mask].detach().numpy(), mapped[mask].detach().numpy())
