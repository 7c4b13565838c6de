"""Batch-1 latency of the deployed student (input checks + encoder + head) on every available backend.

Backends are timed interleaved in short blocks, so machine noise hits them alike and the speed-up ratios
stay meaningful on a shared 2-core machine. Blocks rather than single calls: after a call, a backend's
thread pool keeps spinning for a while (torch's OpenMP, ONNX Runtime's workers); interleaving one call each
let that spin steal the cores of the next backend's call and slowed every 2-thread backend ~2-5x here.
Each backend is also compared with the torch reference on the same inputs (max |embedding difference|,
skill agreement), so a fast but wrong backend shows up in the same table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from policies.artifact import Artifact
from policies.runtime import BackendUnavailable, StudentRuntime

BLOCK = 10  # consecutive calls per backend and round
SETTLE = 2  # untimed calls at the start of each block

# name -> (backend, precision)
VARIANTS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "fp32"),
    "onnxruntime": ("onnxruntime", "fp32"),
    "onnxruntime_int8": ("onnxruntime", "int8"),
    "tensorrt": ("tensorrt", "fp16"),
}


@dataclass
class Inputs:
    """A rotating set of observations. Shapes: image (N, H, W, 3), imu (N, W, 6), skill/progress/step (N,)."""

    image: np.ndarray
    imu: np.ndarray
    skill: np.ndarray
    progress: np.ndarray
    step: np.ndarray

    @classmethod
    def random(cls, runtime: StudentRuntime, n: int, seed: int = 0) -> Inputs:
        rng = np.random.default_rng(seed)
        h, w = runtime.image_hw
        return cls(
            image=rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8),
            imu=(rng.normal(size=(n, runtime.imu_window, 6)) + [0, 0, 9.81, 0, 0, 0]).astype(np.float32),
            skill=rng.integers(0, runtime.contract.num_skills, size=n),
            progress=rng.uniform(0, 1, size=n).astype(np.float32),
            step=rng.integers(0, 400, size=n).astype(np.float32),
        )

    def __len__(self) -> int:
        return len(self.skill)

    def call(self, rt: StudentRuntime, i: int) -> tuple[np.ndarray, int]:
        """One end-to-end step on sample i: checks, encoder, head."""
        emb, _ = rt.encode(
            self.image[i], self.imu[i], int(self.skill[i]), float(self.progress[i]), float(self.step[i])
        )
        window = np.zeros((1, rt.memory, rt.embed_dim), np.float32)  # the first frame of an episode
        window[0, -1] = emb
        _, skill, _ = rt.act_window(window)
        return emb, int(skill[0])


def benchmark_student(
    artifact: str | Path,
    variants: list[str] | None = None,
    iters: int = 200,
    warmup: int = 20,
    threads: int = 2,
) -> dict:
    """Time each variant; return the figures as a JSON-ready dict (unavailable variants carry a reason)."""
    art = Artifact.load(artifact)
    variants = variants or list(VARIANTS)
    runtimes: dict[str, StudentRuntime] = {}
    report: dict[str, dict] = {}
    for name in variants:
        backend, precision = VARIANTS[name]
        try:
            runtimes[name] = StudentRuntime(art, backend, precision=precision, threads=threads)
        except BackendUnavailable as err:
            report[name] = {"available": False, "reason": str(err)}
    if not runtimes:
        return _result(art, threads, iters, report)
    any_rt = next(iter(runtimes.values()))
    inputs = Inputs.random(any_rt, n=16)

    reference = (
        [inputs.call(runtimes["torch"], i) for i in range(len(inputs))] if "torch" in runtimes else None
    )
    for rt in runtimes.values():
        for it in range(warmup):
            inputs.call(rt, it % len(inputs))
    times: dict[str, list[float]] = {n: [] for n in runtimes}
    it = 0
    while min(len(t) for t in times.values()) < iters:
        for name, rt in runtimes.items():
            for j in range(BLOCK):
                t0 = time.perf_counter()
                inputs.call(rt, (it + j) % len(inputs))
                if j >= SETTLE:  # the first calls of a block may share the cores with the last backend's pool
                    times[name].append(time.perf_counter() - t0)
        it += BLOCK
    times = {n: t[:iters] for n, t in times.items()}
    torch_p50 = float(np.percentile(times["torch"], 50)) if "torch" in times else None
    for name, rt in runtimes.items():
        ms = np.asarray(times[name]) * 1e3
        entry = {
            "available": True,
            "precision": rt.precision,
            "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "mean_ms": round(float(ms.mean()), 3),
            "speedup_vs_torch": round(torch_p50 * 1e3 / float(np.percentile(ms, 50)), 2)
            if torch_p50
            else None,
        }
        if reference is not None:
            outs = [inputs.call(rt, i) for i in range(len(inputs))]
            entry["max_abs_diff_embedding"] = float(
                max(np.abs(o[0] - r[0]).max() for o, r in zip(outs, reference, strict=True))
            )
            entry["skill_agreement"] = float(
                np.mean([o[1] == r[1] for o, r in zip(outs, reference, strict=True)])
            )
        report[name] = entry
    return _result(art, threads, iters, {n: report[n] for n in variants if n in report})


def _result(art: Artifact, threads: int, iters: int, backends: dict) -> dict:
    return {
        "image_hw": list(art.image_hw),
        "backbone": art.student_config.encoder.image.backbone,
        "threads": threads,
        "iters": iters,
        "backends": backends,
    }
