"""Reading torch files (checkpoints, weights): one clear error for a corrupt one, naming it."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch


def load_torch(path: str | Path) -> Any:
    """`torch.load(path)` of tensors and plain types only, onto the CPU. A missing file stays a
    FileNotFoundError; one torch cannot read (cut short, overwritten, not written by `torch.save`, or
    holding more than tensors and plain types) is a ValueError naming it, not torch's traceback."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        # an unpickling error's text would suggest weights_only=False: loading arbitrary code, never the cure
        text = "" if isinstance(err, pickle.UnpicklingError) else str(err).strip().splitlines()[0:1]
        detail = f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
        raise ValueError(f"{path}: not a readable torch file (cut short or corrupt?): {detail}") from None
