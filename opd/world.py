"""Where this process sits among the ranks of one job, read from the environment the launcher sets: torchrun's
RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, else Slurm's SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS
(srun). Plain `python` is a world of one. Torch-free, so that `agent --help` and shard defaults load no torch.

The device a job runs on (`--device auto|cpu|cuda[:N]`) is resolved here too, by name; `torch_device` turns
it into a torch.device where torch is loaded anyway.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = "auto|cpu|cuda[:N]"
DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"  # a config field's pattern for DEVICE_CHOICES
_DEVICE = re.compile(DEVICE_PATTERN)


@dataclass(frozen=True)
class World:
    """This process's place in a job: global `rank` (seeds and shards go by it), `local_rank` (its GPU on
    the node) and `size`. A world of one is not distributed and needs no rendezvous."""

    rank: int = 0
    local_rank: int = 0
    size: int = 1
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that logs, checkpoints and exports."""
        return self.rank == 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, rendezvous: bool = True) -> World:
        """The world the launcher describes; ValueError naming the variable when it is inconsistent.
        `rendezvous` False: the ranks never meet (evaluation shards, each rank's device), so MASTER_ADDR and
        MASTER_PORT are not needed (srun sets neither)."""
        env = os.environ if env is None else env
        size = _int(env, "WORLD_SIZE", "SLURM_NTASKS", 1)
        rank = _int(env, "RANK", "SLURM_PROCID", 0)
        local_rank = _int(env, "LOCAL_RANK", "SLURM_LOCALID", 0)
        if size < 1:
            raise ValueError(f"world size {size} (WORLD_SIZE or SLURM_NTASKS) must be at least 1")
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is outside the world of {size} (RANK or SLURM_PROCID)")
        if local_rank < 0:
            raise ValueError(f"local rank {local_rank} (LOCAL_RANK or SLURM_LOCALID) must be at least 0")
        addr = env.get("MASTER_ADDR") or None
        port = _int(env, "MASTER_PORT", "MASTER_PORT", 0) or None
        if rendezvous and size > 1 and (addr is None or port is None):
            missing = " and ".join(n for n, v in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if v is None)
            raise ValueError(
                f"a world of {size} ranks needs {missing} to meet at: torchrun sets them; under srun export "
                "MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1) and MASTER_PORT=29500"
            )
        return cls(rank, local_rank, size, addr, port)


def _int(env: Mapping[str, str], name: str, slurm_name: str, default: int) -> int:
    """torchrun's variable `name`, else Slurm's, else `default`."""
    if not env.get(name):
        name = slurm_name
    text = env.get(name)
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def device_name(spec: str, world: World | None = None, cuda_count: int | None = None) -> str:
    """`auto|cpu|cuda[:N]` as a device name: auto is this rank's GPU (cuda:LOCAL_RANK) when CUDA is there,
    else cpu; plain `cuda` is cuda:LOCAL_RANK. `cuda_count` is torch.cuda.device_count() (asked when None).
    ValueError for a malformed name or a GPU that is not there."""
    if not _DEVICE.fullmatch(spec):
        raise ValueError(f"device {spec!r}: expected {DEVICE_CHOICES}")
    if spec == "cpu":
        return "cpu"
    world = world or World.from_env()
    if cuda_count is None:
        import torch

        cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if spec == "auto":
        return f"cuda:{world.local_rank}" if cuda_count > world.local_rank else "cpu"
    index = int(spec.partition(":")[2] or world.local_rank)
    if index >= cuda_count:
        have = f"{cuda_count} CUDA device{'s' if cuda_count != 1 else ''}" if cuda_count else "no CUDA device"
        raise ValueError(f"device {spec!r} (index {index}) asked for, but torch sees {have}")
    return f"cuda:{index}"


def torch_device(spec: str, world: World | None = None) -> torch.device:
    import torch

    return torch.device(device_name(spec, world))
