import pytest
import torch

from policies.predictor_config import PredictorConfig
from policies.state_predictor import StatePredictor


def test_shapes_and_explicit_state():
    cfg = PredictorConfig(in_dim=8, out_dim=5, hidden=16, history=5, horizon=3)
    p = StatePredictor(cfg).eval()
    frames, h0, c0 = p.dummy_inputs(batch=4)
    pred, h1, c1 = p(torch.randn_like(frames), h0, c0)
    assert pred.shape == (4, 3, 5)
    assert h1.shape == c1.shape == (1, 4, 16)


def test_carried_state_equals_one_long_sequence():
    torch.manual_seed(0)
    p = StatePredictor(PredictorConfig(in_dim=4, out_dim=2, hidden=8)).eval()
    seq = torch.randn(2, 10, 4)
    h, c = p.initial_state(2)
    full, hf, cf = p(seq, h, c)
    _, h5, c5 = p(seq[:, :5], h, c)
    split, hs, cs = p(seq[:, 5:], h5, c5)
    torch.testing.assert_close(split, full)
    torch.testing.assert_close(hs, hf)


def test_learns_to_predict_a_delayed_signal():
    # Student frames are a delayed copy of the teacher's state; the predictor must extrapolate forward.
    torch.manual_seed(0)
    cfg = PredictorConfig(in_dim=2, out_dim=2, hidden=32, history=5, horizon=3)
    p = StatePredictor(cfg)
    opt = torch.optim.Adam(p.parameters(), lr=1e-2)
    t = torch.linspace(0, 20, 400)
    phase = torch.rand(64, 1) * 6.28
    signal = torch.stack([torch.sin(t + phase), torch.cos(t + phase)], dim=-1)  # (64, 400, 2)
    losses = []
    for _ in range(150):
        start = torch.randint(0, 390, (1,)).item()
        frames = signal[:, start : start + 5]
        target = signal[:, start + 5 : start + 8]
        pred, _, _ = p(frames, *p.initial_state(64))
        loss = torch.nn.functional.mse_loss(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.1 * sum(losses[:10]) / 10


def test_unresolved_widths_are_refused():
    with pytest.raises(ValueError, match="out_dim is unset"):
        StatePredictor(PredictorConfig(in_dim=4))
    with pytest.raises(ValueError, match="in_dim is unset"):
        StatePredictor(PredictorConfig(out_dim=4))
