"""`agent bench learner`: what one learner update costs in each number format, measured in one run.

A learner built as a student training config builds it (student, teacher, method, distill settings, torch
threads) takes updates from a store of random samples, once with the encoder in float32 and once in
bfloat16 (`distill.precision`). The formats alternate round by round, so machine noise falls on both
alike; the figures are the medians. Native bfloat16 needs AMX or AVX512-BF16: elsewhere it is emulated
and slower than float32, which the figures then show.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from opd.distill.learner import OnlineDistillation, native_bf16
from opd.runs import flushed_denormals
from opd.student.trainer import SWITCH, StudentTrainConfig
from policies.config import from_root
from policies.student_policy import StudentConfig, StudentPolicy
from policies.teacher_policy import load_teacher

PRECISIONS = ("fp32", "bf16")


def filled_learner(cfg: StudentTrainConfig, precision: str, seed: int = 0) -> OnlineDistillation:
    """The config's learner with the encoder in `precision`, its store holding two batches of random rows."""
    torch.manual_seed(seed)
    teacher = load_teacher(from_root(cfg.teacher))
    student = StudentPolicy(StudentConfig.from_yaml(from_root(cfg.student_config)), teacher.contract)
    distill = cfg.opd.distill
    distill = distill.model_copy(update={"precision": precision, "capacity": 2 * distill.batch_size})
    opd = cfg.opd.model_copy(update={"switch": SWITCH[cfg.method], "distill": distill})
    learner = OnlineDistillation(student, teacher, opd, num_envs=1, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(distill.capacity):
        row = {}
        for key, (shape, dtype) in learner.sample_shapes().items():
            if dtype == np.uint8:
                row[key] = rng.integers(0, 256, shape, dtype=np.uint8)
            elif dtype == np.float32:
                row[key] = rng.standard_normal(shape).astype(np.float32)
            else:  # masks on, ids and skills 0
                row[key] = np.ones(shape, dtype) if dtype == np.bool_ else np.zeros(shape, dtype)
        learner.add_sample(row)
    return learner


def bench_learner(train_config: Path, rounds: int = 3, updates: int = 5, warmup: int = 2) -> dict[str, Any]:
    """Seconds per `update()` by precision (median of `rounds`, each the mean of `updates` after `warmup`
    untimed ones) and bf16's cost as a fraction of fp32's."""
    cfg = StudentTrainConfig.from_yaml(train_config)
    torch.set_num_threads(cfg.threads)
    learners = {p: filled_learner(cfg, p) for p in PRECISIONS}
    timed: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    with flushed_denormals():  # as the trainer updates
        for learner in learners.values():
            for _ in range(warmup):
                learner.update()
        for _ in range(rounds):
            for p, learner in learners.items():
                t0 = time.perf_counter()
                for _ in range(updates):
                    learner.update()
                timed[p].append((time.perf_counter() - t0) / updates)
    per_update = {p: statistics.median(v) for p, v in timed.items()}
    return {
        "config": str(train_config),
        "batch_size": cfg.opd.distill.batch_size,
        "train_encoder": cfg.opd.distill.train_encoder,
        "threads": cfg.threads,
        "native_bf16": native_bf16(),
        "s_per_update": {p: round(v, 6) for p, v in per_update.items()},
        "rounds": {p: [round(x, 6) for x in v] for p, v in timed.items()},
        "bf16_vs_fp32": round(per_update["bf16"] / per_update["fp32"], 3),
    }
