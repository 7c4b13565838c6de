"""The OPD learner on a synthetic stream: alignment, the gate's choice, learning, a frozen teacher, resume."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from opd.distill.augment import random_shift
from opd.distill.config import OPDConfig
from opd.distill.learner import OnlineDistillation
from policies.export import DEFAULT_CONTRACT
from policies.skill_contract import SkillContract
from policies.student_policy import StudentConfig, StudentPolicy
from policies.teacher_policy import TeacherConfig, TeacherPolicy

DQ = 6  # teacher-side state width of the synthetic robot
PERIOD = 0.05
LATENCY = 0.12  # student frames arrive this late, s


@pytest.fixture(scope="module")
def contract() -> SkillContract:
    return SkillContract.load(DEFAULT_CONTRACT)


@pytest.fixture(scope="module")
def student_cfg() -> StudentConfig:
    return StudentConfig.from_dict({
        "encoder": {
            "image": {"backbone": "resnet18", "stages": 1, "height": 32, "width": 32},
            "imu": {"window": 32, "conv_channels": [8, 16]},
            "fusion": {"dim": 32, "heads": 4, "queries": 2},
            "embed_dim": 32,
        },
        "head": {"hidden": [32]},
    })  # fmt: skip


def make_learner(contract, student_cfg, n=2, seed=0, learning=True, **opd) -> OnlineDistillation:
    torch.manual_seed(seed)
    teacher = TeacherPolicy(DQ + contract.num_skills, contract, TeacherConfig(hidden=[16]))
    cfg = OPDConfig.from_dict({
        "distill": {"train_encoder": False, "batch_size": 16, "capacity": 500, "lr": 3e-3},
        "align": {"period_s": PERIOD},
        **opd,
    })  # fmt: skip
    student = StudentPolicy(student_cfg, contract)
    return OnlineDistillation(student, teacher, cfg, n, seed=seed, learning=learning)


def reload_into(
    learner: OnlineDistillation, fresh: OnlineDistillation, store: Path | None = None
) -> OnlineDistillation:
    """`fresh` after loading `learner`'s checkpoint through bytes, as a checkpoint goes (weights_only), with
    its sample store through the file `store` when given."""
    blob = io.BytesIO()
    torch.save(learner.save(store), blob)
    blob.seek(0)
    fresh.load(torch.load(blob, weights_only=True), store)
    return fresh


def state_at(t: np.ndarray) -> np.ndarray:
    """Synthetic privileged state at times t: smooth in t, so the future is predictable. Shape: (N, DQ)."""
    k = np.arange(DQ)
    return np.sin(np.asarray(t)[:, None] * (0.5 + k) + k).astype(np.float32)


def run(learner: OnlineDistillation, steps: int, t0: float = 0.0, embed_dim: int = 32) -> list:
    """Drive every env for `steps` periods: the teacher sees the state now, the student a frame taken
    LATENCY ago (its features: the state then, padded to the embedding width). Returns the decisions."""
    n = learner.num_envs
    decisions = []
    for k in range(steps):
        now = np.full(n, t0 + k * PERIOD)
        learner.observe_teacher(now, state_at(now), np.zeros(n, np.int64), now)
        stamp = now - LATENCY
        if stamp[0] >= 0 and k % 2 == 0:  # a camera slower than the control loop
            feats = np.zeros((n, embed_dim), np.float32)
            feats[:, :DQ] = state_at(stamp)
            feats[:, DQ] = stamp  # lets the tests find the frame's stamp in its sample
            learner.observe_student(np.arange(n), stamp, {"embedding": feats}, now)
        decisions.append(learner.act(now))
        learner.process_step(now + PERIOD, np.zeros(n, bool))
    return decisions


@pytest.mark.parametrize("lead", [0, 2])
def test_samples_pair_each_frame_with_the_teacher_at_its_stamp_not_its_arrival(contract, student_cfg, lead):
    distill = {"train_encoder": False, "batch_size": 16, "capacity": 500, "label_lead": lead}
    learner = make_learner(contract, student_cfg, distill=distill)
    run(learner, 60)
    n, rows = len(learner.store), learner.store.arrays
    assert n > 20
    stamps = rows["embedding"][:n, DQ]  # run() writes each frame's stamp there
    assert np.all(stamps <= 60 * PERIOD - LATENCY)

    def nearest_teacher(t: np.ndarray) -> np.ndarray:  # the teacher acts on the period grid
        return np.round(t / PERIOD) * PERIOD

    for h in range(3):  # the predictor's targets: the teacher's states h + 1 periods after the frame's stamp
        target = nearest_teacher(stamps + (h + 1) * PERIOD)
        assert np.all(np.abs(target - stamps - (h + 1) * PERIOD) <= learner.align.tolerance_s)
        expect = (state_at(target) - learner.state_mean) / learner.state_std
        ok = rows["future_mask"][:n, h]
        assert ok.mean() > 0.9
        np.testing.assert_allclose(rows["future"][:n, h][ok], expect[ok], atol=1e-5)
    # the label is the teacher's action on the state at the frame's stamp, LATENCY before it arrived, or
    # with a lead that many periods later (when the student acts on the frame)
    at = nearest_teacher(stamps + lead * PERIOD)
    skill, params = learner.teacher.act(
        np.concatenate([state_at(at), np.tile(np.eye(contract.num_skills)[0], (n, 1))], axis=1)
    )
    ok = rows["future_mask"][:n, lead - 1] if lead else np.ones(n, bool)
    np.testing.assert_array_equal(rows["teacher_skill"][:n][ok], skill[ok])
    np.testing.assert_allclose(rows["teacher_params"][:n][ok], params[ok], atol=1e-6)
    if lead:  # the teacher's actions differ between the two times: the test can tell them apart
        assert not np.allclose(
            params,
            learner.teacher.act(
                np.concatenate(
                    [state_at(nearest_teacher(stamps)), np.tile(np.eye(contract.num_skills)[0], (n, 1))],
                    axis=1,
                )
            )[1],
        )


def test_a_label_lead_beyond_the_predictor_horizon_is_refused():
    with pytest.raises(ValueError, match="label_lead"):
        OPDConfig.from_dict({"distill": {"label_lead": 4}, "predictor": {"horizon": 3}})


def test_the_gate_picks_the_teacher_on_high_error_and_the_student_otherwise(contract, student_cfg):
    high = make_learner(contract, student_cfg,
                        gate={"threshold_start": 1e-6, "threshold_end": 1e-6, "disagree_s": 0})  # fmt: skip
    decisions = run(high, 40)
    assert decisions[-1].use_teacher.all()
    assert high.gate.counts["teacher/error_above_threshold"] > 0
    # the skill-disagreement override off: an untrained student disagrees with the teacher
    low = make_learner(
        contract, student_cfg, gate={"threshold_start": 1e6, "threshold_end": 1e6, "disagree_s": 0}
    )
    decisions = run(low, 40)
    assert not decisions[-1].use_teacher.any()
    np.testing.assert_array_equal(decisions[-1].skill, low.env.student_skill)


def test_without_student_or_teacher_the_safe_action_goes_out(contract, student_cfg):
    learner = make_learner(contract, student_cfg)
    d = learner.act(np.zeros(2))
    assert (d.skill == contract.safe_skill_id).all()
    assert d.reason == ("no_input_safe_action",) * 2
    now = np.zeros(2)
    learner.observe_teacher(now, state_at(now), np.zeros(2, np.int64), now)
    d = learner.act(now)
    assert d.use_teacher.all()  # no student frame yet: the teacher drives


def test_dagger_never_executes_the_teacher(contract, student_cfg):
    learner = make_learner(contract, student_cfg, switch="student")
    decisions = run(learner, 40)
    first_frame = next(k for k in range(40) if k * PERIOD >= LATENCY and k % 2 == 0)  # as run() sends them
    assert all(d.use_teacher.all() for d in decisions[:first_frame])  # until then the teacher drives
    assert not any(d.use_teacher.any() for d in decisions[first_frame:])
    assert len(learner.store) > 0  # the teacher still labels


def test_losses_fall_and_the_teacher_stays_frozen(contract, student_cfg):
    learner = make_learner(contract, student_cfg)
    teacher_before = {k: v.clone() for k, v in learner.teacher.state_dict().items()}
    run(learner, 200)
    first = learner.update()
    for _ in range(300):
        last = learner.update()
    assert last["loss/state_pred"] < 0.5 * first["loss/state_pred"]
    assert last["loss/skill_kl"] + last["loss/params"] < 0.5 * (first["loss/skill_kl"] + first["loss/params"])
    for k, v in learner.teacher.state_dict().items():
        assert torch.equal(v, teacher_before[k]), f"teacher {k} changed"
    assert not any(p.requires_grad for p in learner.teacher.parameters())
    optimised = {id(p) for g in learner.optimizer.param_groups for p in g["params"]}
    assert not optimised & {id(p) for p in learner.teacher.parameters()}


def test_acting_uses_a_copy_that_only_sync_refreshes(contract, student_cfg):
    learner = make_learner(contract, student_cfg, distill={"train_encoder": False, "batch_size": 16,
                                                           "sync_every": 1000})  # fmt: skip
    run(learner, 100)
    before = [p.clone() for p in learner.acting.parameters()]
    for _ in range(5):
        learner.update()
    assert all(torch.equal(a, b) for a, b in zip(before, learner.acting.parameters(), strict=True))
    learner.sync_policy()
    assert not all(torch.equal(a, b) for a, b in zip(before, learner.acting.parameters(), strict=True))


@pytest.mark.parametrize("switch", ["novelty", "predictor_novelty"])
def test_acting_state_carries_the_ensemble_a_novelty_gate_reads(contract, student_cfg, switch):
    """A node's acting learner never updates: the learner process's ensemble must reach it with the
    student and predictor, or its gate would read an untrained ensemble's disagreement."""
    learner = make_learner(contract, student_cfg, switch=switch)
    run(learner, 100)
    for _ in range(5):
        learner.update()
    learner.sync_policy()
    node = make_learner(contract, student_cfg, seed=1, learning=False, switch=switch)
    untrained = {k: v.clone() for k, v in node.acting_novelty.state_dict().items()}
    node.set_acting(learner.acting_state())
    got, want = node.acting_novelty.state_dict(), learner.acting_novelty.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert any(not torch.equal(got[k], untrained[k]) for k in want)
    emb = torch.randn(3, 32)
    assert torch.equal(node.acting_novelty.disagreement(emb), learner.acting_novelty.disagreement(emb))


