"""`agent bench gpu`: what a machine with a CUDA GPU checks, in one command of a few minutes.

1. Learning on CUDA agrees with learning on the CPU: the tiny learner (`opd.benchmark.ddp_bench`) takes
   the same float32 steps on both from the same weights (TF32 off), and its weights may differ by at most
   `WEIGHTS_ATOL`; one step with the encoder learning (bfloat16 autocast on CUDA, float32 on the CPU) gives
   the same loss within `BF16_RTOL`.
2. The deployed student drives `episodes` evaluation episodes with its encoder on ONNX Runtime's CUDA
   provider (MuJoCo rendering on EGL).
3. The encoder's batch-1 latency on torch CUDA and on ONNX Runtime's CUDA provider.

Without CUDA it refuses at once (a RuntimeError naming what is missing): it checks a GPU.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from opd.benchmark.ddp_bench import global_batch, tiny_learner

WEIGHTS_ATOL = 1e-4  # float32 on two devices: the same sums in another order, ~1e-6 per step, 20 steps
BF16_RTOL = 5e-2  # bfloat16 keeps 8 bits of mantissa (~0.4% per value); the loss sums many of them
TRAIN_STEPS = 20


def require_cuda() -> torch.device:
    """cuda:0, or a RuntimeError saying why not."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "agent bench gpu checks a CUDA GPU and torch sees none here (torch.cuda.is_available() is False; "
            f"torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'})"
        )
    return torch.device("cuda:0")


def training_agrees(cuda: torch.device, steps: int = TRAIN_STEPS) -> dict[str, Any]:
    """The tiny learner's float32 steps on the CPU and on CUDA from the same weights, and one step of the
    encoder learning in bfloat16 on CUDA against float32 on the CPU."""
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 for this comparison
    torch.backends.cudnn.allow_tf32 = False
    learners = {d: tiny_learner(32, torch.device(d), seed=0) for d in ("cpu", str(cuda))}
    t0 = {}
    for d, learner in learners.items():
        t0[d] = time.perf_counter()
        for u in range(steps):
            learner.learn_on(global_batch(learner, 32, u))
        if d != "cpu":
            torch.cuda.synchronize(cuda)
        t0[d] = time.perf_counter() - t0[d]
    cpu, gpu = (learners[d].student.state_dict() for d in learners)
    weights_diff = max((cpu[k] - gpu[k].cpu()).abs().max().item() for k in cpu)
    losses = {}
    for d in ("cpu", str(cuda)):
        learner = tiny_learner(32, torch.device(d), seed=0, train_encoder=True)
        losses[d] = learner.learn_on(global_batch(learner, 32, 0))[0]
    rel = {k: abs(losses["cpu"][k] - losses[str(cuda)][k]) / max(abs(losses["cpu"][k]), 1e-6)
           for k in losses["cpu"] if k.startswith("loss/")}  # fmt: skip
    return {
        "steps": steps,
        "weights_max_abs_diff": weights_diff,
        "weights_atol": WEIGHTS_ATOL,
        "encoder_bf16_loss_rel_diff": {k: round(v, 5) for k, v in rel.items()},
        "bf16_rtol": BF16_RTOL,
        "s_per_update": {"cpu": round(t0["cpu"] / steps, 5), "cuda": round(t0[str(cuda)] / steps, 5)},
        "ok": weights_diff <= WEIGHTS_ATOL and max(rel.values()) <= BF16_RTOL,
    }


def encoder_latency(artifact: Path, cuda: torch.device, iters: int = 200, warmup: int = 20) -> dict[str, Any]:
    """Batch-1 encoder latency (ms, p50 and p99) on torch CUDA and on ONNX Runtime's CUDA provider."""
    from policies.artifact import Artifact
    from policies.bench import Inputs
    from policies.runtime.student_runtime import StudentRuntime
    from policies.student_from_artifact import build_student

    art = Artifact.load(artifact)
    ort = StudentRuntime(art, "onnxruntime", device=str(cuda))
    x = Inputs.random(ort, 1)
    feeds = (x.image, x.imu, x.skill, x.progress, x.step)
    encoder = build_student(art).encoder.to(cuda).eval()
    gpu_feeds = [torch.as_tensor(np.asarray(v)).to(cuda) for v in feeds]

    def torch_call() -> None:
        with torch.no_grad():
            encoder(*gpu_feeds)
        torch.cuda.synchronize(cuda)

    out = {"torch_cuda": _timed(torch_call, iters, warmup)}
    out["onnxruntime"] = {**_timed(lambda: ort.encode(*feeds), iters, warmup),
                          "providers": list(ort.encoder.providers)}  # fmt: skip
    return out


def _timed(call: Any, iters: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        call()
    ms = []
    for _ in range(iters):
        t0 = time.perf_counter()
        call()
        ms.append((time.perf_counter() - t0) * 1e3)
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
    }


def evaluation(artifact: Path, episodes: int, cuda: torch.device) -> dict[str, Any]:
    """`episodes` seeded evaluation episodes of the student acting alone, its encoder on ONNX Runtime
    (the CUDA provider where installed: the report names the providers)."""
    from opd.evaluation import evaluate_student
    from policies.runtime.student_runtime import StudentRuntime

    os.environ.setdefault("MUJOCO_GL", "egl")
    runtime = StudentRuntime(artifact, "onnxruntime", device=str(cuda))
    t0 = time.perf_counter()
    report = evaluate_student(runtime, episodes, num_envs=min(episodes, 10))
    keep = ("episodes", "success_rate", "ci95")
    return {**{k: report[k] for k in keep if k in report}, "seconds": round(time.perf_counter() - t0, 1),
            "providers": list(runtime.encoder.providers)}  # fmt: skip


def gpu_check(artifact: Path, episodes: int = 20) -> dict[str, Any]:
    """Every check above; "ok" is the training agreement's verdict."""
    cuda = require_cuda()
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(cuda), "torch": torch.__version__}
    result["training"] = training_agrees(cuda)
    result["encoder_latency"] = encoder_latency(artifact, cuda)
    result["evaluation"] = evaluation(artifact, episodes, cuda)
    result["ok"] = result["training"]["ok"]
    return result
