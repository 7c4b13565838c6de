"""The head's memory: the window of embeddings, the GRU that reads it, and its export."""

import numpy as np
import pytest
import torch

from policies.embedding_window import EmbeddingWindow
from policies.export import export_artifact
from policies.predictor_config import PredictorConfig
from policies.runtime import load_student
from policies.student_policy import StudentConfig, StudentPolicy

W = 4  # frames the tests' heads see


@pytest.fixture(scope="module")
def memory_cfg(tiny_cfg) -> StudentConfig:
    memory = tiny_cfg.memory.model_copy(update={"frames": W, "hidden": 8})
    return tiny_cfg.model_copy(update={"memory": memory})


def learnt(policy: StudentPolicy) -> StudentPolicy:
    """The memory's projection moved off zero, as training moves it."""
    with torch.no_grad():
        for p in policy.memory.proj.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return policy.eval()


def test_the_window_holds_the_last_frames_oldest_first_per_stream():
    win = EmbeddingWindow(streams=2, length=3, dim=2)
    first = win.push(np.array([1]), np.array([[1.0, 1.0]]))
    np.testing.assert_array_equal(first[0], [[0, 0], [0, 0], [1, 1]])  # zero rows before the first frame
    for k in (2.0, 3.0, 4.0):
        out = win.push(np.array([0, 1]), np.full((2, 2), k))
    np.testing.assert_array_equal(out[1], [[2, 2], [3, 3], [4, 4]])  # the oldest frame fell out
    np.testing.assert_array_equal(out[0], [[2, 2], [3, 3], [4, 4]])
    win.reset(np.array([1]))  # a new episode for stream 1 only
    np.testing.assert_array_equal(win.frames[1], 0.0)
    np.testing.assert_array_equal(win.frames[0, -1], [4, 4])
    out[0, -1] = 99.0  # the returned windows are the caller's
    assert win.frames[0, -1, 0] == 4.0
    with pytest.raises(ValueError, match="repeat"):
        win.push(np.array([0, 0]), np.zeros((2, 2)))


def test_a_new_memory_acts_exactly_as_the_head_without_it(tiny_cfg, memory_cfg, contract):
    """Zero projection: the student given memory starts out as the student it was built from."""
    torch.manual_seed(0)
    plain = StudentPolicy(tiny_cfg, contract).eval()
    with_memory = StudentPolicy(memory_cfg, contract).eval()
    missing, unexpected = with_memory.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all(k.startswith("memory.") for k in missing)
    frames = torch.randn(5, W, tiny_cfg.encoder.embed_dim)
    with torch.no_grad():
        want, got = plain.head(frames[:, -1]), with_memory.act_dist(frames)
    torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=0)
    torch.testing.assert_close(got.mean, want.mean, rtol=0, atol=0)


def test_a_learnt_memory_reads_older_frames_and_a_plain_head_does_not(tiny_cfg, memory_cfg, contract):
    torch.manual_seed(1)
    frames = torch.randn(3, W, tiny_cfg.encoder.embed_dim)
    older = frames.clone()
    older[:, 0] += 1.0  # only the oldest frame differs
    with_memory = learnt(StudentPolicy(memory_cfg, contract))
    plain = StudentPolicy(tiny_cfg, contract).eval()
    with torch.no_grad():
        assert not torch.allclose(with_memory.act_dist(frames).logits, with_memory.act_dist(older).logits)
        torch.testing.assert_close(plain.act_dist(frames).logits, plain.act_dist(older).logits)


def test_the_exported_memory_head_matches_torch_and_refuses_single_embeddings(
    tmp_path, tiny_cfg, memory_cfg, contract
):
    torch.manual_seed(2)
    policy = learnt(StudentPolicy(memory_cfg, contract))
    torch.save(policy.state_dict(), tmp_path / "student.pt")
    pred = PredictorConfig(in_dim=tiny_cfg.encoder.embed_dim, hidden=16)
    art = export_artifact(tmp_path / "art", student_cfg=memory_cfg, contract=contract, predictor_cfg=pred,
                          student_weights=tmp_path / "student.pt",
                          privileged_fields=tuple(f"s{i}" for i in range(6)))  # fmt: skip
    rt = load_student(art, "onnxruntime")
    assert rt.memory == W
    spec = rt.artifact.model("policy")["inputs"]
    assert [(i["name"], i["shape"]) for i in spec] == [("frames", ["batch", W, tiny_cfg.encoder.embed_dim])]
    frames = np.random.default_rng(3).normal(size=(6, W, rt.embed_dim)).astype(np.float32)
    logits, skill, params = rt.act_window(frames)
    with torch.no_grad():
        dist = policy.act_dist(torch.from_numpy(frames))
        want_skill, want_params = policy.head.deterministic(dist)
    np.testing.assert_allclose(logits, dist.logits.numpy(), atol=1e-4)
    np.testing.assert_array_equal(skill, want_skill.numpy())
    np.testing.assert_allclose(params, want_params.numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="act_window"):
        rt.act(frames[0, -1])
    with pytest.raises(ValueError, match=f"expected shape \\(B, {W}, "):
        rt.act_window(frames[:, 1:])
    frames[2, 0, 5] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        rt.act_window(frames)


@pytest.mark.parametrize("frames", [1, 3, W, 11])  # shorter than, as long as and longer than the window
def test_an_episodes_windows_together_equal_each_window_alone(memory_cfg, contract, frames):
    """`sliding` (offline replay's path: each frame's input projection once) gives every window's
    `forward`, the zero rows before the episode's first frame included."""
    torch.manual_seed(1)
    memory = learnt(StudentPolicy(memory_cfg, contract)).memory
    episode = torch.randn(frames, memory_cfg.encoder.embed_dim)
    padded = torch.cat([torch.zeros(W - 1, episode.shape[1]), episode])
    windows = padded.unfold(0, W, 1).transpose(1, 2)  # (N, W, E): window t ends at frame t
    with torch.no_grad():
        together, alone = memory.sliding(episode), memory(windows)
    assert together.shape == (frames, memory_cfg.encoder.embed_dim)
    assert not torch.equal(alone, episode)  # the memory's correction is there to get right
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