def test_acting_goes_on_while_a_learner_thread_updates(contract, student_cfg):
    learner = make_learner(contract, student_cfg)
    run(learner, 100)
    stop, errors = threading.Event(), []

    def learn() -> None:
        try:
            while not stop.is_set():
                learner.update()
        except Exception as err:  # noqa: BLE001 - reported to the test
            errors.append(err)

    thread = threading.Thread(target=learn)
    thread.start()
    try:
        decisions = run(learner, 40, t0=100 * PERIOD)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert learner.updates > 0
    assert all(np.isfinite(d.params).all() for d in decisions)


def test_non_finite_frames_are_refused_and_never_act(contract, student_cfg):
    learner = make_learner(contract, student_cfg, n=1)
    now = np.array([1.0])
    learner.observe_teacher(now, state_at(now), np.zeros(1, np.int64), now)
    bad = np.full((1, 32), np.nan, np.float32)
    learner.observe_student(np.array([0]), now - LATENCY, {"embedding": bad}, now)
    assert learner.buffers[0].counts["nonfinite"] == 1
    assert not learner.env.has_student[0]
    assert learner.act(now).use_teacher[0]  # the teacher drives, not a NaN student


def test_save_then_load_restores_learning_exactly(contract, student_cfg, tmp_path):
    """Weights, optimiser, counters, the gate's calibration and the sample store (its own file) come back:
    the next update is the same. The episode does not: every env of the loaded learner begins afresh."""
    a = make_learner(contract, student_cfg)
    run(a, 120)
    for _ in range(5):
        a.update()
    a.gate._teacher[:] = True  # a takeover in progress when the checkpoint was written
    b = reload_into(a, make_learner(contract, student_cfg, seed=1), tmp_path / "store.npz")
    assert b.stats() == a.stats() and b.stats()["samples"] > 0
    assert not b.gate.state_dict()["teacher"][0]  # no takeover carries over
    la, lb = a.update(), b.update()
    assert la == lb
    for pa, pb in zip(a.student.parameters(), b.student.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_a_learner_that_keeps_no_samples_refuses_to_save_or_take_any(contract, student_cfg, tmp_path):
    """`learning=False` (the node's acting learner, replay) keeps no store: asking it for one is a bug of
    the caller, said, not a silent empty file."""
    acting = make_learner(contract, student_cfg, learning=False)
    assert "samples" not in acting.stats()
    with pytest.raises(RuntimeError, match="learning=False"):
        acting.save(tmp_path / "store.npz")
    with pytest.raises(RuntimeError, match="learning=False"):
        acting.add_sample({}, 0)
    assert not (tmp_path / "store.npz").exists()


def test_a_checkpoint_of_another_config_is_refused(contract, student_cfg):
    a = make_learner(contract, student_cfg)
    other = student_cfg.model_copy(update={"head": student_cfg.head.model_copy(update={"hidden": [8]})})
    b = make_learner(contract, other)
    with pytest.raises(ValueError, match="does not fit"):
        b.load(a.save())


def test_episode_metrics_are_reported_when_an_episode_ends(contract, student_cfg):
    learner = make_learner(contract, student_cfg, n=1)
    run(learner, 40)
    now = np.array([40 * PERIOD])
    (summary,) = learner.process_step(now, np.array([True]), ["success"])
    assert summary["success"] and summary["steps"] == 40
    assert 0 <= summary["intervention_rate"] <= 1 and 0 <= summary["skill_agreement"] <= 1
    assert len(summary["pred_error"]) == 3 and all(e > 0 for e in summary["pred_error"])
    assert not learner.env.has_student[0]  # the next episode starts afresh


def test_a_learner_that_never_learns_decides_and_measures_as_one_that_does_without_a_store(
    contract, student_cfg
):
    """learning=False (offline replay, a node with `learn` off): the same decisions and episode metrics,
    no sample store to fill, and an update is refused rather than silently doing nothing."""
    learning, acting = make_learner(contract, student_cfg, n=1), make_learner(contract, student_cfg, n=1,
                                                                             learning=False)  # fmt: skip
    a, b = run(learning, 40), run(acting, 40)
    assert [(d.use_teacher.tolist(), d.reason, d.skill.tolist()) for d in a] == [
        (d.use_teacher.tolist(), d.reason, d.skill.tolist()) for d in b]  # fmt: skip
    np.testing.assert_array_equal(np.stack([d.params for d in a]), np.stack([d.params for d in b]))
    done = np.array([True])
    (want,), (got,) = (x.process_step(np.array([40 * PERIOD]), done, ["success"]) for x in (learning, acting))
    assert got == want and len(learning.store) > 0 and acting.store is None
    with pytest.raises(RuntimeError, match="learning=False"):
        acting.update()


def test_a_teacher_that_stops_mid_episode_leaves_the_student_then_the_safe_action(contract, student_cfg):
    learner = make_learner(contract, student_cfg, n=1)
    run(learner, 40)
    t = 40 * PERIOD
    timeout = learner.cfg.teacher_timeout_s
    # the teacher falls silent; the student keeps sending frames
    for k in range(int(timeout / PERIOD) + 4):
        now = np.array([t + k * PERIOD])
        feats = np.zeros((1, 32), np.float32)
        feats[:, :DQ] = state_at(now - LATENCY)
        learner.observe_student(np.array([0]), now - LATENCY, {"embedding": feats}, now)
        d = learner.act(now)
    assert not d.use_teacher[0] and d.reason[0] in ("teacher_unavailable", "forced_student")
    assert d.skill[0] == learner.env.student_skill[0]
    # and the student stalls too: nothing usable is left, the safe action goes out
    later = now + learner.cfg.student_timeout_s + PERIOD
    d = learner.act(later)
    assert d.skill[0] == contract.safe_skill_id and d.reason == ("no_input_safe_action",)
    np.testing.assert_array_equal(d.params[0], contract.layout.defaults)


def test_a_refused_teacher_entry_neither_acts_nor_counts_as_a_live_teacher(contract, student_cfg):
    learner = make_learner(contract, student_cfg, n=1)
    now = np.array([10.0])
    stale = now - 5.0  # beyond the buffer's max_age_s: refused
    learner.observe_teacher(stale, state_at(stale), np.zeros(1, np.int64), now)
    assert learner.buffers[0].counts["stale"] == 1
    d = learner.act(now)
    assert d.reason == ("no_input_safe_action",) and d.skill[0] == contract.safe_skill_id


def live_base(contract, student_cfg, tmp_path):
    """A deployed tiny student, its teacher on disk and an `opd:` config: what the opd node's learner
    process builds its learner from."""
    import yaml

    from policies.artifact import Artifact
    from policies.export import export_artifact
    from policies.predictor_config import PredictorConfig

    fields = tuple(f"q{i}" for i in range(DQ))
    base = Artifact.load(export_artifact(tmp_path / "base", student_cfg=student_cfg, contract=contract,
                                         predictor_cfg=PredictorConfig(in_dim=32, hidden=8),
                                         privileged_fields=fields))  # fmt: skip
    torch.manual_seed(0)
    teacher = TeacherPolicy(DQ + contract.num_skills, contract, TeacherConfig(hidden=[16]))
    torch.save(teacher.state_dict(), tmp_path / "teacher.pt")
    meta = {"obs_dim": DQ + contract.num_skills, "contract": contract.model_dump(mode="json"),
            "teacher": TeacherConfig(hidden=[16]).model_dump(mode="json")}  # fmt: skip
    (tmp_path / "teacher.yaml").write_text(yaml.safe_dump(meta))
    opd = {"opd": {"distill": {"batch_size": 16, "capacity": 500, "lr": 3e-2}, "align": {"period_s": PERIOD}}}
    (tmp_path / "opd.yaml").write_text(yaml.safe_dump(opd))
    return base, str(tmp_path / "teacher.pt"), str(tmp_path / "opd.yaml")


def wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_steps_take_at_most_their_share_of_the_learners_time() -> None:
    """With max_share 1/4 a step of d s is followed by a rest of at least 3 d (a memory head's step is far
    longer than a control period); a short step waits out the rest of its period."""
    from opd.live.process import rest_s

    assert rest_s(period_s=0.05, elapsed_s=0.04, busy_s=0.04, max_share=0.25) == pytest.approx(0.12)
    assert rest_s(period_s=0.05, elapsed_s=0.002, busy_s=0.001, max_share=0.25) == pytest.approx(0.048)
    assert rest_s(period_s=0.05, elapsed_s=0.2, busy_s=0.2, max_share=1.0) == 0.0


def test_the_learner_process_trains_beside_acting_and_its_versions_deploy(contract, student_cfg, tmp_path):
    """Gradient steps in a child process (at the nice asked, below the control loop) reach the node's
    acting copies; student versions it writes carry hashes, are written atomically, and deploy."""
    from opd.live.loading import VersionWriter, load_learner
    from opd.live.process import LearnerProcess, LearnerSpec
    from policies.artifact import Artifact
    from policies.runtime import load_student

    base, teacher, opd_yaml = live_base(contract, student_cfg, tmp_path)
    learner = load_learner(base, teacher, opd_yaml, learning=False)  # the node's: acting only
    deployed = {k: v.clone() for k, v in learner.acting_state()["student"].items()}
    announced: list[tuple] = []
    spec = LearnerSpec(str(base.root), teacher, opd_yaml, max_rate_hz=200.0, nice=19,
                       versions_dir=str(tmp_path / "versions"), version_every_s=1e-3)  # fmt: skip
    process = LearnerProcess(learner, spec, lambda p, n: announced.append((p, n)))
    with pytest.raises(ValueError, match="no store"):
        LearnerProcess(make_learner(contract, student_cfg), spec)
    process.start()
    try:
        decisions = run(learner, 200)  # the loop acts while the child learns from its samples
        wait_for(lambda: process.updates >= 3 or process.error is not None, 120.0)
        assert os.getpriority(os.PRIO_PROCESS, process.pid) == 19
        # the exports run at nice 10 under a nice-19 learner: minutes on a busy machine
        wait_for(lambda: len(announced) >= 2 or process.error is not None, 600.0)
        run(learner, 20, t0=200 * PERIOD)
    finally:
        process.stop()
    assert process.error is None and process.updates >= 3 and process.sent > 0 and process.dropped == 0
    assert all(np.isfinite(d.params).all() for d in decisions)
    acting = learner.acting_state()["student"]
    assert any(not torch.equal(v, deployed[k]) for k, v in acting.items() if k.startswith("head."))
    assert learner.sink is None and not process.pid  # stopped: nothing more is handed over
    assert [n for _, n in announced[:2]] == [1, 2]
    newest, number = announced[-1]
    version = Artifact.load(newest)  # hashes verified
    assert version.sha256("encoder.onnx") == base.sha256("encoder.onnx")
    learnt = StudentPolicy(student_cfg, contract)
    learnt.load_state_dict(torch.load(version.path("student.pt"), weights_only=True))
    assert any(
        not torch.equal(v, deployed[k]) for k, v in learnt.state_dict().items() if k.startswith("head.")
    )
    emb = np.random.default_rng(1).normal(size=(3, 32)).astype(np.float32)
    with torch.no_grad():
        want = learnt.head.deterministic(learnt.head(torch.from_numpy(emb)))
    ort = load_student(newest, "onnxruntime")
    assert [ort.act(e)[1] for e in emb] == want[0].tolist()  # its ONNX head is its learnt weights
    assert VersionWriter(base, tmp_path / "versions", 60.0, lambda p, n: None).number == number  # resumes


def test_a_version_of_a_novelty_gated_student_carries_its_ensemble(contract, student_cfg, tmp_path):
    """What the live learner publishes for a novelty gate: its acting ensemble, which a learner built from
    the version (a restarted node, a replay) reads instead of an untrained one."""
    import yaml

    from opd.live.loading import VersionWriter, load_learner
    from policies.artifact import Artifact

    base, teacher, opd_yaml = live_base(contract, student_cfg, tmp_path)
    novelty_yaml = tmp_path / "novelty.yaml"
    novelty_yaml.write_text(yaml.safe_dump({"opd": {"switch": "novelty"}}))
    learner = load_learner(base, teacher, novelty_yaml, learning=False)
    with torch.no_grad():  # a learnt ensemble: its weights moved
        for p in learner.acting_novelty.parameters():
            p.add_(0.05 * torch.randn_like(p))
    want = learner.acting_novelty.state_dict()
    version = Artifact.load(VersionWriter(base, tmp_path / "v", 60.0, lambda p, n: None).write(learner))
    assert version.manifest["weights_source"]["novelty"] == "online (OPD)"
    deployed = load_learner(version, teacher, novelty_yaml, learning=False).acting_novelty.state_dict()
    assert all(torch.equal(deployed[k], want[k]) for k in want)
    writer = VersionWriter(base, tmp_path / "p", 60.0, lambda p, n: None)
    plain = Artifact.load(writer.write(load_learner(base, teacher, opd_yaml)))  # a gate without one
    assert "novelty" not in plain.manifest["weights"]


def test_a_learner_process_that_fails_says_why_and_acting_goes_on(contract, student_cfg, tmp_path):
    from opd.live.loading import load_learner
    from opd.live.process import LearnerProcess, LearnerSpec

    base, teacher, opd_yaml = live_base(contract, student_cfg, tmp_path)
    learner = load_learner(base, teacher, opd_yaml, learning=False)
    (tmp_path / "broken.yaml").write_text("opd: {distill: {batch_size: -1}}")
    process = LearnerProcess(learner, LearnerSpec(str(base.root), teacher, str(tmp_path / "broken.yaml")))
    process.start()
    try:
        wait_for(lambda: process.error is not None, 120.0)
        decisions = run(learner, 20)
    finally:
        process.stop()
    assert "batch_size" in str(process.error)  # the child's own error, not just its exit code
    assert all(np.isfinite(d.params).all() for d in decisions)
    with pytest.raises(ValueError, match="max_share"):
        LearnerProcess(learner, LearnerSpec(str(base.root), max_share=0.0))
    with pytest.raises(ValueError, match="nice"):
        LearnerProcess(learner, LearnerSpec(str(base.root), nice=-5))


def test_a_learner_killed_while_it_rests_is_reported_and_stopping_it_returns(contract, student_cfg, tmp_path):
    """The child rested on a multiprocessing Event: killed there (the OOM killer, say), the Event's set() in
    stop() waited for it for good, and disarm, Ctrl-C and shutdown hung. A new start forgets the death."""
    from opd.live.loading import load_learner
    from opd.live.process import LearnerProcess, LearnerSpec

    base, teacher, opd_yaml = live_base(contract, student_cfg, tmp_path)
    learner = load_learner(base, teacher, opd_yaml, learning=False)
    process = LearnerProcess(learner, LearnerSpec(str(base.root), teacher, opd_yaml, max_share=0.05))
    process.start()
    try:
        time.sleep(15.0)  # started (torch imported, the learner built) and resting between empty passes
        os.kill(process.pid, signal.SIGKILL)
        wait_for(lambda: process.error is not None, 30.0)
        assert "exited with code -9" in str(process.error)
    finally:
        stopping = threading.Thread(target=process.stop, daemon=True)
        stopping.start()
        stopping.join(30.0)
    assert not stopping.is_alive()
    process.start()  # armed again: the last child's death is no longer reported
    try:
        assert process.error is None
    finally:
        process.stop()


def test_a_learner_whose_node_died_while_it_started_stops(contract, student_cfg, tmp_path):
    """A spawned learner takes seconds to start (it imports torch): a node killed meanwhile is not there to
    watch once it runs, so it is given the node's pid rather than reading its parent at start-up."""
    import multiprocessing as mp

    from opd.live.process import LearnerSpec, _child_main

    base, teacher, opd_yaml = live_base(contract, student_cfg, tmp_path)
    ctx = mp.get_context("spawn")
    samples, (said, child_end) = ctx.Queue(), ctx.Pipe(duplex=False)
    stop = ctx.Value("b", 0, lock=False)  # held: the child opens them
    node_gone = 0  # no process's pid: the child's parent (this test) is not the node it was started for
    spec = LearnerSpec(str(base.root), teacher, opd_yaml)
    child = ctx.Process(target=_child_main, args=(node_gone, spec, samples, child_end, stop), daemon=True)
    child.start()
    child_end.close()
    child.join(timeout=120)
    try:
        assert child.exitcode == 0  # left its loop at once, not by an error (that would be said)
        with pytest.raises(EOFError):
            said.recv()
    finally:
        if child.is_alive():
            child.kill()


def _dies_mid_message(parent: int, spec: object, samples: object, conn: object, stop: object) -> None:
    """A learner child killed while it sends: a message's length and a part of it, then SIGKILL."""
    os.write(conn.fileno(), (1 << 20).to_bytes(4, "big") + b"w" * 4096)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_learner_killed_in_the_middle_of_a_message_is_reported_and_stopping_it_returns(
    contract, student_cfg, tmp_path, monkeypatch
):
    """The receiver read a queue whose pipe this process also held open: a child killed mid-put left the
    read waiting for the rest for good, and the death unreported. On the child's one-way pipe it is EOF."""
    from opd.live import process as live

    learner = make_learner(contract, student_cfg, n=1, learning=False)
    monkeypatch.setattr(live, "_child_main", _dies_mid_message)
    process = live.LearnerProcess(learner, live.LearnerSpec("unused"))
    process.start()
    try:
        wait_for(lambda: process.error is not None, 60.0)
        assert "exited with code -9" in str(process.error)
        assert not process._receiver.is_alive()
    finally:
        stopping = threading.Thread(target=process.stop, daemon=True)
        stopping.start()
        stopping.join(30.0)
    assert not stopping.is_alive() and process.pid is None


def test_a_learner_process_whose_node_dies_outright_stops_too(contract, student_cfg, tmp_path):
    """A node killed without stopping its learner (no stop(), no exit handlers) leaves no learner running."""
    import subprocess
    import sys

    base, teacher, opd_yaml = live_base(contract, student_cfg, tmp_path)
    node = tmp_path / "node.py"
    node.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[3])!r})\n"
        "from opd.live.process import LearnerProcess, LearnerSpec\n"
        "from opd.live.loading import load_learner\n"
        "from policies.artifact import Artifact\n"
        "if __name__ == '__main__':\n"
        f"    base = Artifact.load({str(base.root)!r})\n"
        f"    learner = load_learner(base, {teacher!r}, {opd_yaml!r}, learning=False)\n"
        f"    process = LearnerProcess(learner, LearnerSpec(str(base.root), {teacher!r}, {opd_yaml!r}))\n"
        "    process.start()\n"
        "    print(process.pid, flush=True)\n"
        "    time.sleep(5)\n"
        "    os._exit(0)\n"
    )  # fmt: skip
    proc = subprocess.Popen([sys.executable, str(node)], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())  # the learner's
    assert proc.wait(timeout=300) == 0  # the node is gone; the learner, which shares its stdout, may not be
    stat = Path(f"/proc/{pid}/stat")

    def gone() -> bool:  # exited (a zombie where nothing reaps orphans) or reaped
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True

    wait_for(gone, 120.0)
    try:
        assert gone()
    finally:
        if not gone():
            os.kill(pid, 9)  # a runaway learner must not outlive the test either
        proc.stdout.close()


