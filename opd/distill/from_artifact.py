"""An OPD learner from a deployed student: the artifact's head, predictor and novelty ensemble (its torch
weights, verified by the artifact's hashes), as the live node, replay and a fine-tuning run start from."""

from __future__ import annotations

from typing import Any

from opd.distill.config import NoveltyConfig, OPDConfig
from opd.distill.learner import OnlineDistillation
from policies.artifact import Artifact
from policies.image_encoder import widen_positions
from policies.student_policy import StudentPolicy
from policies.teacher_policy import TeacherPolicy
from policies.torch_files import load_torch
from policies.weight_init import skipped_weight_init


def learner_from_artifact(
    artifact: Artifact, teacher: TeacherPolicy, cfg: OPDConfig, num_envs: int = 1, learning: bool = True
) -> OnlineDistillation:
    """The OPD learner of a deployed student: the artifact's head, predictor and novelty ensemble if it
    has one (its torch weights, verified by the artifact's hashes) on the state embeddings of its fixed
    encoder, as the live node runs it."""
    distill = cfg.distill.model_copy(update={"train_encoder": False})
    update: dict[str, Any] = {"predictor": artifact.predictor_config, "distill": distill}
    novelty = artifact.novelty_config  # the shape of the ensemble it carries
    if novelty is not None:
        update["novelty"] = NoveltyConfig.from_dict(novelty, f"{artifact.root}: config.novelty")
    cfg = cfg.model_copy(update=update)
    with skipped_weight_init():  # every weight is the artifact's, loaded once below
        student = StudentPolicy(artifact.student_config, artifact.contract)
    learner = OnlineDistillation(student, teacher, cfg, num_envs, learning=learning)
    load_artifact_weights(learner, artifact)
    return learner


def load_artifact_weights(
    learner: OnlineDistillation,
    artifact: Artifact,
    new_memory: bool = False,
    wider: bool = False,
    novelty: bool = True,
) -> None:
    """The artifact's student and predictor torch weights (verified by its hashes), and with `novelty` its
    novelty ensemble's where both it and the learner have one, into the learner and its acting copies;
    weights that do not fit the learner are one error naming the artifact.

    `new_memory`: the artifact's head has no memory and the learner's head keeps its own (freshly built,
    zero-projection) `FrameMemory`, so it starts out acting as the artifact's student.
    `wider`: the learner's camera is wider than the artifact's (same height): the image position embedding
    is widened (`policies.image_encoder.widen_positions`).
    """
    weights = artifact.weights
    try:
        state = load_torch(weights.student)
        if wider:
            image, pos = learner.student.cfg.encoder.image, "encoder.image.pos"
            rows, cols = image.height // image.stride, image.width // image.stride
            state[pos] = widen_positions(state[pos], rows, cols)
        missing, unexpected = learner.student.load_state_dict(state, strict=False)
        kept = {k for k in missing if new_memory and k.startswith("memory.")}
        if unexpected or set(missing) - kept:
            raise RuntimeError(f"missing keys {sorted(set(missing) - kept)}, unexpected {sorted(unexpected)}")
        predictor = load_torch(weights.predictor)
        learner.predictor.load_state_dict(predictor)
        if novelty and learner.novelty is not None and weights.novelty is not None:
            learner.novelty.load_state_dict(load_torch(weights.novelty))
    except (RuntimeError, KeyError) as err:
        raise ValueError(f"{artifact.root}: weights do not fit the learner's config: {err}") from None
    learner.sync_policy()
