"""The teacher training job: it learns, repeats itself for a seed, resumes after an interrupt, survives a
NaN simulation state and an out-of-range reward, and writes checkpoints that load with weights_only."""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from opd.evaluation import evaluate_teacher
from opd.teacher.trainer import TeacherTrainConfig, TeacherTrainer
from policies.config import from_root
from policies.teacher_policy import TeacherPolicy, load_teacher

EVAL_EPISODES = 16


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, make_tiny: Callable[..., TeacherTrainConfig]) -> Path:
    """Output directory of one finished tiny run."""
    out = tmp_path_factory.mktemp("teacher")
    assert TeacherTrainer(make_tiny(), out).run() == out / "teacher.pt"
    return out


def test_a_short_run_beats_the_untrained_policy(trained: Path, make_tiny: Callable) -> None:
    teacher = load_teacher(trained / "teacher.pt")
    torch.manual_seed(0)
    untrained = TeacherPolicy(teacher.obs_dim, teacher.contract, make_tiny().teacher).eval()
    after = evaluate_teacher(teacher, EVAL_EPISODES, num_envs=8)
    before = evaluate_teacher(untrained, EVAL_EPISODES, num_envs=8)
    assert after["mean_return"] > before["mean_return"] + 5.0, (before, after)
    assert after["success_rate"] > before["success_rate"], (before, after)


def test_a_teacher_whose_view_remembers_trains_and_evaluates(make_tiny: Callable, tmp_path: Path) -> None:
    """Training and evaluation own the sightings of a remembering view (`policies.teacher_view`): they
    reset them at every episode's start and feed each env's states in order; the view travels in
    teacher.yaml."""
    from policies.config import from_root

    view = TeacherTrainConfig.from_yaml(from_root("opd/configs/teacher_view_memory.yaml")).teacher.view
    assert view is not None and view.remember is not None
    cfg = make_tiny(teacher={"view": view.model_dump(mode="json")}, total_steps=240,
                    demos={"episodes": 8, "bc_updates": 50})  # fmt: skip
    trainer = TeacherTrainer(cfg, tmp_path)
    assert trainer.run() == tmp_path / "teacher.pt"
    assert trainer.sightings is not None and trainer.sightings.seen.any()  # markers were sighted
    teacher = load_teacher(tmp_path / "teacher.pt")
    assert teacher.view is not None and teacher.view.remember is not None
    report = evaluate_teacher(teacher, 4, num_envs=4)
    assert report["episodes"] == 4


def test_seeded_runs_are_reproducible(trained: Path, make_tiny: Callable, tmp_path: Path) -> None:
    TeacherTrainer(make_tiny(), tmp_path).run()
    a = torch.load(trained / "teacher.pt", weights_only=True)
    b = torch.load(tmp_path / "teacher.pt", weights_only=True)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


def test_every_checkpoint_loads_weights_only_with_its_config_beside_it(
    trained: Path, make_tiny: Callable
) -> None:
    ckpts = sorted((trained / "checkpoints").glob("step_*.pt"))
    assert [p.stem for p in ckpts] == ["step_000000000", "step_000000240", "step_000000480"]
    for path in ckpts:
        state = torch.load(path, weights_only=True)
        assert state["steps"] == int(path.stem.split("_")[1])
        assert TeacherTrainConfig.from_yaml(path.with_suffix(".yaml")) == make_tiny()
    assert TeacherTrainConfig.from_yaml(trained / "config.yaml") == make_tiny()
    assert list((trained / "tb").glob("events.out.tfevents.*"))


