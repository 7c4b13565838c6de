"""Every entry point runs as a subprocess with a tiny budget."""

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from policies.artifact import sha256_file

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
    out = agent("bench", "encoder", "--json", "--iters", "5", "--warmup", "1", "--image-size", "64x32",
                "--config", str(tiny_yaml / "student.yaml"), "--backend", "torch", "--backend", "onnxruntime",
                "--backend", "tensorrt")  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["image_hw"] == [32, 64] and result["threads"] >= 1  # WxH: the wide camera's shape
    torch_r, ort_r = result["backends"]["torch"], result["backends"]["onnxruntime"]
    assert torch_r["speedup_vs_torch"] == 1.0
    for r in (torch_r, ort_r):
        assert 0 < r["p50_ms"] <= r["p99_ms"]
    assert ort_r["max_abs_diff_embedding"] < 1e-4 and ort_r["skill_agreement"] == 1.0
    trt = result["backends"]["tensorrt"]
    assert trt["available"] or trt["reason"]


def test_bench_replay_reports_the_median_round_and_its_targets():
    out = agent("bench", "replay", "--json", "--seconds", "2", "--rounds", "2")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    rounds = result["rounds"]
    assert len(rounds) == 2 and all(r["encoder_frames_per_s"] > 0 for r in rounds)
    # the lower middle round of an even count, each figure from its own round
    assert result["reencode_vs_encoder"] == min(r["reencode_vs_encoder"] for r in rounds)
    assert result["reuse_state"]["realtime_x"] == min(r["reuse_state_realtime_x"] for r in rounds)
    assert result["reuse_state"]["frames"] == 40  # 2 s at 20 Hz, every recorded embedding
    assert 25 <= result["reencode"]["frames"] < 40  # less the frames before a full IMU window (0.5 s)
    for key, target in result["targets"].items():
        goal = float(target["goal"].removeprefix(">= "))
        assert target["pass"] == (target["value"] >= goal), key
    assert result["host"]["cpus"] >= 1


def test_bench_learner_times_both_formats_and_says_whether_bfloat16_is_native(tmp_path, tiny_yaml):
    train = tmp_path / "train.yaml"
    train.write_text(yaml.safe_dump({"student_config": str(tiny_yaml / "student.yaml"), "threads": 1,
                                     "opd": {"distill": {"batch_size": 4}}}))  # fmt: skip
    out = agent("bench", "learner", "--json", "--config", str(train), "--rounds", "3", "--updates", "2")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["batch_size"] == 4 and result["threads"] == 1 and isinstance(result["native_bf16"], bool)
    for p in ("fp32", "bf16"):
        assert len(result["rounds"][p]) == 3 and all(t > 0 for t in result["rounds"][p])
        assert result["s_per_update"][p] == sorted(result["rounds"][p])[1]  # the median round
    ratio = result["s_per_update"]["bf16"] / result["s_per_update"]["fp32"]
    assert result["bf16_vs_fp32"] == pytest.approx(ratio, abs=1e-3)  # rounded to 3 places


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
    other = tmp_path / "proxy.yaml"  # another proxy: the report tells it from the default one
    other.write_text(yaml.safe_dump({"camera": {"latency_s": 0.2}}))
    hashes = {}
    for proxy in ((), ("--proxy",), ("--proxy-config", str(other))):  # a proxy config implies the proxy
        ev = agent("eval", "teacher", "--checkpoint", str(run / "teacher.pt"), "--episodes", "3",
                   "--envs", "3", "--json", *proxy)  # fmt: skip
        assert ev.returncode == 0, ev.stderr
        assert len(ev.stdout.splitlines()) == 1  # the progress goes to stderr
        assert "eval teacher: 3/3 episodes" in ev.stderr
        report = json.loads(ev.stdout)
        assert report["episodes"] == 3 and report["sim"] == "mujoco" and report["proxy"] == bool(proxy)
        lo, hi = report["ci95"]
        assert 0.0 <= lo <= report["success_rate"] <= hi <= 1.0
        assert isinstance(report["mean_return"], float)
        # what it measured: the teacher, the configs and the seeds
        pt = run / "teacher.pt"
        assert report["teacher"] == {"path": str(pt), "sha256": sha256_file(pt), "chosen": "given"}
        assert report["seeds"] == {"first": 10_000, "count": 3}
        assert report["sim_config"]["path"] == "sim/configs/mujoco.yaml"
        if proxy:
            hashes[proxy[0]] = report["proxy_config"]["sha256"]
            default = len(proxy) == 1
            assert report["proxy_config"]["path"] == ("sim/configs/proxy.yaml" if default else str(other))
        else:
            assert report["proxy_config"] is None
    assert len(set(hashes.values())) == 2


