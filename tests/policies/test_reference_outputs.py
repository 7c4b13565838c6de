"""Numeric drift guard: a seeded tiny student must keep producing the stored outputs.

Regenerate (after an intended change to the model or a torch upgrade) with:
    AGENT_REGEN_REFERENCE=1 .venv/bin/pytest tests/policies/test_reference_outputs.py
"""

import os
from pathlib import Path

import numpy as np
import torch

from policies.student_policy import StudentPolicy

REFERENCE = Path(__file__).parent / "data" / "reference_student.npz"


def _outputs(tiny_cfg, contract) -> dict[str, np.ndarray]:
    torch.manual_seed(1234)
    policy = StudentPolicy(tiny_cfg, contract).eval()
    enc, head = policy.deployed_encoder(), policy.deployed_head()
    g = torch.Generator().manual_seed(7)
    ec = tiny_cfg.encoder
    inputs = (
        torch.randint(0, 256, (2, ec.image.height, ec.image.width, 3), dtype=torch.uint8, generator=g),
        torch.randn(2, ec.imu.window, 6, generator=g),
        torch.tensor([0, 2]),
        torch.tensor([0.25, 0.75]),
        torch.tensor([3.0, 120.0]),
    )
    with torch.inference_mode():
        emb, gates = enc(*inputs)
        logits, skill, params = head(emb)
    return {
        "embedding": emb.numpy(),
        "gates": gates.numpy(),
        "logits": logits.numpy(),
        "params": params.numpy(),
    }


def test_outputs_match_the_stored_reference(tiny_cfg, contract):
    out = _outputs(tiny_cfg, contract)
    if os.environ.get("AGENT_REGEN_REFERENCE"):
        REFERENCE.parent.mkdir(exist_ok=True)
        np.savez(REFERENCE, **out)
    ref = np.load(REFERENCE)
    for k, v in out.items():
        np.testing.assert_allclose(v, ref[k], atol=1e-5, err_msg=k)
