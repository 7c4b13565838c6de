"""Memory for the student's head: a GRU over the window of its last frames' embeddings.

One camera frame does not show a marker the robot turned away from, nor an obstacle now beside it: the
student's errors concentrate where the target is out of view (docs/opd_experiments.md). The head
therefore sees the last `frames` embeddings, not just the newest. The window is stateless (the GRU starts
from zero on every window), so acting, training on stored windows and offline replay compute the same
thing from the same frames, with no hidden state to carry, reset or keep in step.

The GRU's summary enters as a correction added to the newest embedding, its projection initialised to
zero: a head with memory starts out as exactly the memoryless head it is built from (fine-tuning a shipped
student keeps its behaviour at step 0 and learns only what the window adds).
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from policies.config import Config


class MemoryConfig(Config):
    """The head's window of frames."""

    frames: int = Field(1, ge=1, le=256)  # embeddings the head sees, newest last; 1 = the newest only
    hidden: int = Field(128, ge=1)  # GRU width


class FrameMemory(nn.Module):
    """frames (B, W, E), oldest first, zero rows before an episode's first frame -> features (B, E)."""

    def __init__(self, embed_dim: int, cfg: MemoryConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.gru = nn.GRU(embed_dim, cfg.hidden, batch_first=True)
        self.proj = nn.Linear(cfg.hidden, embed_dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(frames)  # (B, W, H)
        return frames[:, -1] + self.proj(out[:, -1])  # (B, E)

    def sliding(self, episode: torch.Tensor) -> torch.Tensor:
        """One episode's embeddings (N, E), in order -> `forward` of the window ending at each frame (N, E).

        For offline replay, which knows a whole episode ahead: the windows overlap, so each frame's input
        projection is computed once (where `forward` on N windows repeats it W times), step p of every
        window reads one contiguous slice, and the zero rows before the episode's first frame are stepped
        once for all the windows still in them. Same arithmetic as `forward`, in another order: equal up
        to float rounding.
        """
        w, n, g = self.cfg.frames, len(episode), self.gru
        gi = torch.addmm(g.bias_ih_l0, episode, g.weight_ih_l0.T)  # (N, 3H), gates r, z, n as PyTorch's
        h = episode.new_zeros(n, g.hidden_size)  # (N, H): window t's state
        zero = episode.new_zeros(1, g.hidden_size)  # (1, H): the state after p zero rows, every window's
        for p in range(w):  # step p of every window at once
            s = w - 1 - p  # window t reads frame t - s: the windows before s are still in their zero rows
            if s < n:
                h[s] = zero[0]  # window s reaches the episode's first frame
                h[s:] = self._step(gi[: n - s], h[s:])
            if s > 0:
                zero = self._step(g.bias_ih_l0[None], zero)
        return episode + self.proj(h)  # (N, E)

    def _step(self, gi: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One GRU step from input projections gi (M, 3H) and states h (M, H) -> the next states (M, H)."""
        g = self.gru
        i_r, i_z, i_n = gi.chunk(3, dim=1)
        h_r, h_z, h_n = torch.addmm(g.bias_hh_l0, h, g.weight_hh_l0.T).chunk(3, dim=1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        c = torch.tanh(i_n + r * h_n)
        return c + z * (h - c)  # (1 - z) * c + z * h
