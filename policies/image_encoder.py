"""Image branch: a torchvision ResNet trunk (no pooling, no fc) turning a camera frame into spatial tokens.

Normalisation lives inside the graph so that every runtime (torch, ONNX Runtime, TensorRT) takes the raw
camera frame as uint8 RGB, HWC: the most common deployment bug is a second, different normalisation.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import torch
import torchvision
from pydantic import Field, ValidationInfo, field_validator
from torch import nn

from policies.config import Config
from policies.torch_files import load_torch

log = logging.getLogger(__name__)

_STEM_STRIDE = 4  # conv1 (stride 2) + maxpool (stride 2); each residual stage after the first halves again


class ImageConfig(Config):
    """Camera input and image trunk."""

    backbone: Literal["resnet34", "resnet18"] = "resnet34"  # resnet18 for small CPU-only machines
    # Residual stages kept: 4 = the whole trunk (stride 32, 512 channels). 3 drops the last stage (stride 16,
    # 256 channels): a quarter of ResNet18's weights (11 MB instead of 45) and 4x the tokens at one image
    # size, which is what a CPU-trained student at 64 px needs.
    stages: int = Field(4, ge=1, le=4)  # residual stages of the ResNet trunk kept, 1
    height: int = Field(128, ge=32, le=1024)  # input height, pixels (multiple of the trunk's stride)
    width: int = Field(128, ge=32, le=1024)  # input width, pixels (multiple of the trunk's stride)
    # ImageNet statistics, so that a local ImageNet-pretrained weights file works unchanged.
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)  # per-channel mean of x/255
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)  # per-channel std of x/255
    weights: str | None = None  # local torchvision state_dict for the trunk; None = random init

    @field_validator("height", "width")
    @classmethod
    def _multiple_of_stride(cls, v: int, info: ValidationInfo) -> int:
        stride = _STEM_STRIDE * 2 ** (info.data.get("stages", 4) - 1)  # `stages` is validated first
        if v % stride:
            raise ValueError(f"must be a multiple of the trunk's stride {stride}, got {v}")
        return v

    @field_validator("std")
    @classmethod
    def _positive_std(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if min(v) <= 0:
            raise ValueError(f"std must be > 0, got {v}")
        return v

    @property
    def stride(self) -> int:
        """Total downsampling of the trunk, pixels per token side."""
        return _STEM_STRIDE * 2 ** (self.stages - 1)

    @property
    def channels(self) -> int:
        """Channels of the last kept stage (torchvision BasicBlock ResNets: 64 doubling per stage)."""
        return 64 * 2 ** (self.stages - 1)

    @property
    def num_tokens(self) -> int:
        return (self.height // self.stride) * (self.width // self.stride)


class ImageEncoder(nn.Module):
    """uint8 RGB frames -> spatial tokens. Shape: (B, H, W, 3) uint8 -> (B, N, dim), N = H*W/stride^2."""

    def __init__(self, cfg: ImageConfig, dim: int) -> None:
        super().__init__()
        self.cfg = cfg
        resnet = getattr(torchvision.models, cfg.backbone)(weights=None)
        self.weights_source = load_trunk_weights(resnet, cfg.weights)
        # Keep the convolutional trunk only: the spatial map becomes attention tokens.
        stages = [resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4][: cfg.stages]
        self.trunk = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool, *stages)
        self.proj = nn.Linear(cfg.channels, dim)
        self.pos = nn.Parameter(torch.zeros(1, cfg.num_tokens, dim))
        nn.init.normal_(self.pos, std=0.02)
        self.register_buffer("mean", torch.tensor(cfg.mean).view(1, 3, 1, 1) * 255.0, persistent=False)
        self.register_buffer(
            "inv_std", 1.0 / (torch.tensor(cfg.std).view(1, 3, 1, 1) * 255.0), persistent=False
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        # Cast before the permute: TensorRT takes uint8 only at the I/O and in Cast, not in a Transpose.
        x = image.float().permute(0, 3, 1, 2)  # (B, H, W, 3) uint8 -> (B, 3, H, W) float32
        x = (x - self.mean) * self.inv_std  # == ((x / 255) - mean) / std, one fused op
        x = self.trunk(x)  # (B, C, H/stride, W/stride)
        x = x.flatten(2).transpose(1, 2)  # (B, N, C)
        return self.proj(x) + self.pos  # (B, N, dim)


def widen_positions(pos: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A narrower camera's image position embedding for a wider one at the same height and stride.

    Shape: (1, rows * c, D) -> (1, rows * cols, D), cols >= c. At one vertical field of view a wider frame
    shows the narrower one's scene at its centre at the same pixel scale (MuJoCo's `fovy` is vertical), so
    the centre columns keep their embeddings and each added column starts as the nearest edge column.
    """
    _, n, dim = pos.shape
    if n % rows or cols < n // rows:
        raise ValueError(f"cannot widen {n} image tokens in {rows} rows to {cols} columns")
    narrow = n // rows
    index = (torch.arange(cols) - (cols - narrow) // 2).clamp(0, narrow - 1)  # (cols,) source column
    return pos.view(1, rows, narrow, dim)[:, :, index].reshape(1, rows * cols, dim)


def load_trunk_weights(resnet: nn.Module, weights: str | None) -> str:
    """Load a local torchvision ResNet state_dict if given; return where the weights came from.

    Nothing is downloaded: deployment machines and CI are offline.
    """
    if weights is None:
        # debug: most builds load a whole student's weights over it next; those loaders say so
        log.debug("image trunk: random initialisation (no local weights file given)")
        return "random-init"
    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"image.weights: no such file {path}")
    state = load_torch(path)
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing, unexpected = resnet.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("fc.")]
    if missing or unexpected:
        raise ValueError(
            f"image.weights {path}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}"
        )
    log.info("image trunk: loaded local weights %s", path)
    return str(path)
