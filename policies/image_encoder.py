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
from pydantic import Field, field_validator
from torch import nn

from policies.config import Config

log = logging.getLogger(__name__)

# Channel count of the last ResNet stage; the tokens are projected from it.
_TRUNK_CHANNELS = {"resnet18": 512, "resnet34": 512}
_TRUNK_STRIDE = 32  # total downsampling of a torchvision ResNet trunk


class ImageConfig(Config):
    """Camera input and image trunk."""

    backbone: Literal["resnet34", "resnet18"] = "resnet34"  # resnet18 for small CPU-only machines
    height: int = Field(128, ge=32, le=1024)  # input height, pixels (multiple of 32)
    width: int = Field(128, ge=32, le=1024)  # input width, pixels (multiple of 32)
    # ImageNet statistics, so that a local ImageNet-pretrained weights file works unchanged.
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)  # per-channel mean of x/255
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)  # per-channel std of x/255
    weights: str | None = None  # local torchvision state_dict for the trunk; None = random init

    @field_validator("height", "width")
    @classmethod
    def _multiple_of_stride(cls, v: int) -> int:
        if v % _TRUNK_STRIDE:
            raise ValueError(f"must be a multiple of {_TRUNK_STRIDE}, got {v}")
        return v

    @field_validator("std")
    @classmethod
    def _positive_std(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if min(v) <= 0:
            raise ValueError(f"std must be > 0, got {v}")
        return v

    @property
    def num_tokens(self) -> int:
        return (self.height // _TRUNK_STRIDE) * (self.width // _TRUNK_STRIDE)


class ImageEncoder(nn.Module):
    """uint8 RGB frames -> spatial tokens. Shape: (B, H, W, 3) uint8 -> (B, N, dim), N = H*W/32^2."""

    def __init__(self, cfg: ImageConfig, dim: int) -> None:
        super().__init__()
        self.cfg = cfg
        resnet = getattr(torchvision.models, cfg.backbone)(weights=None)
        self.weights_source = load_trunk_weights(resnet, cfg.weights)
        # Keep the convolutional trunk only: the spatial map becomes attention tokens.
        self.trunk = nn.Sequential(
            resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool,
            resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4,
        )  # fmt: skip
        self.proj = nn.Linear(_TRUNK_CHANNELS[cfg.backbone], dim)
        self.pos = nn.Parameter(torch.zeros(1, cfg.num_tokens, dim))
        nn.init.normal_(self.pos, std=0.02)
        self.register_buffer("mean", torch.tensor(cfg.mean).view(1, 3, 1, 1) * 255.0, persistent=False)
        self.register_buffer(
            "inv_std", 1.0 / (torch.tensor(cfg.std).view(1, 3, 1, 1) * 255.0), persistent=False
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).float()  # (B, H, W, 3) -> (B, 3, H, W)
        x = (x - self.mean) * self.inv_std  # == ((x / 255) - mean) / std, one fused op
        x = self.trunk(x)  # (B, 512, H/32, W/32)
        x = x.flatten(2).transpose(1, 2)  # (B, N, 512)
        return self.proj(x) + self.pos  # (B, N, dim)


def load_trunk_weights(resnet: nn.Module, weights: str | None) -> str:
    """Load a local torchvision ResNet state_dict if given; return where the weights came from.

    Nothing is downloaded: deployment machines and CI are offline.
    """
    if weights is None:
        log.info("image trunk: random initialisation (no local weights file given)")
        return "random-init"
    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"image.weights: no such file {path}")
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing, unexpected = resnet.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("fc.")]
    if missing or unexpected:
        raise ValueError(
            f"image.weights {path}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}"
        )
    log.info("image trunk: loaded local weights %s", path)
    return str(path)