def test_stopping_a_learner_busy_exporting_a_version_stops_the_export_too(contract, student_cfg, tmp_path):
    """stop() kills a child that does not stop in time together with the version export it runs, so no
    export outlives its node."""
    from opd.live.loading import load_learner
    from opd.live.process import LearnerProcess, LearnerSpec

    def children(pid: int) -> list[int]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(stat.parent.name))
        return found

    base, teacher, opd_yaml = live_base(contract, student_cfg, tmp_path)
    learner = load_learner(base, teacher, opd_yaml, learning=False)
    spec = LearnerSpec(str(base.root), teacher, opd_yaml, max_rate_hz=200.0,
                       versions_dir=str(tmp_path / "versions"), version_every_s=1e-3)  # fmt: skip
    process = LearnerProcess(learner, spec)
    process.start()
    try:
        run(learner, 100)
        child = process.pid
        exports: list[int] = []

        def exporting() -> bool:  # the scan that finds them is the one kept: a second could miss them
            exports[:] = children(child)
            return bool(exports) or process.error is not None

        wait_for(exporting, 300.0)
        assert exports and process.error is None  # an export in progress
    finally:
        process.stop(timeout_s=0.1)
    wait_for(lambda: not any(_alive(pid) for pid in exports), 1.0)  # an export alone takes seconds
    assert not any(_alive(pid) for pid in exports) and not _alive(child)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_a_decision_stream_decides_per_frame_and_says_what_it_saw(contract, student_cfg):
    """The one-stream core the live node and replay share: one decision per accepted frame, its context
    (stamp, time, newest teacher stamp), and a step that goes back ends the episode."""
    from opd.distill.decision_stream import DecisionStream

    stream = DecisionStream(make_learner(contract, student_cfg, n=1))
    first = stream.on_frame(1.0, np.zeros(32, np.float32), 1.1)
    assert np.isnan(first.teacher_upto) and first.reason == "teacher_unavailable"  # the student acts alone
    for k in range(10):
        t = 2.0 + k * PERIOD
        assert stream.on_teacher(t, 0, k, state_at(np.array([t]))[0], t + 0.001)
    decided = stream.on_frame(2.0 + 9 * PERIOD, np.ones(32, np.float32), 2.0 + 9 * PERIOD + 0.12)
    assert decided is not None and decided.source in ("student", "teacher")
    assert decided.teacher_upto == 2.0 + 9 * PERIOD
    assert decided.now == 2.0 + 9 * PERIOD + 0.12 and decided.stamp == 2.0 + 9 * PERIOD
    assert stream.on_frame(decided.stamp, np.ones(32, np.float32), decided.now + 0.01) is None  # duplicate
    assert stream.refusals.get("duplicate") == 1
    stream.on_teacher(3.0, 0, 0, state_at(np.array([3.0]))[0], 3.001)  # step 0 again: a new episode
    assert len(stream.episodes) == 1 and stream.episodes[0]["steps"] == 2


