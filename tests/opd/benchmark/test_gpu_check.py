"""`agent bench gpu` on a machine without CUDA: one clear line, no traceback; with CUDA, its checks pass."""

from __future__ import annotations

import pytest
import torch
from agent.cli import main


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: the refusal is for a machine without")
def test_without_cuda_the_gpu_check_refuses_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "gpu", "--json"]) == 2
    err = capsys.readouterr().err
    assert "agent bench gpu checks a CUDA GPU" in err and "Traceback" not in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_learning_agrees_with_the_cpu() -> None:
    from opd.benchmark.gpu_check import training_agrees

    result = training_agrees(torch.device("cuda:0"), steps=5)
    assert result["ok"], result
