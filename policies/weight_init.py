"""Building modules without their random initialisation, for modules whose every weight is loaded right
after (half a second for the ResNet trunk on a CPU). It patches `torch.nn.init`, which is process-wide:
named here, where a reader looks for it, not hidden in the module that uses it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def skipped_weight_init() -> Iterator[None]:
    """Modules built in here skip their random initialisation. torch.nn.init is process-wide, so nothing
    else may build modules meanwhile (the learner is built before any thread acts on it)."""
    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(torch.nn.init, n, fn)