def streaming(contract, student_cfg, steps: int = 20):
    """A decision stream `steps` periods into an episode (teacher states now, frames LATENCY late), and the
    time of its last step."""
    from opd.distill.decision_stream import DecisionStream

    stream = DecisionStream(make_learner(contract, student_cfg, n=1))
    for k in range(steps):
        t = 1.0 + k * PERIOD
        assert stream.on_teacher(t, 0, k, state_at(np.array([t]))[0], t)
        if k >= 3:
            assert stream.on_frame(t - LATENCY, np.full(32, 0.1, np.float32), t) is not None
    return stream, 1.0 + (steps - 1) * PERIOD


@pytest.mark.parametrize("offset, reason", [(-5.0, "stale"), (+0.5, "future")])
def test_a_teacher_state_refused_for_its_stamp_neither_ends_the_episode_nor_moves_its_step(
    contract, student_cfg, offset, reason
):
    """A stale state with a lower step (a clock restart to the node's stamp check) used to end the episode
    before the buffer refused it; a future one with a higher step made the next true state end it."""
    stream, t = streaming(contract, student_cfg)
    step = 0 if offset < 0 else 10_000
    assert not stream.on_teacher(t + offset, 0, step, state_at(np.array([t]))[0], t)
    assert stream.refusals[reason] == 1
    t += PERIOD
    assert stream.on_teacher(t, 0, 20, state_at(np.array([t]))[0], t)  # the episode's next state
    assert stream.episodes == [] and stream.learner.env.metrics[0].steps == 17
    assert stream.learner.buffers[0].sizes["teacher"] > 0


