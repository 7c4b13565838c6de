"""The torch student of a deployed artifact: the `torch` reference backend runs it, the OPD learner starts
from it and a version learnt online is exported from it."""

from __future__ import annotations

from pathlib import Path

from policies.artifact import Artifact
from policies.student_policy import StudentPolicy
from policies.torch_files import load_torch


def build_student(artifact: Artifact, weights: str | Path | None = None) -> StudentPolicy:
    """The artifact's student (its config and skill contract) with its torch weights, or with `weights`: a
    state dict of the same architecture (a head learnt online on its encoder). Weights of another
    architecture are torch's RuntimeError."""
    student = StudentPolicy(artifact.student_config, artifact.contract)
    student.load_state_dict(load_torch(artifact.weights.student if weights is None else weights))
    return student
