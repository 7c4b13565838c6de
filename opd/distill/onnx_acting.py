"""The acting head and state predictor in ONNX Runtime: what the OPD core decides with, live and in replay.

Why: on the live graph the opd node ran the student's memory head (a GRU over the last 128 embeddings) and
the predictor in eager torch on every frame, 6.3-7.1 ms of CPU on the 2-core host, against 1.1 ms for the
artifact's own ONNX graphs (issue 58). Learning stays in torch; a learnt head reaches acting as a new
artifact version (`opd.live.loading.VersionWriter`, hashes checked when it loads), whose graphs replace
these under the learner's lock (`OnlineDistillation.act_in_onnx`). The graphs run on one intra-op thread
(`policies.runtime.threads`). Batch-1 and batched calls gave bit-identical rows on ONNX Runtime's CPU
provider (tested), so replay's batched precompute reproduces the live decisions.
"""

from __future__ import annotations

import numpy as np

from policies.artifact import Artifact
from policies.runtime import load_model
from policies.runtime.threads import intra_op_threads


class OnnxActing:
    """An artifact's (or a student version's) policy.onnx and predictor.onnx, numpy in and out."""

    def __init__(self, artifact: Artifact) -> None:
        self.artifact = artifact
        self.version = artifact.version or 0  # 0: the deployed artifact itself
        threads = intra_op_threads("onnxruntime")
        self.head = load_model(artifact, "policy", "onnxruntime", threads=threads)
        self.predictor = load_model(artifact, "predictor", "onnxruntime", threads=threads)
        self.frames = artifact.memory_frames
        pc = artifact.predictor_config
        self.lstm_shape = (pc.layers, pc.hidden)

    def head_outputs(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Windows (M, W, E) float32 -> deployed skills (M,) int64 and params (M, P) float64, as
        `OnlineDistillation.head_outputs` gives them from torch."""
        feeds = {"frames": frames} if self.frames > 1 else {"state_embedding": frames[:, -1]}  # (M, E)
        out = self.head.run(feeds)
        return out["action_skill"].astype(np.int64), out["action_params"].astype(np.float64)

    def skill_logits(self, frames: np.ndarray) -> np.ndarray:
        """Windows (M, W, E) float32 -> the head's skill logits (M, K) (parity checks)."""
        feeds = {"frames": frames} if self.frames > 1 else {"state_embedding": frames[:, -1]}
        return self.head.run(feeds)["skill_logits"]

    def predictions(self, windows: np.ndarray) -> np.ndarray:
        """Windows (M, T, E) float32 -> predictions (M, H, Dq), teacher-state std units, from a zero LSTM
        state as the torch predictor starts each window."""
        zeros = np.zeros((self.lstm_shape[0], len(windows), self.lstm_shape[1]), np.float32)  # (L, M, Hd)
        return self.predictor.run({"frames": windows, "h0": zeros, "c0": zeros})["prediction"]
