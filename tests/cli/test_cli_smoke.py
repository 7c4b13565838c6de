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
    (d / "predictor.yaml").write_text(yaml.safe_dump({"in_dim": 32, "hidden": 8}))
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
    assert manifest["config"]["predictor"]["out_dim"] == len(manifest["models"]["predictor"]["fields"]) == 25


def test_export_refuses_a_predictor_width_that_is_not_the_robots(tmp_path, tiny_yaml):
    pred = tmp_path / "predictor.yaml"
    pred.write_text(yaml.safe_dump({"out_dim": 16}))
    sim_cfg = Path(__file__).parents[2] / "sim" / "configs" / "mujoco.yaml"
    out = agent("export", "--out", str(tmp_path / "a"), "--config", str(tiny_yaml / "student.yaml"),
                "--predictor-config", str(pred), "--sim-config", str(sim_cfg))  # fmt: skip
    assert out.returncode == 2
    assert "out_dim (16)" in out.stderr and "(25 fields)" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "a").exists()


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


TINY_TEACHER = {
    "learning_starts": 32,
    "actor_starts": 64,
    "updates_per_step": 0.1,
    "checkpoint_every": 1000,
    "teacher": {"hidden": [32]},
    "sac": {"batch_size": 32, "critic_hidden": [32]},
    "demos": {"episodes": 4, "bc_updates": 20},
}


def test_train_then_eval_teacher(tmp_path):
    (tmp_path / "teacher.yaml").write_text(yaml.safe_dump(TINY_TEACHER))
    run = tmp_path / "run"
    out = agent("train", "teacher", "--sim", "mujoco", "--envs", "4", "--steps", "128", "--seed", "3",
                "--out", str(run), "--config", str(tmp_path / "teacher.yaml"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"wrote {run / 'teacher.pt'}" in out.stdout
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert (resolved["num_envs"], resolved["total_steps"], resolved["seed"]) == (4, 128, 3)
    for proxy in ((), ("--proxy",)):
        ev = agent("eval", "teacher", "--checkpoint", str(run / "teacher.pt"), "--episodes", "3",
                   "--envs", "3", "--json", *proxy)  # fmt: skip
        assert ev.returncode == 0, ev.stderr
        report = json.loads(ev.stdout)
        assert report["episodes"] == 3 and report["sim"] == "mujoco" and report["proxy"] == bool(proxy)
        lo, hi = report["ci95"]
        assert 0.0 <= lo <= report["success_rate"] <= hi <= 1.0
        assert isinstance(report["mean_return"], float)


def test_eval_teacher_defaults_to_the_committed_checkpoint():
    ev = agent("eval", "teacher", "--episodes", "2", "--envs", "2")
    assert ev.returncode == 0, ev.stderr
    assert "2 episodes on the clean sim" in ev.stdout


def test_eval_teacher_without_a_checkpoint_fails_with_one_clear_line(tmp_path):
    ev = agent("eval", "teacher", "--checkpoint", str(tmp_path / "none.pt"), "--json")
    assert ev.returncode == 2
    assert "none.yaml" in ev.stderr and "Traceback" not in ev.stderr
