"""The learner's trainable models and its loss on one batch, as one module.

One module because DistributedDataParallel wraps a module and all-reduces the gradients of what its
`forward` computed: the learner's loss reaches the student (encoder, memory, head), the predictor, the
memory's read-out and the novelty ensemble, so all of them are its submodules. In a world of one the
learner calls it directly.
"""

from __future__ import annotations

import torch
from torch import nn

from opd.distill.config import DistillConfig
from opd.distill.novelty import EnsembleNovelty
from policies.distill_losses import categorical_kl, masked_param_loss
from policies.state_predictor import StatePredictor
from policies.student_input import INPUT_NAMES
from policies.student_policy import StudentPolicy


class DistillLoss(nn.Module):
    """batch -> (loss, its parts detached, per-sample skill + parameter loss (B,) for priorities)."""

    def __init__(
        self,
        student: StudentPolicy,
        predictor: StatePredictor,
        novelty: EnsembleNovelty | None,
        memory_readout: nn.Linear | None,
        cfg: DistillConfig,
        history: int,
        encoder_bf16: bool,
    ) -> None:
        """`history`: frames the predictor reads; `encoder_bf16`: the encoder's forward and backward under
        bfloat16 autocast (weights and optimiser stay float32)."""
        super().__init__()
        self.student, self.predictor = student, predictor
        self.novelty, self.memory_readout = novelty, memory_readout
        self.cfg, self.history, self.encoder_bf16 = cfg, history, encoder_bf16

    def forward(
        self, b: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """`b`: a store batch on this module's device (`SampleStore.sample`) plus "weight" (B,), each
        sample's skill-balance weight."""
        cfg = self.cfg
        if cfg.train_encoder:
            device = b["image"].device.type
            with torch.autocast(device, torch.bfloat16, enabled=self.encoder_bf16):
                emb, _ = self.student.encoder(*(b[k] for k in INPUT_NAMES))  # (B, E)
            emb = emb.float()
        else:
            emb = b["embedding"]
        head = self.student.head
        window = torch.cat([b["window"][:, :-1], emb[:, None]], dim=1)  # (B, T, E), newest with gradient
        feats = self.student.head_input(window[:, -self.student.memory_frames :])  # (B, E)
        dist = head(feats)
        w = b["weight"]  # (B,)
        kl_each = categorical_kl(b["teacher_logits"], dist.logits)  # (B,)
        mask = head.slot_mask(b["teacher_skill"])
        p_each = masked_param_loss(head.to_bounds(dist.mean), b["teacher_params"], mask, head.low, head.high)
        kl, p_loss = (kl_each * w).mean(), (p_each * w).mean()
        h0, c0 = self.predictor.initial_state(len(w))
        h0, c0 = h0.to(w.device), c0.to(w.device)
        pred, _, _ = self.predictor(window[:, -self.history :], h0, c0)  # (B, H, Dq)
        fmask = b["future_mask"].float()[..., None]  # (B, H, 1)
        s_loss = ((pred - b["future"]) ** 2 * fmask).sum() / (fmask.sum() * pred.shape[-1]).clamp(min=1)
        loss = cfg.skill_kl * kl + cfg.params * p_loss + cfg.state_pred * s_loss
        parts = {"loss/skill_kl": kl, "loss/params": p_loss, "loss/state_pred": s_loss}
        if self.memory_readout is not None:
            m_mask = fmask[:, 0]  # (B, 1): the next period's teacher state was found
            m_err = (self.memory_readout(feats) - b["future"][:, 0]) ** 2 * m_mask  # (B, Dq)
            m_loss = m_err.sum() / (m_mask.sum() * m_err.shape[-1]).clamp(min=1)
            loss = loss + cfg.memory_state * m_loss
            parts["loss/memory_state"] = m_loss
        if self.novelty is not None:
            n_loss = self.novelty.loss(emb, b["teacher_logits"], b["teacher_skill"], b["teacher_params"])
            loss = loss + cfg.novelty * n_loss
            parts["loss/novelty"] = n_loss
        return loss, {k: v.detach() for k, v in parts.items()}, (kl_each + p_each).detach()
