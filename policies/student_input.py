"""The student encoder's five inputs, named once: the torch encoder, its ONNX graph, the runtimes, the
quantiser's calibration file and the OPD learner's stored frames all take them in this order."""

from __future__ import annotations

from typing import Any, NamedTuple


class StudentInput(NamedTuple):
    """One observation of the student, each with a leading batch axis B."""

    image: Any  # (B, H, W, 3) uint8 RGB
    imu: Any  # (B, W, 6) float32, oldest sample first: accel xyz m/s^2, gyro xyz rad/s
    skill: Any  # (B,) int64 active skill id
    progress: Any  # (B,) float32 task progress in [0, 1]
    step: Any  # (B,) float32 control steps since the episode start


INPUT_NAMES: tuple[str, ...] = StudentInput._fields  # the order the encoder takes them in