def test_no_frame_of_the_last_episode_pairs_with_the_next_ones_teacher(contract, student_cfg):
    """The last camera frame of an episode arrives ~LATENCY after the next episode's first state: it is
    refused as the last episode's, where it used to join the next one's states. The cut is the ended
    episode's newest state: the next episode's first frame, taken while the robot settled after the reset,
    is stamped before its first state and belongs to it."""
    stream, t = streaming(contract, student_cfg)  # the last state of the episode at t
    start = t + PERIOD
    assert stream.on_teacher(start, 0, 0, state_at(np.array([start]))[0], start)  # step 0: a new episode
    assert len(stream.episodes) == 1
    assert stream.on_frame(t - 0.01, np.zeros(32, np.float32), start + LATENCY) is None  # the last one's
    assert stream.refusals["previous_episode"] == 1
    assert (
        stream.on_frame(start - 0.01, np.zeros(32, np.float32), start + LATENCY) is not None
    )  # the new one's


def test_a_clock_that_restarts_begins_the_next_episode_instead_of_stalling(contract, student_cfg):
    """Stamps that go back (a simulator restarted, its clock with it) with the step counter: each state used
    to be refused as the last episode's, and nothing was decided again."""
    stream, t = streaming(contract, student_cfg)  # an episode around t = 2 s
    for k in range(5):  # and a second one after it, which has a cut: its first episode's newest state
        s = t + (k + 1) * PERIOD
        assert stream.on_teacher(s, 0, k, state_at(np.array([s]))[0], s)
    for k in range(10):  # the clock starts again at 0.5 s, `now` with it
        s = 0.5 + k * PERIOD
        assert stream.on_teacher(s, 0, k, state_at(np.array([s]))[0], s)
        if k >= 3:
            assert stream.on_frame(s - LATENCY, np.full(32, 0.1, np.float32), s) is not None
    assert len(stream.episodes) == 2 and "previous_episode" not in stream.refusals