def test_eval_teacher_defaults_to_the_teacher_the_committed_student_was_distilled_from():
    ev = agent("eval", "teacher", "--episodes", "2", "--envs", "2")
    assert ev.returncode == 0, ev.stderr
    assert "2 episodes on the clean sim, seeds 10000-10001" in ev.stdout
    distilled = "sim/robots/diffbot/teacher_view_memory_obstacles_wide/teacher.pt"
    assert f"teacher {distilled}" in ev.stdout and "distilled from" in ev.stdout


def test_eval_teacher_without_a_checkpoint_fails_with_one_clear_line(tmp_path):
    ev = agent("eval", "teacher", "--checkpoint", str(tmp_path / "none.pt"), "--json")
    assert ev.returncode == 2
    assert "none.yaml" in ev.stderr and "Traceback" not in ev.stderr


def test_a_count_out_of_range_is_one_clear_line_naming_the_option():
    """--episodes 0 used to play one episode and then fail on its bookkeeping; --envs 0 ran one env."""
    ev = agent("eval", "student", "--episodes", "0")
    assert ev.returncode == 2 and "Traceback" not in ev.stderr
    assert "argument --episodes: expected an integer >= 1, got 0" in ev.stderr


STUDENT_QUICK = Path(__file__).parents[2] / "opd" / "configs" / "student_quick.yaml"


