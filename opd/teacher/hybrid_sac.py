"""Hybrid-action SAC for the teacher (Delalleau et al. 2019; Christodoulou 2019 for the discrete part).

Actor: pi(k|s) over skills and a squashed Gaussian over every skill's parameters (`HybridActionHead`).
Critic: twin Q(s, k, x_k) with target networks; x_k is the chosen skill's parameter slots (normalised to
[-1, 1] by the contract bounds, other slots zero), so one network scores every skill.
Entropy: separate temperatures for the discrete and continuous parts, each tuned to a target entropy.
KL constraint: the continuous parameters are pulled towards a slowly moving (Polyak) anchor copy of the
actor, KL(anchor || actor) weighted by pi(k|s), so that a sharp critic cannot drag them far in one update.

Acting explores with a straight-through Gumbel-softmax skill sample; the actor loss uses the exact
expectation over the K skills instead of a Gumbel sample (K is small, and the expectation has no variance).

Precision: float32 on every device, no autocast. The critics regress a soft Bellman target whose per-step
reward is small beside Q (with gamma 0.97, Q sums ~33 decisions of reward): bfloat16's 8-bit mantissa
rounds Q to ~1/256 of itself, ~13% of one decision's mean reward: coarser than the differences between
the skills' and parameters' values that the actor follows, so the TD errors would drown in rounding.

On N ranks (`distribute`): DistributedDataParallel over the actor, the twin critics and the temperatures,
each rank learning from its own replay; the target critics and the anchor are Polyak copies of weights that
are the same on every rank, so they stay the same without a collective of their own.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from opd.teacher.replay_buffer import Batch
from policies.config import Config
from policies.hybrid_head import HybridDist
from policies.teacher_policy import TeacherPolicy


class SACConfig(Config):
    """Hybrid SAC hyper-parameters."""

    # 0.97 per decision at 5 Hz (action_repeat 4 on the 20 Hz loop) is a ~7 s horizon, about one marker leg;
    # the sim author's SAC probe learned with it where 0.98-0.99 per 20 Hz step did not.
    gamma: float = Field(0.97, gt=0, lt=1)  # discount per decision (one env step of action_repeat periods), 1
    tau: float = Field(0.005, gt=0, le=1)  # Polyak rate of the target critics, per update
    batch_size: int = Field(256, ge=1)  # transitions per update
    lr_actor: float = Field(3e-4, gt=0)  # Adam learning rate of the actor (also behaviour cloning)
    lr_critic: float = Field(3e-4, gt=0)  # Adam learning rate of the twin critics
    lr_alpha: float = Field(1e-3, gt=0)  # Adam learning rate of both log-temperatures
    critic_hidden: list[int] = Field(default_factory=lambda: [256, 256])  # Q-network widths, units
    init_alpha: float = Field(1.0, gt=0)  # initial temperature of both parts, reward units per nat
    skill_entropy_target: float = Field(0.3, ge=0, le=1)  # target skill entropy, fraction of log K
    param_entropy_target: float = Field(-1.0)  # target entropy per parameter slot, nats
    kl_coef: float = Field(1.0, ge=0)  # weight of KL(anchor || actor) on the continuous parameters, 1
    anchor_tau: float = Field(0.01, gt=0, le=1)  # Polyak rate of the anchor actor, per update
    grad_clip: float = Field(10.0, gt=0)  # max gradient norm per network


class QNetwork(nn.Module):
    """(obs (B, F), skill one-hot (B, K), params in [-1, 1] (B, P)) -> Q (B,).

    LayerNorm after every hidden layer: with demonstrations in the batch, it bounds how far Q can
    extrapolate to actions the data never took (RLPD, Ball et al. 2023). ReLU: the critics run on B * K rows
    three times per update, and ELU's exp was 15% of the update on the CPU.
    """

    def __init__(self, obs_dim: int, num_skills: int, num_params: int, hidden: list[int]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = obs_dim + num_skills + num_params
        for h in hidden:
            layers += [nn.Linear(d, h), nn.LayerNorm(h), nn.ReLU()]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, onehot: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, onehot, params], dim=-1)).squeeze(-1)


class TwinQ(nn.Module):
    """The twin critics as one module, because DistributedDataParallel wraps one module per loss.
    (obs (B, F), onehot (B, K), params (B, P)) -> (Q1 (B,), Q2 (B,))."""

    def __init__(self, obs_dim: int, num_skills: int, num_params: int, hidden: list[int]) -> None:
        super().__init__()
        self.q1 = QNetwork(obs_dim, num_skills, num_params, hidden)
        self.q2 = QNetwork(obs_dim, num_skills, num_params, hidden)

    def forward(
        self, obs: torch.Tensor, onehot: torch.Tensor, params: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q1(obs, onehot, params), self.q2(obs, onehot, params)


class Temperatures(nn.Module):
    """log alpha of the skill and of the parameter part; forward: their loss from the entropies' gaps to
    their targets (B,) each, as a module so that DDP averages its gradient over the ranks."""

    def __init__(self, init_alpha: float) -> None:
        super().__init__()
        self.skill = nn.Parameter(torch.tensor(math.log(init_alpha)))
        self.param = nn.Parameter(torch.tensor(math.log(init_alpha)))

    def forward(self, skill_gap: torch.Tensor, param_gap: torch.Tensor) -> torch.Tensor:
        return (self.skill * skill_gap).mean() + (self.param * param_gap).mean()


class HybridSAC:
    """Learner with the house verbs: act, update (-> dict of losses), (load_)state_dict, get_policy."""

    def __init__(
        self,
        actor: TeacherPolicy,
        cfg: SACConfig,
        reward_scale: torch.Tensor,
        device: torch.device | None = None,
    ) -> None:
        """`actor` moves to `device` (default: the CPU), where every network of the learner lives; batches
        and `reward_scale` are moved there as they come."""
        self.cfg = cfg
        self.device = device = device or torch.device("cpu")
        self.actor = actor.to(device)
        head = actor.head
        self.num_skills, self.num_params = head.num_skills, head.num_params
        self.critics = TwinQ(actor.obs_dim, self.num_skills, self.num_params, cfg.critic_hidden).to(device)
        self.q1, self.q2 = self.critics.q1, self.critics.q2
        self.q1_target, self.q2_target = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.anchor = copy.deepcopy(actor).requires_grad_(False)
        self.temperatures = Temperatures(cfg.init_alpha).to(device)
        self.log_alpha_skill, self.log_alpha_param = self.temperatures.skill, self.temperatures.param
        # what computes each loss with gradients: the modules themselves, or their DDP wrappers (`distribute`)
        self._actor: nn.Module = actor
        self._critics: nn.Module = self.critics
        self._temperatures: nn.Module = self.temperatures
        self.opt_actor = torch.optim.Adam(actor.parameters(), lr=cfg.lr_actor)
        self.opt_critic = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=cfg.lr_critic)
        self.opt_alpha = torch.optim.Adam([self.log_alpha_skill, self.log_alpha_param], lr=cfg.lr_alpha)
        self.reward_scale = reward_scale.to(device)  # (T,) per-term multipliers, updated by the trainer
        self.skill_target = cfg.skill_entropy_target * math.log(self.num_skills)
        self.slots_per_skill = head.owner_onehot.sum(0)  # (K,)
        self.updates = 0

    def get_policy(self) -> TeacherPolicy:
        return self.actor

    def distribute(self) -> None:
        """Learn as one rank of a job (a process group is joined: `opd.distributed.process_group`):
        DistributedDataParallel over the actor, the critics and the temperatures broadcasts rank 0's weights
        now and averages every update's gradients; the target critics and the anchor restart from the
        broadcast weights. The observation statistics are the trainer's to keep alike."""
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        # the actor: behaviour cloning leaves its log-std layer out (`bc_update`), the RL steps do not
        # its buffers (observation statistics) are synced at the start only: the trainer keeps them alike
        self._actor = DistributedDataParallel(self.actor, device_ids=ids, find_unused_parameters=True,
                                              forward_sync_buffers=False)  # fmt: skip
        self._critics = DistributedDataParallel(self.critics, device_ids=ids)
        self._temperatures = DistributedDataParallel(self.temperatures, device_ids=ids)
        with torch.no_grad():
            for target, source in (
                (self.q1_target, self.q1),
                (self.q2_target, self.q2),
                (self.anchor, self.actor),
            ):
                _polyak(target, source, 1.0)

    def act(self, features: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Explore (Gumbel-softmax skill, sampled parameters) or act greedily. (N, F) -> (N,), (N, P)."""
        return self.actor.act(features, deterministic=deterministic)

    def _scaled_params(self, params: torch.Tensor) -> torch.Tensor:
        head = self.actor.head
        return 2.0 * (params - head.low) / (head.high - head.low) - 1.0

    def _q_all(
        self, nets: tuple[QNetwork, QNetwork], obs: torch.Tensor, params: torch.Tensor
    ) -> torch.Tensor:
        """min over the twin nets of Q(s, k, x_k) for every skill k. Shapes: (B, F), (B, P) -> (B, K)."""
        b, k = obs.shape[0], self.num_skills
        eye = torch.eye(k, device=obs.device)
        onehot = eye.repeat(b, 1)  # (B*K, K), row b*K + j is skill j
        masks = eye @ self.actor.head.owner_onehot.T  # (K, P) slots of each skill
        x = (self._scaled_params(params).unsqueeze(1) * masks).reshape(b * k, -1)  # (B*K, P)
        o = obs.repeat_interleave(k, dim=0)  # (B*K, F)
        q = torch.minimum(nets[0](o, onehot, x), nets[1](o, onehot, x))
        return q.view(b, k)

    def _value_terms(self, dist: HybridDist, slots_logp: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """pi (B, K), log pi (B, K), per-skill parameter log-density (B, K)."""
        logpi = F.log_softmax(dist.logits, dim=-1)
        return logpi.exp(), logpi, self.actor.head.per_skill(slots_logp)

    def update(self, batch: Batch, actor: bool = True) -> dict[str, float]:
        """One gradient step of the critics and, unless `actor` is False, of the actor and temperatures.

        Critic-only steps let the critics learn the value of a cloned actor before it is allowed to move:
        a freshly initialised critic would otherwise drag it off the demonstrations in the first updates.
        Returns the losses.
        """
        batch = batch.to(self.device)
        obs = self.actor.norm(batch.obs)
        losses = self._critic_step(batch, obs)
        if actor:
            losses.update(self._actor_step(batch.obs, obs))
        with torch.no_grad():
            _polyak(self.q1_target, self.q1, self.cfg.tau)
            _polyak(self.q2_target, self.q2, self.cfg.tau)
            _polyak(self.anchor, self.actor, self.cfg.anchor_tau)
        self.updates += 1
        return losses

    def _critic_step(self, batch: Batch, obs: torch.Tensor) -> dict[str, float]:
        """Soft Bellman regression of both critics on normalised obs (B, F)."""
        head = self.actor.head
        alpha_s, alpha_p = self.log_alpha_skill.exp().detach(), self.log_alpha_param.exp().detach()
        next_obs = self.actor.norm(batch.next_obs)
        reward = batch.terms @ self.reward_scale
        with torch.no_grad():
            dist_n = head(self.actor.trunk(next_obs))
            sample_n = head.sample(dist_n)
            pi_n, logpi_n, lp_n = self._value_terms(dist_n, sample_n.logp_slots)
            q_n = self._q_all((self.q1_target, self.q2_target), next_obs, sample_n.params)
            v_n = (pi_n * (q_n - alpha_s * logpi_n - alpha_p * lp_n)).sum(-1)
            target = reward + self.cfg.gamma * (1.0 - batch.terminated) * v_n
        onehot = F.one_hot(batch.skill, self.num_skills).float()
        x = self._scaled_params(head.mask_params(batch.skill, batch.params)) * head.slot_mask(batch.skill)
        q1, q2 = self._critics(obs, onehot, x)
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self._step(self.opt_critic, critic_loss, [*self.q1.parameters(), *self.q2.parameters()])
        return {"loss/critic": critic_loss.item(), "q/mean": q1.mean().item()}

    def _actor_step(self, raw_obs: torch.Tensor, obs: torch.Tensor) -> dict[str, float]:
        """Actor (exact expectation over skills) and temperature step on the batch's obs (B, F), raw and
        normalised (the actor normalises its own input)."""
        head = self.actor.head
        alpha_s, alpha_p = self.log_alpha_skill.exp().detach(), self.log_alpha_param.exp().detach()
        dist = self._actor(raw_obs)
        sample = head.sample(dist)
        pi, logpi, lp = self._value_terms(dist, sample.logp_slots)
        self._critics_require_grad(False)  # the actor loss needs input gradients only: a third less work
        q = self._q_all((self.q1, self.q2), obs, sample.params)
        self._critics_require_grad(True)
        with torch.no_grad():
            anchor = self.anchor.head(self.anchor.trunk(obs))
        kl = head.per_skill(_gauss_kl(anchor.mean, anchor.log_std, dist.mean, dist.log_std))  # (B, K)
        actor_loss = (pi * (alpha_s * logpi + alpha_p * lp - q + self.cfg.kl_coef * kl)).sum(-1).mean()
        self._step(self.opt_actor, actor_loss, list(self.actor.parameters()))

        skill_entropy = -(pi * logpi).sum(-1).detach()
        param_entropy = -(pi * lp).sum(-1).detach()
        param_target = self.cfg.param_entropy_target * (pi.detach() * self.slots_per_skill).sum(-1)
        alpha_loss = self._temperatures(skill_entropy - self.skill_target, param_entropy - param_target)
        self.opt_alpha.zero_grad()
        alpha_loss.backward()
        self.opt_alpha.step()
        return {
            "loss/actor": actor_loss.item(),
            "loss/alpha": alpha_loss.item(),
            "entropy/skill": skill_entropy.mean().item(),
            "entropy/params": param_entropy.mean().item(),
            "alpha/skill": alpha_s.item(),
            "alpha/params": alpha_p.item(),
            "kl/anchor": (pi * kl).sum(-1).mean().item(),
        }

    def bc_update(self, batch: Batch) -> dict[str, float]:
        """One behaviour-cloning step of the actor on demonstrations; returns the losses.

        Loss: cross-entropy of the demonstrated skill plus the squared error of the chosen skill's mean
        parameters, both sides scaled to [-1, 1] by the contract bounds. The mean, not the likelihood: a
        demonstration on a bound (full speed) has an infinite pre-squash value and would swamp a likelihood.
        The standard deviations are left to the temperature of the RL phase. The anchor follows the actor
        exactly, so the KL constraint of the RL phase holds the parameters near the cloned ones.
        """
        head = self.actor.head
        batch = batch.to(self.device)
        # The loss leaves the log-std layer out, though the actor's output holds it: without gradients to
        # accumulate, DDP (find_unused_parameters) skips it instead of waiting for its gradient.
        head.log_std.requires_grad_(False)
        dist = self._actor(batch.obs)
        skill_loss = F.cross_entropy(dist.logits, batch.skill)
        err = self._scaled_params(head.to_bounds(dist.mean)) - self._scaled_params(batch.params)  # (B, P)
        param_loss = (err**2 * head.slot_mask(batch.skill)).sum(-1).mean()
        self._step(self.opt_actor, skill_loss + param_loss, list(self.actor.parameters()))
        head.log_std.requires_grad_(True)
        with torch.no_grad():
            _polyak(self.anchor, self.actor, 1.0)
        accuracy = (dist.logits.argmax(-1) == batch.skill).float().mean()
        return {"bc/skill_loss": skill_loss.item(), "bc/param_loss": param_loss.item(),
                "bc/skill_accuracy": accuracy.item()}  # fmt: skip

    def _critics_require_grad(self, flag: bool) -> None:
        for p in (*self.q1.parameters(), *self.q2.parameters()):
            p.requires_grad_(flag)

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor, params: list[torch.Tensor]) -> None:
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
        opt.step()

    def state_dict(self) -> dict:
        """Tensors and plain types only: loads with torch.load(weights_only=True)."""
        return {
            "actor": self.actor.state_dict(),
            "anchor": self.anchor.state_dict(),
            "q1": self.q1.state_dict(), "q2": self.q2.state_dict(),
            "q1_target": self.q1_target.state_dict(), "q2_target": self.q2_target.state_dict(),
            "log_alpha_skill": self.log_alpha_skill.detach().clone(),
            "log_alpha_param": self.log_alpha_param.detach().clone(),
            "opt_actor": self.opt_actor.state_dict(), "opt_critic": self.opt_critic.state_dict(),
            "opt_alpha": self.opt_alpha.state_dict(),
            "updates": self.updates,
        }  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        for name in ("actor", "anchor", "q1", "q2", "q1_target", "q2_target"):
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha_skill.copy_(state["log_alpha_skill"])
            self.log_alpha_param.copy_(state["log_alpha_param"])
        for name in ("opt_actor", "opt_critic", "opt_alpha"):
            getattr(self, name).load_state_dict(state[name])
        self.updates = int(state["updates"])


def _gauss_kl(
    mu_p: torch.Tensor, log_std_p: torch.Tensor, mu_q: torch.Tensor, log_std_q: torch.Tensor
) -> torch.Tensor:
    """KL(N_p || N_q) per slot, in pre-squash space (the tanh map is shared, so it cancels). Shape: (B, P)."""
    var_p, var_q = (2 * log_std_p).exp(), (2 * log_std_q).exp()
    return log_std_q - log_std_p + (var_p + (mu_p - mu_q) ** 2) / (2 * var_q) - 0.5


def _polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    for t, s in zip(target.parameters(), source.parameters(), strict=True):
        t.mul_(1 - tau).add_(s, alpha=tau)
    for t, s in zip(target.buffers(), source.buffers(), strict=True):
        t.copy_(s)