def test_a_frame_measured_longer_ago_than_the_student_timeout_does_not_act(contract, student_cfg):
    """Staleness counts from the frame's stamp: frames arriving 1.5 s late are no student at all, so with
    a silent teacher the safe action goes out (it used to execute them as fresh)."""
    from opd.distill.decision_stream import DecisionStream

    stream = DecisionStream(make_learner(contract, student_cfg, n=1))
    timeout = stream.learner.cfg.student_timeout_s
    for k in range(10):
        now = 5.0 + k * PERIOD
        late = stream.on_frame(now - timeout - 1.0, np.full(32, 0.1, np.float32), now)
        assert late is not None and late.source == "safe" and late.reason == "no_input_safe_action"
        assert late.decision.skill[0] == contract.safe_skill_id
    fresh = stream.on_frame(now - LATENCY, np.full(32, 0.1, np.float32), now + 0.01)
    assert fresh.source == "student" and fresh.reason != "no_input_safe_action"


def shifted(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """`image` (H, W, C) moved by (dy, dx) with its edge pixels repeated."""
    h, w = image.shape[:2]
    rows = np.clip(np.arange(h) + dy, 0, h - 1)
    cols = np.clip(np.arange(w) + dx, 0, w - 1)
    return image[rows][:, cols]


def shift_of(out: np.ndarray, image: np.ndarray, pad: int) -> tuple[int, int] | None:
    """The (dy, dx) within `pad` that turns `image` into `out`, None if there is none."""
    for dy in range(-pad, pad + 1):
        for dx in range(-pad, pad + 1):
            if np.array_equal(shifted(image, dy, dx), out):
                return dy, dx
    return None


def test_each_image_is_its_own_shift_within_the_pad_and_the_rng_decides():
    images = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (32, 12, 10, 3), dtype=np.uint8))
    out = random_shift(images, 3, np.random.default_rng(0))
    assert out.dtype == images.dtype and out.shape == images.shape
    shifts = [shift_of(o.numpy(), i.numpy(), 3) for o, i in zip(out, images, strict=True)]
    assert None not in shifts
    assert len(set(shifts)) > 5  # per image, not one shift for the batch
    assert torch.equal(out, random_shift(images, 3, np.random.default_rng(0)))  # seeded: deterministic
    assert random_shift(images, 0, np.random.default_rng(0)) is images


