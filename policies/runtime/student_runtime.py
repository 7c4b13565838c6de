"""The deployed student: validated inputs -> encoder graph -> head graph, on any backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from policies.artifact import Artifact
from policies.preprocessing import check_batch, check_image, check_imu, check_scalar, check_skill
from policies.runtime.base import ModelRunner
from policies.runtime.loading import load_model
from policies.skill_contract import SkillContract

MAX_STEP = 1e9  # step indices beyond this are a bug upstream, not a long episode


class StudentRuntime:
    """Encoder and head of one artifact on one backend. Single samples in, single samples out."""

    def __init__(
        self,
        artifact: Artifact | str | Path,
        backend: str = "onnxruntime",
        precision: str | None = None,
        threads: int | None = None,
        cache_dir: Path | None = None,
        device: str = "auto",
    ) -> None:
        self.artifact = artifact if isinstance(artifact, Artifact) else Artifact.load(artifact)
        self.contract: SkillContract = self.artifact.contract
        self.backend = backend
        self.encoder: ModelRunner = load_model(
            self.artifact, "encoder", backend, precision, threads, cache_dir, device
        )
        # The head is a few small matrix products: INT8 would cost accuracy for no speed.
        head_precision = "fp32" if precision == "int8" else precision
        self.policy: ModelRunner = load_model(
            self.artifact, "policy", backend, head_precision, threads, cache_dir, device
        )
        self.image_hw = self.artifact.image_hw
        self.imu_window = self.artifact.imu_window
        self.imu_rate_hz = self.artifact.imu_rate_hz  # the rate the model was trained at
        self.embed_dim = self.artifact.embed_dim
        self.memory = self.artifact.memory_frames  # embeddings the head acts on

    @property
    def precision(self) -> str:
        return self.encoder.precision

    def encode(
        self, image: np.ndarray, imu: np.ndarray, skill: int | np.ndarray, progress: float | np.ndarray,
        step: float | np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Observations -> (embedding (E,), gates (4,)); with a leading batch axis in, (B, E), (B, 4) out.

        Raises ValueError naming the input for wrong shapes or dtypes, NaN/Inf, unknown skill ids or
        progress outside [0, 1].
        """
        single = np.ndim(image) == 3
        feeds = {
            "image": check_image(image, *self.image_hw),
            "imu": check_imu(imu, self.imu_window),
            "skill": check_skill(skill, self.contract.num_skills),
            "progress": check_scalar("progress", progress, 0.0, 1.0),
            "step": check_scalar("step", step, 0.0, MAX_STEP),
        }
        check_batch(**feeds)
        out = self.encoder.run(feeds)
        emb, gates = out["state_embedding"], out["gates"]
        return (emb[0], gates[0]) if single else (emb, gates)

    def act(self, embedding: np.ndarray) -> tuple[np.ndarray, int | np.ndarray, np.ndarray]:
        """Embedding (E,) -> (skill_logits (K,), skill id, params (P,) in contract bounds); batched too.

        For a head without memory; a head with memory acts on windows (`act_window`)."""
        if self.memory > 1:
            raise ValueError(f"this student's head acts on the last {self.memory} embeddings: use act_window")
        emb = np.asarray(embedding, dtype=np.float32)
        single = emb.ndim == 1
        emb = emb[None] if single else emb
        if emb.ndim != 2 or emb.shape[1] != self.embed_dim:
            raise ValueError(
                f"embedding: expected shape ({self.embed_dim},) or (B, {self.embed_dim}), got {emb.shape}"
            )
        logits, skill, params = self.act_window(emb[:, None])
        return (logits[0], int(skill[0]), params[0]) if single else (logits, skill, params)

    def act_window(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Windows of the last `memory` embeddings (B, W, E), oldest first, zero rows before an episode's
        first frame (`policies.embedding_window.EmbeddingWindow`) -> skill_logits (B, K), skill ids (B,),
        params (B, P) in contract bounds."""
        frames = np.asarray(frames, dtype=np.float32)
        if frames.ndim != 3 or frames.shape[1:] != (self.memory, self.embed_dim):
            raise ValueError(
                f"embedding window: expected shape (B, {self.memory}, {self.embed_dim}), got {frames.shape}"
            )
        if not np.all(np.isfinite(frames)):
            raise ValueError("embedding: non-finite value (NaN/Inf)")
        feeds = {"state_embedding": frames[:, 0]} if self.memory == 1 else {"frames": frames}
        out = self.policy.run(feeds)
        return out["skill_logits"], out["action_skill"], out["action_params"]


def load_student(
    artifact: Artifact | str | Path, backend: str = "onnxruntime", **options: object
) -> StudentRuntime:
    """Open the student of an artifact on a backend (see StudentRuntime for options)."""
    return StudentRuntime(artifact, backend, **options)  # type: ignore[arg-type]