@pytest.mark.parametrize(
    "args, words",
    [
        (("student", "opd.gate.budgett=0.05"), "opd.gate.budgett = 0.05: Extra inputs are not permitted; "
                                               "did you mean budget"),
        (("student", "--steps", "8", "total_steps=9"), "'total_steps=9' and 'total_steps=8' both set"),
        (("teacher", "demos.episodes=-1"), "demos.episodes = -1: Input should be greater than or equal to 0"),
        (("teacher", "--quick", "--config", "x.yaml"), "--config: not allowed with argument --quick"),
    ],
)  # fmt: skip
def test_a_bad_override_is_one_clear_line_naming_the_field_before_anything_runs(tmp_path, args, words):
    out = agent("train", *args, "--out", str(tmp_path / "run"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert words in out.stderr and not (tmp_path / "run").exists()


def test_train_student_on_isaac_sim_without_it_fails_with_one_clear_line(tmp_path):
    if importlib.util.find_spec("isaacsim") is not None:
        pytest.skip("Isaac Sim is installed here: the command would train")
    out = agent("train", "student", "--sim", "isaacsim", "--steps", "8", "--out", str(tmp_path / "run"))
    assert out.returncode == 2
    assert "isaacsim" in out.stderr and "pip install" in out.stderr and "Traceback" not in out.stderr


def test_train_student_then_resume_then_eval_it(tmp_path):
    run = tmp_path / "run"
    out = agent("train", "student", "--quick", "--steps", "64", "--out", str(run), "opd.gate.budget=0.4")
    assert out.returncode == 0, out.stderr
    for name in ("student.pt", "artifact/manifest.json", "history.jsonl", "config.yaml"):
        assert (run / name).is_file(), name
    assert "resumed" not in out.stderr
    resolved = yaml.safe_load((run / "config.yaml").read_text())  # the run's config holds the override
    assert (resolved["opd"]["gate"]["budget"], resolved["total_steps"]) == (0.4, 64)
    assert resolved["student_config"] == yaml.safe_load(STUDENT_QUICK.read_text())["student_config"]
    out = agent("train", "student", "--quick", "--steps", "128", "--out", str(run), "opd.gate.budget=0.4")
    assert out.returncode == 0, out.stderr
    assert "resumed from" in out.stderr and "at step 64" in out.stderr
    steps = [json.loads(line)["step"] for line in (run / "history.jsonl").read_text().splitlines()]
    assert steps == [32, 64, 96, 128]
    ev = agent("eval", "student", "--artifact", str(run / "artifact"), "--episodes", "2", "--envs", "2",
               "--json")  # fmt: skip
    assert ev.returncode == 0, ev.stderr
    report = json.loads(ev.stdout)
    lo, hi = report["ci95"]
    assert report["episodes"] == 2 and 0.0 <= lo <= report["success_rate"] <= hi <= 1.0
    art = report["artifact"]  # which student: its manifest's hash names this export
    assert art["path"] == str(run / "artifact")
    assert art["manifest_sha256"] == sha256_file(run / "artifact" / "manifest.json")


@pytest.fixture(scope="module")
def quick_transfer(tmp_path_factory) -> tuple[tuple[str, ...], dict, float]:
    """`agent eval transfer --quick --json` run once by the local executor (minutes): its arguments (--out
    last), its report and its seconds."""
    out = tmp_path_factory.mktemp("quick") / "transfer"
    args = ("eval", "transfer", "--quick", "--json", "--out", str(out))
    t0 = time.monotonic()
    first = agent(*args, timeout=600)
    assert first.returncode == 0, first.stderr
    return args, json.loads(first.stdout), time.monotonic() - t0


@pytest.mark.slow
def test_eval_transfer_quick_reports_every_method_and_resumes(quick_transfer, tmp_path):
    args, report, first_s = quick_transfer
    out = Path(args[-1])
    assert list(report["methods"]) == ["sim_only", "dagger", "novelty", "opd"]
    for m in report["methods"].values():
        lo, hi = m["ci95"]
        assert 0.0 <= lo <= m["success_rate"] <= hi <= 1.0 and m["episodes"] == 8
        assert m["labels"] > 0 and m["wall_clock_s"] > 0 and 0.0 <= m["intervention_rate_last20"] <= 1.0
    assert report["methods"]["dagger"]["teacher_decisions"] < report["methods"]["opd"]["teacher_decisions"]
    assert report["teacher"]["episodes"] == 8 and len(report["teacher"]["ci95"]) == 2
    derived = {"opd_gap_closed", "gap_split", "opd_transfer_won_back", "opd_vs_sim_only_dr", "opd_vs_dagger",
               "opd_vs_novelty", "variants"}  # fmt: skip
    assert set(report["derived"]) == derived and report["derived"]["variants"] == {}  # none was run
    # the clean-sim references, evaluated on the same 8 seeds (and cached: the rerun below redoes nothing)
    split = report["derived"]["gap_split"]
    assert report["methods"]["sim_only"]["clean"]["episodes"] == report["teacher"]["clean"]["episodes"] == 8
    assert split["transfer"] == pytest.approx(
        split["sim_only_clean"] - report["methods"]["sim_only"]["success_rate"]
    )
    assert report["command"] == "agent " + " ".join(args)
    assert json.loads((out / "report" / "results.json").read_text()) == report
    md = (out / "report" / "report.md").read_text()
    assert "| opd |" in md and "| teacher |" in md and "last 20% of training" in md
    for plot in ("success.png", "training.png", "pred_error.png"):
        assert (out / "report" / plot).stat().st_size > 1000
    history = (out / "opd" / "history.jsonl").read_text()

    t0 = time.monotonic()
    again = agent(*args, timeout=600)  # the same command: everything is there, nothing is retrained
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - t0 < first_s / 3
    assert json.loads(again.stdout) == report
    assert (out / "opd" / "history.jsonl").read_text() == history
    assert json.loads((out / "opd" / "wall_clock.json").read_text())["runs"] == 1

    human = agent("eval", "transfer", "--quick", "--out", str(out), "--report", str(tmp_path / "rep"))
    assert human.returncode == 0, human.stderr
    assert "opd" in human.stdout and "teacher" in human.stdout and "sim-only-to-teacher gap" in human.stdout
    assert (tmp_path / "rep" / "report.md").is_file()


@pytest.mark.slow
def test_eval_transfer_on_a_ray_cluster_of_2_workers_reports_what_the_local_executor_does(
    quick_transfer, tmp_path
):
    """OPD trained beside the teacher's evaluations and then evaluated, on Ray; the rest of the quick
    benchmark's results kept from the local executor's run (to keep the test short) and not redone."""
    from ray.cluster_utils import Cluster

    local_args, local, _ = quick_transfer
    out = tmp_path / "transfer"
    shutil.copytree(local_args[-1], out, ignore=shutil.ignore_patterns("report"))
    for job in ("opd", "teacher"):  # its training and evaluation, the teacher's evaluations: to redo
        shutil.rmtree(out / job)
    kept = (out / "sim_only" / "eval.json").read_bytes()
    args = ("eval", "transfer", "--quick", "--json", "--out", str(out))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        on_ray = agent(*args, "--executor", "ray", "--address", cluster.address, timeout=600)
    finally:
        cluster.shutdown()
    assert on_ray.returncode == 0, on_ray.stderr
    assert "seed0/opd/train: done" in on_ray.stderr and "seed0/opd/eval: done" in on_ray.stderr
    assert (out / "sim_only" / "eval.json").read_bytes() == kept
    report = json.loads(on_ray.stdout)
    assert report["command"] == "agent " + " ".join(args)  # where the jobs ran is not what they made

    def results(report: dict) -> dict:  # all but the command (its --out) and how long each training took
        methods = {
            m: {k: v for k, v in r.items() if k != "wall_clock_s"} for m, r in report["methods"].items()
        }
        return {**report, "command": None, "methods": methods}

    assert results(report) == results(local)  # the same students, evaluated on the same episodes
    made = {name: (out / "report" / name).read_bytes() for name in ("results.json", "report.md")}
    again = agent(*args)  # the local executor on what Ray made: everything kept, the same bytes
    assert again.returncode == 0, again.stderr
    assert again.stdout == on_ray.stdout
    assert {name: (out / "report" / name).read_bytes() for name in made} == made


def test_arm_without_a_running_stack_fails_with_one_clear_line(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", "201")  # a domain no test graph uses (tests/ros2 take 1..100)
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    out = agent("arm", "--namespace", "nowhere", "--timeout", "1", timeout=60)
    assert out.returncode == 2
    assert "agent arm: error: /nowhere/opd/get_state: no such service" in out.stderr