def filled_image_learner(contract, student_cfg, **distill) -> OnlineDistillation:
    """A learner that trains its encoder, its store full of random images (seed 0)."""
    learner = make_learner(contract, student_cfg, distill={"train_encoder": True, "batch_size": 8,
                                                           "capacity": 20, **distill})  # fmt: skip
    rng = np.random.default_rng(0)
    for _ in range(20):
        row = {k: np.zeros(shape, dtype) for k, (shape, dtype) in learner.store.spec.shapes().items()}
        row["image"] = rng.integers(0, 256, row["image"].shape, dtype=np.uint8)
        learner.store.add(row)
    return learner


def test_the_learner_trains_its_encoder_on_shifted_copies_of_stored_frames(contract, student_cfg):
    learner = filled_image_learner(contract, student_cfg, image_shift_px=2)
    seen = []
    learner.student.encoder.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    assert learner.update()
    stored = list(learner.store.arrays["image"])
    shifts = []
    for image in seen[0]:  # the first update's batch: which stored frame, moved by how much
        found = [s for s in (shift_of(image.numpy(), x, 2) for x in stored) if s is not None]
        assert found, "the encoder saw an image that is no shift of a stored frame"
        shifts.append(found[0])
    assert any(s != (0, 0) for s in shifts)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_encoder_updates_in_the_configured_precision_and_the_weights_stay_float32(
    contract, student_cfg, precision
):
    learner = filled_image_learner(contract, student_cfg, precision=precision)
    out_dtypes = []
    learner.student.encoder.image.trunk[0].register_forward_hook(
        lambda m, a, out: out_dtypes.append(out.dtype)
    )
    before = learner.student.encoder.image.trunk[0].weight.detach().clone()
    losses = learner.update()
    assert out_dtypes == [torch.bfloat16 if precision == "bf16" else torch.float32]
    assert all(np.isfinite(v) for v in losses.values())
    after = learner.student.encoder.image.trunk[0].weight
    assert after.dtype == torch.float32 and not torch.equal(after, before)  # the encoder learned
    assert all(p.dtype == torch.float32 for p in learner.acting.parameters())  # what acts and is exported


def test_bf16_updates_follow_float32_ones_closely(contract, student_cfg):
    runs = {}
    for precision in ("fp32", "bf16"):
        learner = filled_image_learner(contract, student_cfg, precision=precision)
        runs[precision] = [learner.update()["loss/skill_kl"] for _ in range(5)]
    assert runs["fp32"] != runs["bf16"]  # bfloat16 did compute
    np.testing.assert_allclose(runs["bf16"], runs["fp32"], rtol=0.05)


def test_a_head_with_memory_acts_and_learns_on_the_windows_the_store_keeps(contract, student_cfg):
    """Memory longer than the predictor's history: one window per frame, the head's and the store's alike,
    the predictor on its newest frames; an episode's end empties it."""
    frames = 8
    cfg = student_cfg.model_copy(update={"memory": student_cfg.memory.model_copy(update={"frames": frames})})
    learner = make_learner(contract, cfg, n=1)
    assert learner.align.history == frames and learner.predictor_cfg.history == 5
    run(learner, 60)
    window = learner.env.windows.frames[0]  # (W, E): the newest frames, oldest first, by stamp
    stamps = window[:, DQ]
    assert np.all(np.diff(stamps) == pytest.approx(2 * PERIOD, abs=1e-5))
    with torch.no_grad():
        dist = learner.acting.act_dist(torch.from_numpy(window[None]))
        skill, params = learner.acting.head.deterministic(dist)
    assert learner.env.student_skill[0] == int(skill[0])
    np.testing.assert_allclose(learner.env.student_params[0], params[0].double().numpy(), atol=1e-6)
    rows = learner.store.sample(8, np.random.default_rng(0))["window"].numpy()  # (8, W, E)
    for row in rows:  # each a run of consecutive frames, zero rows only before an episode's first frame
        real = row[:, DQ] != 0
        assert np.all(np.diff(row[real, DQ]) == pytest.approx(2 * PERIOD, abs=1e-5))
        assert not np.any(real[:-1] & ~real[1:])
    before = learner.student.memory.proj.weight.detach().clone()
    assert not before.any()  # zero until it learns
    for _ in range(5):
        learner.update()
    assert learner.student.memory.proj.weight.detach().abs().sum() > 0
    learner.process_step(np.array([10.0]), np.array([True]))
    assert not learner.env.windows.frames[0].any()


def test_an_averaged_acting_student_moves_part_way_and_checkpoints_keep_it(contract, student_cfg):
    distill = {"train_encoder": False, "batch_size": 16, "capacity": 500, "lr": 3e-3, "acting_ema": 0.75}
    learner = make_learner(contract, student_cfg, distill=distill)
    run(learner, 120)
    name = "head.logits.weight"
    before = learner.acting.state_dict()[name].clone()
    torch.testing.assert_close(before, learner.student.state_dict()[name])  # a plain copy until an update
    assert learner.update()
    want = 0.75 * before + 0.25 * learner.student.state_dict()[name]
    torch.testing.assert_close(learner.acting.state_dict()[name], want)
    assert not torch.equal(learner.acting.state_dict()[name], learner.student.state_dict()[name])
    again = reload_into(learner, make_learner(contract, student_cfg, seed=1, distill=distill))
    for k, v in learner.acting.state_dict().items():
        torch.testing.assert_close(again.acting.state_dict()[k], v, rtol=0, atol=0)


