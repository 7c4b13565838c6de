"""Seeded evaluation, the Wilson interval, and the committed teacher checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from opd.evaluation import EVAL_SEED, evaluate_teacher, training_reset_seed, wilson_interval
from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy, load_teacher, teacher_features
from sim.robots.diffbot import constants
from sim.vector_env import DiffBotVectorEnv

COMMITTED = constants.ROOT / "teacher" / "teacher.pt"
SHORT = {"task": {"time_limit_s": 4.0}}  # 20 decisions at 5 Hz


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [  # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3
        (81, 263, (0.2553, 0.3662)),
        (15, 148, (0.0624, 0.1605)),
        (0, 20, (0.0, 0.1611)),
        (1, 29, (0.0061, 0.1718)),
        (29, 29, (0.8830, 1.0)),
    ],
)
def test_wilson_interval_matches_published_values(successes: int, n: int, expected: tuple) -> None:
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=1e-4)


def test_wilson_interval_of_no_episodes_is_uninformative() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_a_resumed_training_run_never_draws_an_evaluation_or_validation_episode() -> None:
    for seed in (0, 1000, 2000):
        assert training_reset_seed(seed, 0) == seed  # a run's start is its seed, as before
        for steps in (1, 9_000, 10_000, 10_593, 19_999, 20_000, 99_999):  # seed + steps hit both ranges
            first = training_reset_seed(seed, steps)
            envs = range(first, first + 64)  # env i draws from the reset's seed + i
            assert not any(EVAL_SEED <= s < EVAL_SEED + 100_000 for s in envs)  # held-out and validation
            assert training_reset_seed(seed, steps + 1) == first + 1  # distinct resumes, distinct draws


def test_episode_i_is_the_same_whichever_env_runs_it() -> None:
    torch.manual_seed(0)
    contract = SkillContract.load(constants.CONTRACT)
    obs_dim = DiffBotVectorEnv(1, obs_mode="privileged").single_observation_space["privileged"].shape[0]
    policy = TeacherPolicy(obs_dim + contract.num_skills, contract, TeacherConfig(hidden=[16])).eval()
    two = evaluate_teacher(policy, 5, sim_config=SHORT, num_envs=2)
    three = evaluate_teacher(policy, 5, sim_config=SHORT, num_envs=3)
    assert two["outcomes"] == three["outcomes"] and sum(two["outcomes"].values()) == 5
    # each episode's outcome by its seed, whichever env ran it: two policies' episodes pair up by index
    assert two["episode_outcomes"] == three["episode_outcomes"] and len(two["episode_outcomes"]) == 5
    assert {o: two["episode_outcomes"].count(o) for o in two["outcomes"]} == two["outcomes"]
    assert two["mean_return"] == pytest.approx(three["mean_return"], rel=1e-5)
    assert set(two) >= {"episodes", "success_rate", "ci95", "mean_return", "sim", "proxy"}
    # where episodes end: per outcome, the share of the tour done and the episode time
    assert two["by_outcome"] == three["by_outcome"] and set(two["by_outcome"]) == set(two["outcomes"])
    for outcome, end in two["by_outcome"].items():
        assert 0.0 <= end["progress_mean"] <= 1.0 and 0.0 < end["time_s_mean"] <= 4.0
        if outcome == "timeout":
            assert end["time_s_mean"] == pytest.approx(4.0, abs=0.25)  # SHORT's time limit
        if outcome == "success":
            assert end["progress_mean"] == 1.0


def test_the_committed_teacher_loads_and_acts_inside_the_contract() -> None:
    teacher = load_teacher(COMMITTED)
    meta = yaml.safe_load(COMMITTED.with_suffix(".yaml").read_text())
    envs = DiffBotVectorEnv(8, obs_mode="privileged", action_repeat=teacher.cfg.action_repeat)
    assert meta["privileged_fields"] == list(envs.robot.spec.privileged_fields)
    assert teacher.contract == envs.contract and not teacher.training
    obs, _ = envs.reset(seed=0)
    lay = teacher.contract.layout
    for _ in range(5):
        feats = teacher_features(obs["privileged"], obs["skill"], teacher.contract.num_skills)
        skill, params = teacher.act(feats)
        assert skill.shape == (8,) and params.shape == (8, teacher.contract.num_params)
        assert np.all((0 <= skill) & (skill < teacher.contract.num_skills))
        assert np.all((lay.low <= params) & (params <= lay.high))
        others = ~teacher.contract.param_mask(skill)
        defaults = np.broadcast_to(lay.defaults, params.shape)[others].astype(np.float32)  # the head's dtype
        np.testing.assert_array_equal(params[others].astype(np.float32), defaults)
        np.testing.assert_array_equal(teacher.act(feats)[0], skill)  # greedy: deterministic
        obs, *_ = envs.step({"skill": skill, "params": params})
    envs.close()


def test_the_student_driver_acts_on_each_envs_window_of_new_frames_from_its_episode_start() -> None:
    """A new frame (new capture time) joins its env's window and acts; a held frame does not; an
    episode's start empties that env's window."""
    from types import SimpleNamespace

    from opd.evaluation import StudentDriver
    from policies.export import DEFAULT_CONTRACT

    contract = SkillContract.load(DEFAULT_CONTRACT)
    seen: list[np.ndarray] = []

    def encode(image, imu, skill, progress, step):  # embedding: the image's first pixel, in every slot
        return np.repeat(image[:, :1, 0, 0].astype(np.float32), 3, axis=1), None

    def act_window(frames):
        seen.append(frames[..., 0].copy())  # (M, W)
        k = len(frames)
        return np.zeros((k, 3)), np.zeros(k, np.int64), np.tile(contract.layout.defaults, (k, 1))

    runtime = SimpleNamespace(contract=contract, memory=3, embed_dim=3, encode=encode, act_window=act_window)
    driver = StudentDriver(runtime, num_envs=2)

    def step(pixels, times, ages, started):
        obs = {"image": np.array(pixels, np.uint8)[:, None, None, None] * np.ones((1, 2, 2, 3), np.uint8),
               "imu": np.zeros((2, 4, 6)), "skill": np.zeros(2), "progress": np.zeros((2, 1)),
               "step": np.zeros((2, 1))}  # fmt: skip
        driver(obs, {"episode_time_s": np.array(times), "image_age_s": np.array(ages)}, np.array(started))

    step([1, 5], [0.0, 0.0], [0.0, 0.0], [True, True])
    step([2, 5], [0.1, 0.1], [0.0, 0.1], [False, False])  # env 1 holds its frame: only env 0 acts
    step([3, 6], [0.2, 0.0], [0.0, 0.0], [False, True])  # env 1 starts a new episode
    np.testing.assert_array_equal(seen[0], [[0, 0, 1], [0, 0, 5]])
    np.testing.assert_array_equal(seen[1], [[0, 1, 2]])
    np.testing.assert_array_equal(seen[2], [[1, 2, 3], [0, 0, 6]])


def test_an_assist_overrides_the_student_exactly_in_its_regime_of_the_target() -> None:
    """unseen: from the moment a marker becomes the target until it first enters the field of view (not
    after it leaves again: seen is seen); out of view: whenever it is outside. The search turns left in
    place; the teacher acts on the true state."""

    from opd.evaluation import SEARCH_TURN_RADPS, AssistedDriver
    from sim.marker_task import privileged_fields

    fields = privileged_fields(3)
    col = {f: i for i, f in enumerate(fields)}
    teacher = load_teacher(COMMITTED)
    contract = teacher.contract
    student_action = (np.array([contract.skill_id("drive")]), contract.layout.defaults[None].copy())

    def student(obs, info, started):
        return student_action[0].copy(), student_action[1].copy()

    def obs_for(bearing_deg: float, progress: float) -> dict:
        priv = np.zeros((1, len(fields)), np.float32)
        c, s_ = np.cos(np.radians(bearing_deg)), np.sin(np.radians(bearing_deg))
        for name, v in (("target_dx_m", c), ("target_dy_m", s_), ("target_dist_m", 1.0), ("target_cos", c),
                        ("target_sin", s_), ("progress", progress)):  # fmt: skip
            priv[0, col[name]] = v
        return {"privileged": priv, "skill": np.zeros(1, np.int64)}

    def run(assist: str, script: list[tuple[float, float, bool]]) -> list[bool]:
        student.skill = student_action[0]  # the driver sizes its state from the student's
        driver = AssistedDriver(student, teacher, assist, fields, 37.5)
        out = []
        for bearing, progress, started in script:
            before = driver.assisted
            obs = obs_for(bearing, progress)
            skill, params = driver(obs, {}, np.array([started]))
            overridden = driver.assisted > before
            if not overridden:
                assert skill[0] == student_action[0][0]
            elif assist == "search_unseen":
                assert skill[0] == contract.skill_id("turn_in_place")
                assert params[0, contract.layout.slices[int(skill[0])]][0] == SEARCH_TURN_RADPS
            else:
                t_skill, t_params = teacher.act(teacher.features(obs["privileged"], obs["skill"]))
                assert skill[0] == t_skill[0]
                np.testing.assert_array_equal(params[0], t_params[0])
            out.append(overridden)
        return out

    # behind; in view; behind again; the next marker (progress 1/3), behind; a new episode, behind
    script = [(150, 0, True), (20, 0, False), (150, 0, False), (-120, 1 / 3, False), (150, 0, True)]
    assert run("search_unseen", script) == [True, False, False, True, True]
    assert run("teacher_unseen", script) == [True, False, False, True, True]
    assert run("teacher_out_of_view", script) == [True, False, True, True, True]


def test_the_far_assists_override_beyond_their_range_in_or_out_of_view() -> None:
    from opd.evaluation import AssistedDriver
    from sim.marker_task import privileged_fields

    fields = privileged_fields(3)
    col = {f: i for i, f in enumerate(fields)}
    teacher = load_teacher(COMMITTED)
    drive = teacher.contract.skill_id("drive")

    def student(obs, info, started):
        return np.array([drive]), teacher.contract.layout.defaults[None].copy()

    student.skill = np.array([drive])

    def overridden(assist: str, bearing_deg: float, dist_m: float) -> bool:
        driver = AssistedDriver(student, teacher, assist, fields, 37.5, range_m=2.0)
        priv = np.zeros((1, len(fields)), np.float32)
        priv[0, col["target_dx_m"]] = dist_m * np.cos(np.radians(bearing_deg))
        priv[0, col["target_dy_m"]] = dist_m * np.sin(np.radians(bearing_deg))
        driver({"privileged": priv, "skill": np.zeros(1, np.int64)}, {}, np.array([True]))
        return driver.assisted == 1

    cases = [(10, 1.0), (10, 3.0), (150, 1.0), (150, 3.0)]  # near/far, in view/behind
    assert [overridden("teacher_far_in_view", *c) for c in cases] == [False, True, False, False]
    assert [overridden("teacher_far_out_of_view", *c) for c in cases] == [False, False, False, True]
    with pytest.raises(ValueError, match="range"):
        AssistedDriver(student, teacher, "teacher_far_in_view", fields, 37.5, range_m=0.0)


def test_the_command_line_offers_exactly_the_assists_the_evaluation_has() -> None:
    from agent.commands import eval as eval_command

    from opd import evaluation

    assert eval_command.ASSISTS == evaluation.ASSISTS
    assert eval_command.ASSIST_RANGE_M == evaluation.ASSIST_RANGE_M
    assert eval_command.EVAL_SEED == evaluation.EVAL_SEED


def test_the_collision_witness_keeps_what_was_hit_and_what_each_side_chose_before_it() -> None:
    """At a collision it reports the hazard (the nearer of wall and obstacle), whether the nearest obstacle
    was in the camera's view in the window, and the skill the driver and the teacher chose; other endings
    and steps before a new episode are not kept."""
    from opd.evaluation import CollisionWitness
    from sim.marker_task import privileged_fields

    fields = privileged_fields(3)
    col = {f: i for i, f in enumerate(fields)}
    teacher = load_teacher(COMMITTED)
    names = teacher.contract.names
    drive = teacher.contract.skill_id("drive")

    def driver(obs, info, started):
        return np.full(2, drive), np.tile(teacher.contract.layout.defaults, (2, 1))

    def obs_for(ahead: bool) -> dict:
        """env 0: an obstacle 0.2 m from the bumper, ahead or behind; env 1: a wall nearer than it."""
        priv = np.zeros((2, len(fields)), np.float32)
        priv[:, col["obstacle0_dx_m"]] = 0.5 if ahead else -0.5
        priv[:, col["obstacle0_gap_m"]] = 0.2
        priv[:, col["wall_gap_m"]] = [1.0, 0.05]
        return {"privileged": priv, "skill": np.zeros(2, np.int64)}

    witness = CollisionWitness(driver, teacher, 2, fields, 37.5, control_hz=20, window_s=0.1)  # 2 steps
    start = np.array([True, True])
    witness(obs_for(ahead=True), {}, start)
    witness(obs_for(ahead=False), {}, ~start)
    witness(obs_for(ahead=False), {}, ~start)  # the sighting has left the 2-step window
    witness.ended(0, "collision")
    witness(obs_for(ahead=True), {}, ~start)
    witness.ended(0, "collision")
    witness.ended(1, "timeout")
    first = witness.report()
    assert first["count"] == 2 and first["hazard"] == {"obstacle": 2} and first["obstacle_in_view"] == 1
    assert first["obstacle_in_view_at_impact"] == 1  # the second, hit while ahead; the first from behind
    assert first["impact_bearing_deg"] == [45.0, 90.0, 135.0]  # dead ahead (0) and dead astern (180)
    assert first["skill"] == {"drive": 2} and first["window_s"] == 0.1
    would, _ = teacher.act(teacher.features(obs_for(ahead=False)["privileged"][:1], np.zeros(1, np.int64)))
    assert names[int(would[0])] in first["teacher_skill"] and sum(first["teacher_skill"].values()) == 2
    assert 0.0 <= first["agreement"] <= 1.0
    witness.ended(1, "collision")
    assert witness.report()["hazard"] == {"obstacle": 2, "wall": 1}
    witness(obs_for(ahead=False), {}, np.array([False, True]))  # env 1 starts over: one step in its window
    witness.ended(1, "collision")
    assert witness.collisions[-1][2] == (drive,)
    assert CollisionWitness(driver, teacher, 2, fields, 37.5, 20).report() == {
        "window_s": 0.5, "count": 0, "hazard": {}, "obstacle_in_view": 0, "obstacle_in_view_at_impact": 0,
        "impact_bearing_deg": None, "skill": {}, "teacher_skill": {}, "agreement": None,
    }  # fmt: skip


def test_the_student_evaluation_witnesses_every_collision_it_counts(tmp_path) -> None:
    from opd.evaluation import evaluate_student
    from policies.export import export_artifact
    from policies.predictor_config import PredictorConfig
    from policies.runtime import load_student
    from policies.student_policy import StudentConfig
    from sim.config import SimConfig
    from sim.gym_env import CONFIG_DIR
    from sim.marker_task import robot_privileged_fields

    cfg = StudentConfig.from_dict({
        "encoder": {"image": {"backbone": "resnet18", "height": 32, "width": 32}, "imu": {"window": 8,
                    "conv_channels": [8]}, "fusion": {"dim": 16, "heads": 2, "queries": 2}, "embed_dim": 16},
        "head": {"hidden": [16]},
    })  # fmt: skip
    predictor = PredictorConfig(in_dim=16, hidden=8)
    fields = robot_privileged_fields()
    art = export_artifact(tmp_path / "student", cfg, predictor_cfg=predictor, privileged_fields=fields)
    sim = SimConfig.from_yaml(CONFIG_DIR / "mujoco.yaml")
    sim = sim.model_copy(
        update={
            "task": sim.task.model_copy(update={"time_limit_s": 3.0}),
            "imu": sim.imu.model_copy(update={"window": 8}),
        }
    )  # the tiny student's
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(sim.model_dump(mode="json")))
    report = evaluate_student(load_student(art), 4, sim_config=tmp_path / "short.yaml", num_envs=2,
                              teacher=load_teacher(COMMITTED), collisions=True)  # fmt: skip
    assert sum(report["outcomes"].values()) == 4
    assert report["collisions"]["count"] == report["outcomes"].get("collision", 0)
    with pytest.raises(ValueError, match="needs the teacher"):
        evaluate_student(load_student(art), 1, sim_config=tmp_path / "short.yaml", collisions=True)


def test_a_skill_bias_moves_the_students_argmax_and_the_chosen_skill_keeps_the_heads_parameters(tmp_path):
    from opd.evaluation import StudentDriver, biased_student
    from policies.export import export_artifact
    from policies.predictor_config import PredictorConfig
    from policies.runtime import load_student
    from policies.student_policy import StudentConfig
    from sim.marker_task import robot_privileged_fields

    cfg = StudentConfig.from_dict({
        "encoder": {"image": {"backbone": "resnet18", "height": 32, "width": 32}, "imu": {"window": 8,
                    "conv_channels": [8]}, "fusion": {"dim": 16, "heads": 2, "queries": 2}, "embed_dim": 16},
        "head": {"hidden": [16]},
    })  # fmt: skip
    art = export_artifact(tmp_path / "s", student_cfg=cfg, predictor_cfg=PredictorConfig(in_dim=16),
                          privileged_fields=robot_privileged_fields())  # fmt: skip
    rng = np.random.default_rng(0)
    n = 6
    obs = {
        "image": rng.integers(0, 255, (n, 32, 32, 3), dtype=np.uint8),
        "imu": rng.normal(size=(n, 8, 6)).astype(np.float32),
        "skill": np.zeros(n, np.int64),
        "progress": rng.uniform(size=(n, 1)).astype(np.float32),
        "step": np.full((n, 1), 5.0, np.float32),
    }
    info = {"episode_time_s": np.full(n, 1.0), "image_age_s": np.full(n, 0.1)}

    def act(artifact):
        runtime = load_student(artifact)
        return (*StudentDriver(runtime, n)(obs, info, np.ones(n, bool)), runtime.contract)

    plain, plain_params, contract = act(art)
    same, same_params, _ = act(biased_student(art, {}, tmp_path / "zero"))
    np.testing.assert_array_equal(same, plain)
    np.testing.assert_allclose(same_params, plain_params, atol=1e-6)
    other = next(k for k in range(contract.num_skills) if k != plain[0])
    name = contract.names[other]
    skill, params, _ = act(biased_student(art, {name: 1e4}, tmp_path / "eager"))
    assert np.all(skill == other)
    # the chosen skill's parameters are the head's for it, not the slot defaults of an unchosen skill
    own = contract.layout.owner == other  # its slots: a skill the deployed head did not choose holds defaults
    assert own.any() and not np.allclose(params[:, own], contract.layout.defaults[own], atol=1e-4)
    with pytest.raises(ValueError, match="unknown skill"):
        biased_student(art, {"fly": 1.0}, tmp_path / "bad")


@pytest.mark.parametrize(
    "episodes, envs, seed, match",
    [(0, 4, 0, "episodes must be at least 1, got 0"), (3, 0, 0, "envs must be at least 1, got 0"),
     (3, 4, -1, "seed must be at least 0, got -1")],
)  # fmt: skip
def test_an_evaluation_of_no_episodes_or_envs_is_refused_before_it_starts(
    episodes, envs, seed, match
) -> None:
    """No episode used to play one and then fail on its bookkeeping; no env silently ran one."""
    teacher = load_teacher(COMMITTED)
    with pytest.raises(ValueError, match=match):
        evaluate_teacher(teacher, episodes, seed=seed, num_envs=envs)


def test_a_configs_hash_is_the_same_on_every_checkout() -> None:
    """A sim config resolves its robot files to this checkout's absolute paths; the hash a report records
    counts them as the project names them, so two checkouts of one commit record one hash."""
    from opd.evaluation import config_sha256
    from policies.config import from_root
    from sim.config import SimConfig

    cfg = SimConfig.from_yaml(from_root("sim/configs/mujoco.yaml"))
    assert Path(str(cfg.mujoco.mjcf)).is_absolute()
    relative = cfg.model_copy(
        update={"mujoco": cfg.mujoco.model_copy(update={"mjcf": "sim/robots/diffbot/arena.xml"})}
    )
    assert config_sha256(relative) == config_sha256(cfg)
    other = cfg.model_copy(
        update={"mujoco": cfg.mujoco.model_copy(update={"mjcf": "sim/robots/diffbot/robot.xml"})}
    )
    assert config_sha256(other) != config_sha256(cfg)
