"""Student training in-process on the MuJoCo proxy with a tiny student: outputs, determinism, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from opd.student.trainer import StudentTrainConfig, StudentTrainer, resolve
from policies.artifact import sha256_file
from policies.config import PROJECT_ROOT, from_root
from policies.teacher_policy import load_teacher
from sim.config import SimConfig

TINY_STUDENT = {
    "encoder": {
        "image": {"backbone": "resnet18", "stages": 1, "height": 32, "width": 32},
        "imu": {"window": 100, "conv_channels": [8, 16]},
        "fusion": {"dim": 32, "heads": 4, "queries": 2},
        "embed_dim": 32,
    },
    "head": {"hidden": [32]},
}


def tiny(tmp_path: Path, **overrides: object) -> StudentTrainConfig:
    student = tmp_path / "student_tiny.yaml"
    student.write_text(yaml.safe_dump(TINY_STUDENT))
    data = {
        "student_config": str(student), "num_envs": 2, "total_steps": 240, "learning_starts": 32,
        "updates_per_step": 0.1, "checkpoint_every": 120, "log_every": 60, "threads": 1,
        "opd": {"distill": {"batch_size": 16, "capacity": 400},
                "gate": {"budget": 0.5, "budget_min_samples": 20, "budget_window": 200}},
        **overrides,
    }  # fmt: skip
    return StudentTrainConfig.from_dict(data)


def history(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("method", ["opd", "novelty", "opd_novelty", "dagger", "sim_only", "sim_only_dr"])
def test_every_method_trains_and_writes_the_student(tmp_path: Path, method: str) -> None:
    from sim.real_robot_proxy import ProxyConfig, RealRobotProxy

    out = tmp_path / method
    trainer = StudentTrainer(tiny(tmp_path, method=method), out)
    # sim_only: the clean sim; sim_only_dr: the sim randomised over its own look and dynamics; the others
    # adapt on the "real" robot
    proxy = {"sim_only": None, "sim_only_dr": "sim/configs/proxy_dr.yaml"}.get(
        method, "sim/configs/proxy.yaml"
    )
    robot = trainer.robot
    assert (robot.cfg if isinstance(robot, RealRobotProxy) else None) == (
        None if proxy is None else ProxyConfig.from_yaml(from_root(proxy))
    )
    assert trainer.run() == out / "student.pt"
    rows = history(out)
    assert rows[-1]["step"] == 240 and rows[-1]["updates"] > 0 and rows[-1]["labels"] > 0
    assert sum(rows[-1]["train_outcomes"].values()) == rows[-1]["episodes"]  # every finished one, by outcome
    if method in ("opd", "novelty", "opd_novelty"):  # the gate's rulings, cumulative: one per decision
        assert sum(rows[-1]["gate_counts"].values()) == 240
    assert "loss/skill_kl" in rows[-1] and "loss/state_pred" in rows[-1]
    meta = yaml.safe_load((out / "student.yaml").read_text())
    assert meta["method"] == method and meta["predictor"]["out_dim"] == 25  # the robot's privileged fields
    if method in ("dagger", "sim_only", "sim_only_dr"):
        assert rows[-1]["teacher_steps"] < 2 * 6  # only before each env's first frame
    torch.load(out / "student.pt", weights_only=True)
    state = torch.load(sorted((out / "checkpoints").glob("step_*.pt"))[-1], weights_only=True)
    # only the gate that reads both signals keeps their recent values, so that a resume maps alike
    assert (state["learner"]["signal_mix"] is not None) == (method == "opd_novelty")
    if method == "opd_novelty":  # every takeover on the gate's signal, by the uncertainty that set it
        led = rows[-1]["gate_led"]
        assert sum(led.values()) == rows[-1]["gate_counts"].get("teacher/error_above_threshold", 0) > 0


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_seeded_runs_match(tmp_path: Path, precision: str) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    opd = {"distill": {"batch_size": 16, "capacity": 400, "precision": precision},
           "gate": {"budget": 0.5, "budget_min_samples": 20, "budget_window": 200}}  # fmt: skip
    StudentTrainer(tiny(tmp_path, opd=opd), a).run()
    StudentTrainer(tiny(tmp_path, opd=opd), b).run()
    speed = [{k: v for k, v in row.items() if k != "steps_per_s"} for row in history(a)]
    assert speed == [{k: v for k, v in row.items() if k != "steps_per_s"} for row in history(b)]
    sa, sb = torch.load(a / "student.pt"), torch.load(b / "student.pt")
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_rerunning_the_command_resumes_from_the_last_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    StudentTrainer(tiny(tmp_path, total_steps=120), out).run()
    first = history(out)[-1]
    seconds = yaml.safe_load((out / "student.yaml").read_text())["train_seconds"]
    assert seconds > 0
    resumed = StudentTrainer(tiny(tmp_path), out)  # the same command with the full budget
    resumed.run()
    assert resumed.train_seconds > seconds  # the first run's seconds carried over from the checkpoint
    rows = history(out)
    assert [r["step"] for r in rows] == [60, 120, 180, 240]
    # training flushed denormal floats on this thread, and restored them: later float code is unaffected
    assert (torch.tensor(1e-39) * 0.5).item() != 0.0
    assert rows[-1]["updates"] > first["updates"] and rows[-1]["labels"] > first["labels"]


def test_a_resumed_run_logs_episode_means_over_the_episodes_before_its_checkpoint_too(tmp_path: Path) -> None:
    """The logged episode means are over the newest 100 episodes: a resume that forgot them would log the
    next means over the few episodes finished since, a jump that looks like a change of the student."""
    out = tmp_path / "run"
    first = StudentTrainer(tiny(tmp_path, total_steps=120), out)
    first.run()
    finished = [{"success": i % 3 > 0, "outcome": "success" if i % 3 else "collision", "steps": 40 + i,
                 "intervention_rate": i / 100, "switches_per_min": 1.5, "skill_agreement": 0.9,
                 "param_error": 0.01, "pred_error": [0.5, float("nan"), 0.7]} for i in range(7)]  # fmt: skip
    first.episodes.extend(finished)
    first.outcomes.update(e["outcome"] for e in finished)
    first.save_checkpoint()
    resumed = StudentTrainer(tiny(tmp_path), out)
    resumed._resume()
    assert resumed.outcomes == first.outcomes and resumed.outcomes["collision"] >= 3  # the run's counts go on
    got = list(resumed.episodes)[-7:]
    assert [e["outcome"] for e in got] == [e["outcome"] for e in finished]
    assert [e["intervention_rate"] for e in got] == [e["intervention_rate"] for e in finished]
    assert got[3]["pred_error"][0] == 0.5 and got[3]["pred_error"][1] != got[3]["pred_error"][1]  # NaN kept
    assert len(resumed.episodes) == len(first.episodes)
    # a checkpoint older than the counts: the run's totals are unknown, not restarted from zero
    ckpt = sorted((out / "checkpoints").glob("step_*.pt"))[-1]
    state = torch.load(ckpt, weights_only=True)
    del state["outcomes"]
    torch.save(state, ckpt)
    older = StudentTrainer(tiny(tmp_path), out)
    older._resume()
    assert older.outcomes is None


def test_a_resumed_run_does_not_repeat_the_history_logged_after_its_last_checkpoint(tmp_path: Path) -> None:
    """A run killed between a log line and the next checkpoint (or a checkout with a committed history and
    no checkpoint) resumes from the checkpoint: the lines past it are dropped, not logged twice."""
    out = tmp_path / "run"
    StudentTrainer(tiny(tmp_path, total_steps=120), out).run()
    with (out / "history.jsonl").open("a") as f:  # logged at 180 by a run killed before checkpointing
        f.write(json.dumps({"step": 180, "updates": 1}) + "\n" + '{"step": 24')  # and a line cut short
    StudentTrainer(tiny(tmp_path), out).run()
    assert [r["step"] for r in history(out)] == [60, 120, 180, 240]
    fresh = tmp_path / "fresh"  # a committed history, its checkpoints left behind in another checkout
    fresh.mkdir()
    (fresh / "history.jsonl").write_text((out / "history.jsonl").read_text())
    StudentTrainer(tiny(tmp_path, total_steps=120), fresh).run()
    assert [r["step"] for r in history(fresh)] == [60, 120]


def test_a_crash_mid_write_leaves_the_last_checkpoint_loadable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    StudentTrainer(tiny(tmp_path, total_steps=120), out).run()
    ckpt = out / "checkpoints"
    (ckpt / "step_000000180.tmp").write_bytes(b"half a checkpoint")  # a crash between write and rename
    trainer = StudentTrainer(tiny(tmp_path), out)
    trainer._resume()
    assert trainer.steps == 120


class Killed(Exception):
    """A kill during `torch.save` of a checkpoint."""


def test_a_kill_while_writing_a_checkpoint_leaves_the_last_one_with_its_own_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store used to be one file, replaced before the checkpoint's .pt: a kill between them left the
    last checkpoint beside a newer store, and the resume went on from a mix of the two."""
    out = tmp_path / "run"
    StudentTrainer(tiny(tmp_path, total_steps=120), out).run()
    held = StudentTrainer(tiny(tmp_path), out)
    held._resume()
    save = torch.save

    def killed(obj: object, f: object, *args: object, **kwargs: object) -> None:
        if ".tmp" in Path(str(f)).name:  # the checkpoint's temporary (policies.files.atomic_path)
            raise Killed
        save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(Killed):
        StudentTrainer(tiny(tmp_path), out).run()  # killed writing the checkpoint at 240
    monkeypatch.setattr(torch, "save", save)
    resumed = StudentTrainer(tiny(tmp_path), out)
    resumed._resume()
    assert resumed.steps == 120 and len(resumed.learner.store) == len(held.learner.store)
    assert resumed.learner.store.added == held.learner.store.added


