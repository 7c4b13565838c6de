"""Gated cross-attention fusion of modality tokens into one state embedding.

Each modality (image, imu, skill, time) first gets a scalar gate in (0, 1) from its own mean token; the
gates scale that modality's tokens and are returned, so a user can see which modality the encoder trusts
at every step. Learned latent queries then cross-attend over all gated tokens (Perceiver-style), with a
softmax temperature below 1 that sharpens attention on the informative tokens.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, model_validator
from torch import nn

from policies.config import Config

MODALITIES = ("image", "imu", "skill", "time")


class FusionConfig(Config):
    """Cross-attention fusion."""

    dim: int = Field(128, ge=8, le=2048)  # token width
    heads: int = Field(4, ge=1, le=64)  # attention heads
    dropout: float = Field(0.1, ge=0.0, lt=1.0)  # dropout on attention weights and MLP, training only
    temperature: float = Field(0.7, gt=0.0, le=10.0)  # softmax temperature; < 1 sharpens attention
    queries: int = Field(4, ge=1, le=64)  # learned latent queries
    layers: int = Field(1, ge=1, le=8)  # cross-attention blocks

    @model_validator(mode="after")
    def _heads_divide_dim(self) -> FusionConfig:
        if self.dim % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide dim ({self.dim})")
        return self


class CrossAttention(nn.Module):
    """Multi-head cross-attention with a softmax temperature. Shape: (B, Q, D), (B, N, D) -> (B, Q, D)."""

    def __init__(self, dim: int, heads: int, dropout: float, temperature: float) -> None:
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / (math.sqrt(dim // heads) * temperature)
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, query: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        b, nq, d = query.shape
        h = self.heads
        q = self.q(query).view(b, nq, h, d // h).transpose(1, 2)  # (B, h, Q, d/h)
        k, v = self.kv(tokens).view(b, -1, 2, h, d // h).permute(2, 0, 3, 1, 4)  # 2 x (B, h, N, d/h)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)  # (B, h, Q, N)
        x = self.drop(attn) @ v  # (B, h, Q, d/h)
        return self.out(x.transpose(1, 2).reshape(b, nq, d))  # (B, Q, D)


class FusionBlock(nn.Module):
    """Pre-norm cross-attention + MLP, both residual."""

    def __init__(self, cfg: FusionConfig) -> None:
        super().__init__()
        self.norm_q = nn.LayerNorm(cfg.dim)
        self.norm_kv = nn.LayerNorm(cfg.dim)
        self.attn = CrossAttention(cfg.dim, cfg.heads, cfg.dropout, cfg.temperature)
        self.norm_mlp = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.dim, 4 * cfg.dim),
            nn.GELU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(4 * cfg.dim, cfg.dim),
        )

    def forward(self, query: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        query = query + self.attn(self.norm_q(query), self.norm_kv(tokens))
        return query + self.mlp(self.norm_mlp(query))


class GatedFusion(nn.Module):
    """Modality token lists -> (embedding, gates). Shapes: [(B, N_m, D)] * 4 -> (B, E), (B, 4)."""

    def __init__(self, cfg: FusionConfig, embed_dim: int) -> None:
        super().__init__()
        self.type_embed = nn.Parameter(torch.zeros(len(MODALITIES), cfg.dim))
        nn.init.normal_(self.type_embed, std=0.02)
        # Per-modality LayerNorm first: branches differ in scale by orders of magnitude (a ResNet trunk vs
        # one embedding row), and an unnormalised gate would saturate on the loudest one.
        self.norm = nn.ModuleList(nn.LayerNorm(cfg.dim) for _ in MODALITIES)
        self.gate = nn.ModuleList(nn.Linear(cfg.dim, 1) for _ in MODALITIES)
        self.latents = nn.Parameter(torch.randn(1, cfg.queries, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(FusionBlock(cfg) for _ in range(cfg.layers))
        self.head = nn.Sequential(
            nn.LayerNorm(cfg.queries * cfg.dim), nn.Linear(cfg.queries * cfg.dim, embed_dim)
        )

    def forward(self, tokens: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        gated, gates = [], []
        for m, (x, norm, gate) in enumerate(zip(tokens, self.norm, self.gate, strict=True)):
            x = norm(x) + self.type_embed[m]  # (B, N_m, D)
            g = torch.sigmoid(gate(x.mean(dim=1)))  # (B, 1)
            gated.append(x * g.unsqueeze(1))
            gates.append(g)
        kv = torch.cat(gated, dim=1)  # (B, sum N_m, D)
        q = self.latents.expand(kv.shape[0], -1, -1)  # (B, Q, D)
        for block in self.blocks:
            q = block(q, kv)
        return self.head(q.flatten(1)), torch.cat(gates, dim=1)  # (B, E), (B, 4)
