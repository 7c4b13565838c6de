"""Ensemble disagreement as a novelty score: the ThriftyDAgger-style baseline gate (Hoque et al. 2021).

M small hybrid heads read the (detached) state embedding and are fitted to the teacher's labels like the
student; where they disagree, the state is unlike the training data. The score is the RMS spread of the
members' skill probabilities and range-normalised parameters, so both parts of the action count.
"""

from __future__ import annotations

import torch
from torch import nn

from opd.distill.config import NoveltyConfig
from policies.distill_losses import categorical_kl, masked_param_loss
from policies.hybrid_head import HeadConfig, HybridActionHead
from policies.skill_contract import SkillContract


class EnsembleNovelty(nn.Module):
    """embedding (B, E) -> disagreement (B,) >= 0; trained on teacher labels with `loss`."""

    def __init__(self, embed_dim: int, contract: SkillContract, cfg: NoveltyConfig) -> None:
        super().__init__()
        head_cfg = HeadConfig(hidden=cfg.hidden)
        self.heads = nn.ModuleList(
            HybridActionHead(embed_dim, contract, head_cfg) for _ in range(cfg.members)
        )

    def disagreement(self, embedding: torch.Tensor) -> torch.Tensor:
        """RMS over skills and slots of the members' standard deviation. Shape: (B, E) -> (B,)."""
        dists = [h(embedding) for h in self.heads]
        probs = torch.stack([d.logits.softmax(-1) for d in dists])  # (M, B, K)
        params = torch.stack([torch.tanh(d.mean) for d in dists])  # (M, B, P) in [-1, 1]
        spread = torch.cat([probs.std(0), params.std(0)], dim=-1)  # (B, K + P)
        return spread.pow(2).mean(-1).sqrt()

    def loss(
        self,
        embedding: torch.Tensor,
        teacher_logits: torch.Tensor,
        teacher_skill: torch.Tensor,
        teacher_params: torch.Tensor,
    ) -> torch.Tensor:
        """Mean over members of the distillation loss (skill KL + masked parameters); embedding detached."""
        total = embedding.new_zeros(())
        for head in self.heads:
            dist = head(embedding.detach())
            mask = head.slot_mask(teacher_skill)
            params = head.to_bounds(dist.mean)
            total = total + categorical_kl(teacher_logits, dist.logits).mean()
            total = total + masked_param_loss(params, teacher_params, mask, head.low, head.high).mean()
        return total / len(self.heads)