def test_an_interrupted_job_resumes_where_it_stopped(make_tiny: Callable, tmp_path: Path) -> None:
    cfg = make_tiny(checkpoint_every=10_000)  # only the interrupt and the end write checkpoints
    first = TeacherTrainer(cfg, tmp_path)
    explore = first._explore

    def interrupt_at_step_400(feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if first.steps == 400:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C or `kill -INT` does; handled at the step's end
        return explore(feats)

    first._explore = interrupt_at_step_400
    assert first.run() is None
    assert first.steps == 408 and (tmp_path / "checkpoints" / "step_000000408.pt").is_file()

    second = TeacherTrainer(cfg, tmp_path)
    assert second._resume()
    assert second.steps == first.steps and second.sac.updates == first.sac.updates > 0
    for a, b in zip(
        first.sac.state_dict()["q1"].values(), second.sac.state_dict()["q1"].values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(first.sac.actor.parameters(), second.sac.actor.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert second.normalizer.state_dict()["count"] == first.normalizer.state_dict()["count"]
    np.testing.assert_array_equal(second.normalizer.std, first.normalizer.std)
    assert len(second.buffer) == len(first.buffer) == 408 and len(second.demos) == len(first.demos)
    np.testing.assert_array_equal(second.buffer.obs[:408], first.buffer.obs[:408])
    np.testing.assert_array_equal(second.buffer.terms[:408], first.buffer.terms[:408])
    assert second.run() == tmp_path / "teacher.pt"  # and it finishes from there
    assert second.steps == cfg.total_steps


def test_nan_state_and_an_out_of_range_reward_are_survived(
    make_tiny: Callable, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # k = 50: the plumbing of one trip is tested here (k = 3 itself: test_reward_normalizer.py); a 100-row
    # window of random exploration has natural 3-sigma rows that would trip as well.
    reward = {"pause_updates": 1_000_000, "breaker_warmup": 100, "breaker_sigmas": 50.0}
    cfg = make_tiny(demos={"episodes": 0}, reward=reward)
    trainer = TeacherTrainer(cfg, tmp_path)
    explore, terms = trainer._explore, trainer._terms
    updates_at_trip: list[int] = []

    def corrupt_state_at_step_96(feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if trainer.steps == 96:
            trainer.envs.unwrapped.robot.data(3).qvel[:] = np.nan
        return explore(feats)

    def spike_reward_at_step_240(info: dict, done: np.ndarray) -> np.ndarray:
        out = terms(info, done)
        if trainer.steps == 240:
            out[5, trainer.term_names.index("progress")] = 1e3  # a teleport, say
            updates_at_trip.append(trainer.sac.updates)
        return out

    trainer._explore, trainer._terms = corrupt_state_at_step_96, spike_reward_at_step_240
    with caplog.at_level(logging.WARNING):
        assert trainer.run() is not None
    assert trainer.outcomes["nan"] == 1 and "non-finite" in caplog.text
    dumps = list((tmp_path / "breaker").glob("breaker_*.json"))
    assert len(dumps) == 1
    report = json.loads(dumps[0].read_text())
    assert report["offending"] == [{"env": 5, "term": "progress", "value": 1000.0}]
    assert trainer.sac.updates == updates_at_trip[0]  # learning stayed paused after the trip
    assert len(trainer.buffer) == cfg.total_steps - 1  # the offending transition was not stored
    assert np.abs(trainer.buffer.terms[: len(trainer.buffer)]).max() < 100


def test_the_sim_config_is_found_from_the_project_root_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As every repository path in a config: run from elsewhere, a teacher config naming
    sim/configs/mujoco_margin.yaml used to fail with "config file not found"."""
    import gymnasium as gym

    from opd.teacher.trainer import make_vec_env

    monkeypatch.chdir(tmp_path)
    cfg = TeacherTrainConfig.from_dict({"sim_config": "sim/configs/mujoco_margin.yaml", "num_envs": 1})
    env = make_vec_env(cfg, gym.vector.AutoresetMode.NEXT_STEP)
    env.close()


@pytest.mark.parametrize(
    "path",
    sorted(
        p for d in ("opd/configs", "docs/experiments/configs") for p in from_root(d).glob("teacher*.yaml")
    ),
    ids=lambda p: p.name,
)
def test_every_teacher_recipe_loads(path: Path) -> None:
    """The committed teachers' recipes and the experiments' (a moved file's `extends` must still reach)."""
    cfg = TeacherTrainConfig.from_yaml(path)
    assert cfg.sim_config is None or from_root(cfg.sim_config).is_file()
