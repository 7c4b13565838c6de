"""LSTM state predictor: from the student's last frames, predict what the teacher sees now and next.

The student's observations arrive ~120 ms late and noisy; the predictor maps the last `history` frames of
student-side features to the teacher-side (privileged, undelayed) state for horizons 1..`horizon`. Its
error against the teacher's actual state drives the OPD gate. The LSTM state is an explicit input and
output of the exported graph so that a runtime can step it one frame at a time.
"""

from __future__ import annotations

import torch
from torch import nn

from policies.predictor_config import PredictorConfig


class StatePredictor(nn.Module):
    """frames (B, T, F_in), (h, c) each (L, B, H) -> predictions (B, horizon, F_out), (h, c)."""

    input_names = ("frames", "h0", "c0")
    output_names = ("prediction", "h1", "c1")

    def __init__(self, cfg: PredictorConfig) -> None:
        super().__init__()
        if cfg.in_dim is None:
            raise ValueError("predictor.in_dim is unset: resolve it to the encoder's embed_dim first")
        if cfg.out_dim is None:
            raise ValueError(
                "predictor.out_dim is unset: resolve it to the robot's privileged state width first"
            )
        self.cfg = cfg
        self.lstm = nn.LSTM(cfg.in_dim, cfg.hidden, num_layers=cfg.layers, batch_first=True)
        self.head = nn.Linear(cfg.hidden, cfg.horizon * cfg.out_dim)

    def forward(
        self, frames: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, (h1, c1) = self.lstm(frames, (h0, c0))  # out: (B, T, H)
        pred = self.head(out[:, -1])  # (B, horizon * F_out)
        return pred.view(-1, self.cfg.horizon, self.cfg.out_dim), h1, c1

    def initial_state(self, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero LSTM state. Shape: 2 x (L, B, H)."""
        z = torch.zeros(self.cfg.layers, batch, self.cfg.hidden)
        return z, z.clone()

    def dummy_inputs(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(batch, self.cfg.history, self.cfg.in_dim), *self.initial_state(batch))

    def io_spec(self) -> dict[str, list[dict]]:
        c, b = self.cfg, "batch"
        return {
            "inputs": [
                {"name": "frames", "shape": [b, c.history, c.in_dim], "dtype": "float32",
                 "description": "last student feature frames, oldest first"},
                {"name": "h0", "shape": [c.layers, b, c.hidden], "dtype": "float32", "description": "LSTM h"},
                {"name": "c0", "shape": [c.layers, b, c.hidden], "dtype": "float32", "description": "LSTM c"},
            ],
            "outputs": [
                {"name": "prediction", "shape": [b, c.horizon, c.out_dim], "dtype": "float32",
                 "description": "predicted teacher-side state at t+1..t+horizon"},
                {"name": "h1", "shape": [c.layers, b, c.hidden], "dtype": "float32", "description": "LSTM h"},
                {"name": "c1", "shape": [c.layers, b, c.hidden], "dtype": "float32", "description": "LSTM c"},
            ],
        }  # fmt: skip
