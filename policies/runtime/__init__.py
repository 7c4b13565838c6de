"""Inference on exported artifacts, one interface over three backends chosen by name.

    rt = load_student("artifacts/student", backend="onnxruntime")
    embedding, gates = rt.encode(image, imu, skill, progress, step)
    logits, skill, params = rt.act(embedding)

`torch` is the eager reference, `onnxruntime` the CPU path (CUDA provider when present; `precision="int8"`
for the quantised encoder), `tensorrt` the GPU path (`precision="fp16"` by default).
"""

from policies.runtime.base import BackendUnavailable, ModelRunner
from policies.runtime.loading import BACKENDS, load_model
from policies.runtime.student_runtime import StudentRuntime, load_student

__all__ = ["BACKENDS", "BackendUnavailable", "ModelRunner", "StudentRuntime", "load_model", "load_student"]