def test_a_resume_under_another_config_or_below_its_checkpoint_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    StudentTrainer(tiny(tmp_path, total_steps=120), out).run()
    written = (out / "config.yaml").read_text()
    # the method sets the gate's switch: the resolved configs differ in both
    changed = r"\(method: 'opd' -> 'dagger'; opd.switch: 'predictor' -> 'student'; seed: 0 -> 7\)"
    with pytest.raises(ValueError, match=changed):
        StudentTrainer(tiny(tmp_path, method="dagger", seed=7), out).run()
    with pytest.raises(ValueError, match=r"opd.distill.lr: 0.0003 -> 0.001"):
        StudentTrainer(
            tiny(tmp_path, opd={"distill": {"batch_size": 16, "capacity": 400, "lr": 1e-3}}), out
        ).run()
    with pytest.raises(ValueError, match="at step 120, past the 60 steps asked for"):
        StudentTrainer(tiny(tmp_path, total_steps=60), out).run()
    assert (out / "config.yaml").read_text() == written  # the refused configs were never recorded
    # the same command again once done: the last loop ran past --steps by less than one step per env
    done = tmp_path / "done"
    StudentTrainer(tiny(tmp_path, total_steps=61), done).run()
    assert StudentTrainer(tiny(tmp_path, total_steps=61), done).run() == done / "student.pt"
    # how long it goes on, how often it logs, its threads and start may change
    go_on = StudentTrainer(tiny(tmp_path, log_every=120, threads=2, init_from="elsewhere"), out)
    go_on._resume()
    assert go_on.steps == 120


