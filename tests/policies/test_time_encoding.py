"""The time encoding must tell the start of a task from its end (progress 0 vs 1, step 0 vs max_steps)."""

import torch

from policies.time_encoding import TimeConfig, TimeEncoder


def _encoder(seed: int = 0) -> TimeEncoder:
    torch.manual_seed(seed)
    return TimeEncoder(TimeConfig(), dim=16).eval()


def test_start_and_end_give_different_raw_features():
    enc = _encoder()
    progress = enc.features(torch.tensor([0.0, 1.0]), torch.zeros(2))  # (2, 4F)
    step = enc.features(torch.zeros(2), torch.tensor([0.0, enc.max_steps]))  # (2, 4F)
    # The slowest sinusoid turns half a circle over [0, 1]: its cos goes 1 -> -1, a distance of 2.
    # With the old frequencies (2 pi * 2^k) both distances were ~3e-5, float32 rounding only.
    assert torch.linalg.vector_norm(progress[0] - progress[1]) > 1.0
    assert torch.linalg.vector_norm(step[0] - step[1]) > 1.0


def test_start_and_end_give_different_tokens():
    enc = _encoder()
    progress, step = torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.0, 0.0, enc.max_steps])
    with torch.inference_mode():
        tokens = enc(progress, step)  # (3, 1, D)
    assert (tokens[0] - tokens[1]).abs().max() > 1e-3, "progress 0 and 1 share a token"
    assert (tokens[0] - tokens[2]).abs().max() > 1e-3, "step 0 and max_steps share a token"


def test_progress_in_unit_interval_is_encoded_injectively():
    enc = _encoder()
    t = torch.linspace(0, 1, 101)
    feats = enc.features(t, torch.zeros_like(t))[:, : 2 * enc.freqs.numel()]  # progress half: (101, 2F)
    dist = torch.cdist(feats, feats) + torch.eye(len(t)) * 1e9  # (101, 101), self-distance masked
    assert dist.min() > 0.01
