"""Losses that pull a student's hybrid action towards a teacher's (used by OPD and offline distillation)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def categorical_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) over skills. Shape: (B, K), (B, K) -> (B,).

    Forward KL: the student is pushed to cover every skill the teacher would use.
    """
    t_logp = F.log_softmax(teacher_logits, dim=-1)
    s_logp = F.log_softmax(student_logits, dim=-1)
    return (t_logp.exp() * (t_logp - s_logp)).sum(-1)


def masked_param_loss(
    student_params: torch.Tensor,
    teacher_params: torch.Tensor,
    slot_mask: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
) -> torch.Tensor:
    """Mean squared error on the teacher's chosen skill's parameters only, in units of half the bound range.

    Normalising by the range makes a metre and a radian per second weigh the same. A skill without
    parameters contributes zero. Shapes: (B, P), (B, P), (B, P) mask, (P,), (P,) -> (B,).
    """
    half_range = (high - low) / 2.0
    err = ((student_params - teacher_params) / half_range) ** 2 * slot_mask
    return err.sum(-1) / slot_mask.sum(-1).clamp(min=1.0)