def test_a_run_saves_the_config_it_ran_and_restarted_from_it_makes_the_same_decisions(tmp_path: Path) -> None:
    """The saved config used to be the given one, derived values rewritten after it was saved: a DAgger
    run's said `switch: predictor` (it gated with `student`) and `history: 5` (its windows were the head's
    memory). Now it is resolved once, saved, and run as saved."""
    memory = tmp_path / "student_memory.yaml"
    memory.write_text(yaml.safe_dump({**TINY_STUDENT, "memory": {"frames": 8, "hidden": 16}}))
    given = tiny(tmp_path, method="dagger", student_config=str(memory), total_steps=120)
    assert (given.opd.switch, given.opd.align.history, given.opd.predictor.in_dim) == ("predictor", 5, None)
    first = StudentTrainer(given, tmp_path / "first")
    first.run()
    saved = StudentTrainConfig.from_yaml(tmp_path / "first" / "config.yaml")
    opd = saved.opd
    assert opd.switch == "student" and opd.align.period_s == 0.05  # the method's switch; 20 Hz control
    assert (opd.align.history, opd.align.horizon) == (8, opd.predictor.horizon)  # the head's 8 frames
    assert (opd.predictor.in_dim, opd.predictor.out_dim) == (32, 25)  # embedding in, privileged state out
    assert first.learner.cfg == opd  # what ran is what was saved ...
    assert (first.learner.align, first.learner.predictor_cfg) == (opd.align, opd.predictor)
    assert resolve(saved) == saved  # ... with nothing left to derive
    checkpoint = sorted((tmp_path / "first" / "checkpoints").glob("step_*.yaml"))[-1]
    assert StudentTrainConfig.from_yaml(checkpoint) == saved
    again = StudentTrainer(saved, tmp_path / "again")
    again.run()

    def decisions(out: Path) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "steps_per_s"} for row in history(out)]

    assert decisions(tmp_path / "again") == decisions(tmp_path / "first")
    a, b = torch.load(tmp_path / "first" / "student.pt"), torch.load(tmp_path / "again" / "student.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_corrupt_checkpoint_or_store_is_one_error_naming_the_file(tmp_path: Path) -> None:
    out = tmp_path / "run"
    StudentTrainer(tiny(tmp_path, total_steps=120), out).run()
    ckpt = out / "checkpoints"
    store = ckpt / "store_000000120.npz"
    store.write_bytes(store.read_bytes()[:1000])  # cut short
    with pytest.raises(ValueError, match="store_000000120.npz: not a readable sample store"):
        StudentTrainer(tiny(tmp_path), out)._resume()
    (ckpt / "step_000000120.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="step_000000120.pt: not a readable torch file") as err:
        StudentTrainer(tiny(tmp_path), out)._resume()
    assert "weights_only=False" not in str(err.value)  # never the advice to load arbitrary code


def test_a_run_can_start_from_a_shipped_student_and_refuses_another_architecture(tmp_path: Path) -> None:
    base = StudentTrainer(tiny(tmp_path, total_steps=120), tmp_path / "base")
    base.run()
    artifact = base.export_artifact()
    tuned = StudentTrainer(tiny(tmp_path, total_steps=120, init_from=str(artifact)), tmp_path / "tuned")
    tuned._resume()  # a fresh run: starts from the artifact's weights, not random ones
    shipped = torch.load(artifact / "student.pt", weights_only=True)
    assert all(torch.equal(v, tuned.learner.get_policy()[0].state_dict()[k]) for k, v in shipped.items())
    assert tuned.learner.steps == 0
    tuned.run()
    meta = yaml.safe_load((tmp_path / "tuned" / "student.yaml").read_text())
    assert meta["init_from"]["artifact"] == str(artifact) and len(meta["init_from"]["manifest_sha256"]) == 64
    assert meta["init_from"]["weights_sha256"] == sha256_file(artifact / "student.pt")  # the start's identity
    wider = {**TINY_STUDENT, "head": {"hidden": [48]}}
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(wider))
    mismatched = tiny(tmp_path, init_from=str(artifact), student_config=str(other))
    refused = StudentTrainer(mismatched, tmp_path / "x")
    with pytest.raises(ValueError, match="student config"):
        refused._resume()


def test_a_checkpoint_exports_as_an_artifact_while_the_run_goes_on(tmp_path: Path) -> None:
    """`agent export --from-run RUN [--step N]`: the checkpoint's weights, deployable, the run untouched."""
    import subprocess
    import sys

    import numpy as np

    from opd.live.loading import default_teacher, teacher_record
    from opd.student.trainer import export_checkpoint
    from policies.artifact import Artifact
    from policies.runtime import load_student

    out = tmp_path / "run"
    StudentTrainer(tiny(tmp_path), out).run()  # checkpoints at 120 and 240 decisions
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*"))
    for step, name in ((120, "a120"), (None, "newest")):
        artifact = Artifact.load(export_checkpoint(out, tmp_path / name, step))
        ckpt = torch.load(out / "checkpoints" / f"step_{step or 240:09d}.pt", weights_only=True)["learner"]
        for part in ("student", "predictor"):
            exported = torch.load(artifact.path(artifact.manifest["weights"][part]), weights_only=True)
            assert exported.keys() == ckpt[part].keys()
            assert all(torch.equal(exported[k], ckpt[part][k]) for k in exported)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    source = artifact.manifest["weights_source"]  # the checkpoint named, not the deleted scratch copies
    assert source["predictor"] == str(out / "checkpoints" / "step_000000240.pt")
    assert (
        source["student"].startswith(source["predictor"]) and source["image_trunk"] == "the student weights"
    )
    camera = artifact.camera  # the camera it learnt from, at its image size, for a real camera to match
    assert camera is not None and (camera.height, camera.width) == artifact.image_hw
    teacher = tiny(tmp_path).teacher  # the teacher it was distilled from travels with it
    assert artifact.manifest["teacher"] == teacher_record(teacher)
    assert default_teacher(artifact) == from_root(teacher)
    rt = load_student(artifact, backend="onnxruntime")
    emb, _ = rt.encode(np.zeros((1, 32, 32, 3), np.uint8), np.zeros((1, rt.imu_window, 6), np.float32),
                       np.zeros(1, np.int64), np.zeros(1, np.float32), np.zeros(1, np.float32))  # fmt: skip
    assert emb.shape == (1, 32) and np.isfinite(emb).all()
    with pytest.raises(ValueError, match="no checkpoint at step 60"):
        export_checkpoint(out, tmp_path / "x", 60)
    cli = [sys.executable, "-m", "agent.cli", "export", "--from-run", str(out), "--out", str(tmp_path / "y")]
    done = subprocess.run([*cli, "--config", "c.yaml"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "not --config" in done.stderr and "Traceback" not in done.stderr


def test_a_novelty_gated_students_artifacts_carry_its_trained_ensemble(tmp_path: Path) -> None:
    """The run's artifact and a checkpoint's carry the ensemble the gate read while training, and a learner
    built from them (the opd node's, replay's) reads that one, in the artifact's shape; a run started from
    the artifact continues it where the shapes agree and starts its own afresh where not."""
    from opd.live.loading import load_learner
    from opd.student.trainer import export_checkpoint
    from policies.artifact import Artifact, ArtifactError

    out = tmp_path / "run"
    opd = {"distill": {"batch_size": 16, "capacity": 400}, "novelty": {"members": 3},
           "gate": {"budget": 0.5, "budget_min_samples": 20, "budget_window": 200}}  # fmt: skip
    cfg = tiny(tmp_path, method="novelty", opd=opd)
    trainer = StudentTrainer(cfg, out)
    trainer.run()
    trained = trainer.learner.acting_novelty.state_dict()
    ckpt = torch.load(out / "checkpoints" / f"step_{240:09d}.pt", weights_only=True)["learner"]["novelty"]
    opd_yaml = tmp_path / "opd.yaml"  # the deploying config's own ensemble shape: the artifact's wins
    opd_yaml.write_text(yaml.safe_dump({"opd": {"switch": "novelty", "novelty": {"members": 5}}}))
    exported = (trainer.export_artifact(), trained), (export_checkpoint(out, tmp_path / "ckpt"), ckpt)
    for root, want in exported:
        artifact = Artifact.load(root)
        assert artifact.manifest["config"]["novelty"]["members"] == 3
        learner = load_learner(artifact, cfg.teacher, opd_yaml, learning=False)
        got = learner.acting_novelty.state_dict()
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    for members, continued in ((3, True), (5, False)):
        shaped = {**opd, "novelty": {"members": members}}
        started = tiny(tmp_path, method="novelty", init_from=str(root), opd=shaped)
        tuned = StudentTrainer(started, tmp_path / f"t{members}")
        tuned._resume()
        got = tuned.learner.acting_novelty.state_dict()
        assert (got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)) == continued
        origin = json.loads((tmp_path / f"t{members}" / "init_from.json").read_text())
        assert origin["novelty"].startswith("the artifact's" if continued else "a fresh")
    (root / "novelty.pt").write_bytes((root / "novelty.pt").read_bytes()[:-8])  # a crash mid-copy, say
    with pytest.raises(ArtifactError, match="novelty.pt"):
        Artifact.load(root)
    plain = tmp_path / "opd_run"  # a method without the ensemble exports none
    opd_trainer = StudentTrainer(tiny(tmp_path, total_steps=120), plain)
    opd_trainer.run()
    assert "novelty" not in Artifact.load(opd_trainer.export_artifact()).manifest["weights"]


# the product's and the experiments' (docs/experiments/configs): a journal's command must still run
SHIPPED = sorted(
    p for d in ("opd/configs", "docs/experiments/configs") for p in (PROJECT_ROOT / d).glob("student*.yaml")
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_student_config_loads_with_its_student(path: Path) -> None:
    """A typo in a shipped config (or a student config it names that is gone) fails here, not hours into a
    run."""
    from policies.student_policy import StudentConfig

    cfg = StudentTrainConfig.from_yaml(path)  # each raises a ConfigError naming the bad field
    StudentConfig.from_yaml(from_root(cfg.student_config))  # resolved as the trainer resolves them
    SimConfig.from_yaml(from_root(cfg.sim_config))
    load_teacher(from_root(cfg.teacher))  # the committed teacher it names, with its view if it has one


def test_a_shipped_student_grows_a_memory_that_starts_as_it_acted_and_learns(tmp_path: Path) -> None:
    """init_from a student without memory into a run whose head has one: every shipped weight is kept, the
    new memory adds nothing at step 0 (same actions as the artifact), training moves it, and the result
    exports and deploys with windows; a memory of another length is refused."""
    import numpy as np

    from policies.runtime import load_student

    base = StudentTrainer(tiny(tmp_path, total_steps=120), tmp_path / "base")
    base.run()
    artifact = base.export_artifact()
    config = tmp_path / "memory.yaml"
    config.write_text(yaml.safe_dump({**TINY_STUDENT, "memory": {"frames": 6, "hidden": 8}}))
    cfg = tiny(tmp_path, total_steps=240, init_from=str(artifact), student_config=str(config),
               opd={"distill": {"batch_size": 16, "capacity": 400, "train_encoder": False},
                    "gate": {"budget": 0.5, "budget_min_samples": 20, "budget_window": 200}})  # fmt: skip
    tuned = StudentTrainer(cfg, tmp_path / "tuned")
    tuned._resume()
    shipped = load_student(artifact, "onnxruntime")
    frames = np.random.default_rng(0).normal(size=(5, 6, 32)).astype(np.float32)
    skill, params = tuned.learner.head_outputs(frames)
    want = shipped.act(frames[:, -1])
    np.testing.assert_array_equal(skill, want[1])
    np.testing.assert_allclose(params, want[2], atol=1e-5)
    tuned.robot.close()
    tuned = StudentTrainer(cfg, tmp_path / "tuned")
    tuned.run()
    memory = torch.load(tmp_path / "tuned" / "student.pt", weights_only=True)["memory.proj.weight"]
    assert memory.abs().sum() > 0  # it learnt
    rt = load_student(tuned.export_artifact(), "onnxruntime")
    assert rt.memory == 6 and rt.act_window(frames)[1].shape == (5,)
    again = tiny(tmp_path, init_from=str(tmp_path / "tuned" / "artifact"), student_config=str(config))
    config.write_text(yaml.safe_dump({**TINY_STUDENT, "memory": {"frames": 9, "hidden": 8}}))
    refused = StudentTrainer(again, tmp_path / "y")
    with pytest.raises(ValueError, match="student config"):
        refused._resume()


def with_image(tmp_path: Path, name: str, **image: int) -> str:
    """A copy of the tiny student config with other image sizes, as a file."""
    encoder = {**TINY_STUDENT["encoder"], "image": {**TINY_STUDENT["encoder"]["image"], **image}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**TINY_STUDENT, "encoder": encoder}))
    return str(path)


def test_a_shipped_student_starts_a_run_with_a_wider_camera(tmp_path: Path) -> None:
    """init_from an artifact whose camera is narrower at the same height: every weight is kept, the image
    position embedding keeps its columns at the centre, the run renders, learns and deploys the wider
    frame; a narrower or taller camera is refused."""
    import numpy as np

    from policies.image_encoder import widen_positions
    from policies.runtime import load_student

    base = StudentTrainer(tiny(tmp_path, total_steps=120), tmp_path / "base")
    base.run()
    artifact = base.export_artifact()
    pos = "encoder.image.pos"
    cfg = tiny(tmp_path, init_from=str(artifact), student_config=with_image(tmp_path, "wide", width=64))
    tuned = StudentTrainer(cfg, tmp_path / "wide")
    tuned._resume()
    shipped = torch.load(artifact / "student.pt", weights_only=True)
    state = tuned.learner.get_policy()[0].state_dict()
    assert state[pos].shape[1] == 2 * shipped[pos].shape[1]  # 8 x 16 tokens, not 8 x 8
    assert torch.equal(state[pos], widen_positions(shipped[pos], 8, 16))
    assert all(torch.equal(v, state[k]) for k, v in shipped.items() if k != pos)
    tuned.robot.close()
    tuned = StudentTrainer(cfg, tmp_path / "wide")
    tuned.run()
    assert not torch.equal(torch.load(tmp_path / "wide" / "student.pt", weights_only=True)[pos], state[pos])
    rt = load_student(tuned.export_artifact(), "onnxruntime")
    emb, _ = rt.encode(np.zeros((1, 32, 64, 3), np.uint8), np.zeros((1, rt.imu_window, 6), np.float32),
                       np.zeros(1, np.int64), np.zeros(1, np.float32), np.zeros(1, np.float32))  # fmt: skip
    assert rt.image_hw == (32, 64) and np.isfinite(emb).all()
    narrower = tiny(tmp_path, init_from=str(tmp_path / "wide" / "artifact"),
                    student_config=with_image(tmp_path, "narrow", width=32))  # fmt: skip
    taller = tiny(tmp_path, init_from=str(artifact), student_config=with_image(tmp_path, "tall", height=64))
    for i, refused in enumerate((narrower, taller)):
        with pytest.raises(ValueError, match="student config"):
            StudentTrainer(refused, tmp_path / f"refused{i}")._resume()


def test_an_artifact_deploys_with_the_teacher_it_was_distilled_from_or_refuses(tmp_path: Path) -> None:
    """Its predictor predicts what that teacher sees: another teacher in its place is refused, not used."""
    import shutil

    from opd.live.loading import DEFAULT_TEACHER, default_teacher, teacher_record
    from policies.artifact import Artifact

    teacher = tmp_path / "teacher.pt"
    shutil.copy(from_root("sim/robots/diffbot/teacher_view/teacher.pt"), teacher)
    assert default_teacher(Artifact(tmp_path, {})) == DEFAULT_TEACHER  # no record: the committed teacher
    artifact = Artifact(tmp_path, {"teacher": teacher_record(teacher)})
    assert default_teacher(artifact) == teacher
    teacher.write_bytes(teacher.read_bytes() + b"x")
    with pytest.raises(ValueError, match="has changed"):
        default_teacher(artifact)
    teacher.unlink()
    with pytest.raises(FileNotFoundError, match="missing"):
        default_teacher(artifact)


def test_a_buffer_period_that_is_not_the_robots_control_period_is_refused() -> None:
    """opd.align.period_s comes from the sim's control rate: given otherwise it is refused, not replaced."""
    from opd.student.trainer import StudentTrainConfig, resolve

    cfg = StudentTrainConfig.from_dict({"opd": {"align": {"period_s": 0.1}}})
    with pytest.raises(
        ValueError, match=r"opd.align.period_s = 0.1 is not the robot's control period \(0.05 s\)"
    ):
        resolve(cfg)
    assert resolve(cfg, check_given=False).opd.align.period_s == 0.05  # a saved config, compared
    assert (
        resolve(StudentTrainConfig.from_dict({"opd": {"align": {"period_s": 0.05}}})).opd.align.period_s
        == 0.05
    )
