"""INT8 post-training quantisation of the encoder graph for ONNX Runtime on CPUs.

Static QDQ quantisation with per-channel weights (ONNX Runtime's `quantize_static`): on a 2-core AVX2 CPU
it roughly halves ResNet latency. Activation ranges come from calibration inputs, which should be real
frames from the robot or the sim (`--calibration file.npz`); synthetic frames are the fallback.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from policies.student_input import INPUT_NAMES

log = logging.getLogger(__name__)


def synthetic_calibration(spec: dict, count: int = 16, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Calibration feeds for the encoder: smooth colour fields with texture, gravity-dominated IMU windows."""
    rng = np.random.default_rng(seed)
    shapes = {i["name"]: i["shape"] for i in spec["inputs"]}
    _, h, w, _ = shapes["image"]
    _, window, _ = shapes["imu"]
    feeds = []
    for _ in range(count):
        coarse = rng.uniform(0, 255, size=(h // 16, w // 16, 3))
        image = np.kron(coarse, np.ones((16, 16, 1))) + rng.normal(0, 12, size=(h, w, 3))
        imu = rng.normal(0, [0.5, 0.5, 0.5, 0.3, 0.3, 0.3], size=(window, 6)) + [0, 0, 9.81, 0, 0, 0]
        feeds.append({
            "image": np.clip(image, 0, 255).astype(np.uint8)[None],
            "imu": imu.astype(np.float32)[None],
            "skill": rng.integers(0, 2, size=1).astype(np.int64),
            "progress": rng.uniform(0, 1, size=1).astype(np.float32),
            "step": rng.uniform(0, 400, size=1).astype(np.float32),
        })  # fmt: skip
    return feeds


def load_calibration(path: Path) -> list[dict[str, np.ndarray]]:
    """Feeds from an .npz: image (N,H,W,3) uint8, imu (N,W,6), skill, progress, step (N,)."""
    with np.load(path) as data:
        missing = set(INPUT_NAMES) - set(data.files)
        if missing:
            raise ValueError(f"{path}: calibration file lacks arrays {sorted(missing)}")
        n = data["image"].shape[0]
        return [
            {
                "image": data["image"][i : i + 1].astype(np.uint8),
                "imu": data["imu"][i : i + 1].astype(np.float32),
                "skill": data["skill"][i : i + 1].astype(np.int64),
                "progress": data["progress"][i : i + 1].astype(np.float32),
                "step": data["step"][i : i + 1].astype(np.float32),
            }
            for i in range(n)
        ]


def quantize_int8(fp32_path: Path, out_path: Path, feeds: list[dict[str, np.ndarray]]) -> None:
    """Write a QDQ INT8 copy of an ONNX graph calibrated on `feeds`."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it: Iterator[dict[str, np.ndarray]] = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser logs every tensor it touches on the root logger
    try:
        _quantize(fp32_path, out_path, Reader())
    finally:
        root.setLevel(level)
    log.info("wrote INT8 encoder %s (calibrated on %d inputs)", out_path, len(feeds))


def _quantize(fp32_path: Path, out_path: Path, reader: object) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(fp32_path), str(pre))
        quantize_static(
            str(pre), str(out_path), reader,
            quant_format=QuantFormat.QDQ, per_channel=True,
            # Convolutions are ~95% of the FLOPs; quantising the small attention and MLP layers too
            # costs accuracy and adds quantise/dequantise pairs for no measurable speed.
            op_types_to_quantize=["Conv"],
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        )  # fmt: skip
