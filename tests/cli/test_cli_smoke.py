"""Every entry point runs as a subprocess with a tiny budget."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TINY = {
    "encoder": {
        "image": {"backbone": "resnet18", "height": 64, "width": 64},
        "imu": {"window": 32, "conv_channels": [8, 16]},
        "fusion": {"dim": 32, "heads": 4, "queries": 2},
        "embed_dim": 32,
    },
    "head": {"hidden": [32]},
}


def agent(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def tiny_yaml(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cfg")
    (d / "student.yaml").write_text(yaml.safe_dump(TINY))
    (d / "predictor.yaml").write_text(yaml.safe_dump({"in_dim": 32, "out_dim": 4, "hidden": 8}))
    return d


def test_help_lists_subcommands():
    out = agent("--help")
    assert out.returncode == 0
    for cmd in ("bench", "export"):
        assert cmd in out.stdout


def test_export_writes_a_loadable_artifact(tmp_path, tiny_yaml):
    out = agent("export", "--out", str(tmp_path / "a"), "--config", str(tiny_yaml / "student.yaml"),
                "--predictor-config", str(tiny_yaml / "predictor.yaml"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["config"]["student"]["encoder"]["embed_dim"] == 32


def test_export_rejects_a_bad_config_with_one_clear_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"encoder": {"fusion": {"dim": 30}}}))
    out = agent("export", "--out", str(tmp_path / "a"), "--config", str(bad))
    assert out.returncode == 2
    assert "fusion" in out.stderr and "Traceback" not in out.stderr


def test_bench_encoder_prints_json_with_figures_and_reasons(tiny_yaml):
    out = agent("bench", "encoder", "--json", "--iters", "5", "--warmup", "1", "--image-size", "64",
                "--config", str(tiny_yaml / "student.yaml"), "--backend", "torch", "--backend", "onnxruntime",
                "--backend", "tensorrt")  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["image_size"] == 64 and result["threads"] >= 1
    torch_r, ort_r = result["backends"]["torch"], result["backends"]["onnxruntime"]
    assert torch_r["speedup_vs_torch"] == 1.0
    for r in (torch_r, ort_r):
        assert 0 < r["p50_ms"] <= r["p99_ms"]
    assert ort_r["max_abs_diff_embedding"] < 1e-4 and ort_r["skill_agreement"] == 1.0
    trt = result["backends"]["tensorrt"]
    assert trt["available"] or trt["reason"]