def test_skill_balance_gives_every_skill_of_the_store_the_same_total_weight(contract, student_cfg):
    distill = {"train_encoder": False, "batch_size": 16, "capacity": 500, "lr": 3e-3}
    uniform = make_learner(contract, student_cfg, distill=distill)
    balanced = make_learner(contract, student_cfg, distill={**distill, "skill_balance": 1.0})
    for learner in (uniform, balanced):
        run(learner, 120)
    held = torch.from_numpy(balanced.store.arrays["teacher_skill"][: len(balanced.store)].copy())
    counts = np.bincount(held.numpy(), minlength=contract.num_skills)
    np.testing.assert_array_equal(balanced.store.skill_counts(contract.num_skills), counts)
    assert (counts > 0).sum() >= 2 and counts.max() > 2 * counts[counts > 0].min()  # an uneven store
    torch.testing.assert_close(uniform._skill_weights(held), torch.ones(len(held)))
    w = balanced._skill_weights(held)  # over the whole store: each present skill sums to the same weight
    totals = [float(w[held == k].sum()) for k in range(contract.num_skills) if counts[k]]
    assert totals == pytest.approx([totals[0]] * len(totals), rel=1e-4)
    assert float(w.mean()) == pytest.approx(1.0, rel=1e-5)
    assert balanced.update()["loss/skill_kl"] > 0


def test_prioritised_updates_give_each_drawn_window_its_loss_as_priority(contract, student_cfg):
    distill = {"train_encoder": False, "batch_size": 16, "capacity": 500, "priority_alpha": 0.6}
    learner = make_learner(contract, student_cfg, distill=distill)
    run(learner, 120)
    n = len(learner.store)
    assert np.all(learner.store.priority[:n] == 1.0)  # nothing drawn yet
    learner.update()
    changed = np.flatnonzero(learner.store.priority[:n] != 1.0)
    assert 0 < len(changed) <= 16
    assert np.all(learner.store.priority[changed] > 0)
    uniform = make_learner(contract, student_cfg, distill={**distill, "priority_alpha": 0.0})
    run(uniform, 120)
    uniform.update()
    assert np.all(uniform.store.priority[: len(uniform.store)] == 1.0)  # alpha 0 keeps batches uniform


def test_the_memory_state_loss_trains_a_readout_of_the_heads_memory_and_checkpoints_keep_it(
    contract, student_cfg
):
    distill = {"train_encoder": False, "batch_size": 16, "capacity": 500, "lr": 3e-3, "memory_state": 1.0}
    with pytest.raises(ValueError, match="memory_state needs a head with memory"):
        make_learner(contract, student_cfg, distill=distill)
    cfg = student_cfg.model_copy(update={"memory": student_cfg.memory.model_copy(update={"frames": 8})})
    learner = make_learner(contract, cfg, distill=distill)
    run(learner, 120)
    gru = learner.student.memory.gru.weight_hh_l0.detach().clone()
    losses = [learner.update()["loss/memory_state"] for _ in range(60)]
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])  # the read-out learns the teacher state
    assert not torch.equal(learner.student.memory.gru.weight_hh_l0, gru)  # and its gradient reaches the GRU
    again = reload_into(learner, make_learner(contract, cfg, seed=1, distill=distill))
    for k, v in learner.memory_readout.state_dict().items():
        torch.testing.assert_close(again.memory_readout.state_dict()[k], v, rtol=0, atol=0)
    off = make_learner(contract, cfg, distill={**distill, "memory_state": 0.0})
    run(off, 120)
    assert off.memory_readout is None and "loss/memory_state" not in off.update()


def test_each_stored_sample_says_whether_the_gate_gave_its_frames_decisions_to_the_teacher(
    contract, student_cfg
):
    gate = {"budget": 0.4, "budget_min_samples": 10, "budget_window": 50, "disagree_s": 0}
    learner = make_learner(contract, student_cfg, n=1, gate=gate)
    decisions = run(learner, 200)
    # run() sends a frame every other period: the one stamped k * PERIOD - LATENCY (k even) is the student's
    # input at decisions k and k + 1
    by_stamp: dict[float, bool] = {}
    for k, d in enumerate(decisions):
        newest = (k - k % 2) * PERIOD - LATENCY
        if newest >= 0:
            key = round(newest, 6)
            by_stamp[key] = by_stamp.get(key, False) or bool(d.use_teacher[0] and not d.no_student[0])
    n, rows = len(learner.store), learner.store.arrays
    flags = rows["takeover"][:n]
    want = np.array([by_stamp[round(float(s), 6)] for s in rows["embedding"][:n, DQ]])
    assert 0 < want.sum() < n  # both kinds: the test can tell them apart
    np.testing.assert_array_equal(flags, want)


def test_a_takeover_share_draws_that_share_of_each_batch_from_the_teachers_takeovers(contract, student_cfg):
    gate = {"budget": 0.2, "budget_min_samples": 10, "budget_window": 50, "disagree_s": 0}
    distill = {"train_encoder": False, "batch_size": 20, "capacity": 500, "takeover_share": 0.5}
    learner = make_learner(contract, student_cfg, n=1, gate=gate, distill=distill)
    run(learner, 200)
    flags = learner.store.arrays["takeover"][: len(learner.store)]
    assert 0 < flags.sum() < len(flags) and abs(flags.mean() - 0.5) > 0.1  # not half of those held
    drawn = [learner.store.sample(20, learner.rng, takeover_share=0.5)["takeover"].numpy() for _ in range(20)]
    assert all(d.sum() == 10 for d in drawn)  # exactly half of every batch
    assert learner.update()  # the learner's own batches take the same path
    uniform = learner.store.sample(2000, np.random.default_rng(1))["takeover"].numpy()
    assert abs(uniform.mean() - flags.mean()) < 0.05  # share 0: as held
    with pytest.raises(ValueError, match="choose one"):
        OPDConfig.from_dict({"distill": {"takeover_share": 0.5, "priority_alpha": 0.5}})
