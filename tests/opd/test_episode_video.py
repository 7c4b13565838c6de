"""Videos of evaluation episodes: env 0's first episodes, one frame per decision, and the report unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from opd.episode_video import Recording, action_text, overlay_lines
from opd.evaluation import evaluate_student, evaluate_teacher
from policies.runtime import load_student
from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy
from sim.config import SimConfig
from sim.gym_env import CONFIG_DIR
from sim.robots.diffbot import constants
from sim.third_person import ThirdPersonConfig
from sim.vector_env import DiffBotVectorEnv
from sim.video import compose

VIEW = ThirdPersonConfig(height=64, width=80)


class Frames(list):
    """A sink that keeps its frames."""

    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default sim, its episodes one second long: 20 control periods, too short to reach a marker."""
    cfg = SimConfig.from_yaml(CONFIG_DIR / "mujoco.yaml")
    cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update={"time_limit_s": 1.0})})
    path = tmp_path_factory.mktemp("sim") / "second.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return path


def recording(frames: Frames, episodes: int = 1) -> Recording:
    return Recording(lambda fps: frames, episodes, VIEW)


def test_the_overlay_names_the_skill_its_parameters_and_who_acted() -> None:
    contract = SkillContract.load(constants.CONTRACT)
    skill, params = contract.action("drive", speed=0.4, curvature=-1.2)
    assert action_text(contract, skill, params) == "drive(speed=0.40, curvature=-1.20)"
    lines = overlay_lines(7, 12, 0.6, 1 / 3, "teacher", "stop(decel=1.00)")
    assert "episode 7" in lines[0] and "decision 12" in lines[0] and lines[1].startswith("acted: teacher")


def test_a_teacher_video_holds_env_0s_first_episode_and_the_report_is_the_same(second: Path) -> None:
    torch.manual_seed(0)
    contract = SkillContract.load(constants.CONTRACT)
    obs_dim = DiffBotVectorEnv(1, obs_mode="privileged").single_observation_space["privileged"].shape[0]
    teacher = TeacherPolicy(obs_dim + contract.num_skills, contract, TeacherConfig(hidden=[16])).eval()
    frames = Frames()
    recorded = evaluate_teacher(teacher, 3, sim_config=second, num_envs=2, video=recording(frames))
    assert recorded == evaluate_teacher(teacher, 3, sim_config=second, num_envs=2)
    assert recorded["episode_outcomes"][0] == "timeout"  # the whole second: 20 periods / 4 a decision
    assert len(frames) == 20 // teacher.cfg.action_repeat and frames.closed
    assert frames[0].shape == compose(np.zeros((64, 80, 3), np.uint8), None, ["", ""]).shape  # no camera


def test_a_student_video_shows_its_camera_and_the_report_is_the_same(second: Path) -> None:
    runtime = load_student(constants.ROOT / "student")
    frames = Frames()
    recorded = evaluate_student(runtime, 2, sim_config=second, num_envs=2, video=recording(frames))
    assert recorded == evaluate_student(runtime, 2, sim_config=second, num_envs=2)
    assert recorded["episode_outcomes"][0] == "timeout" and len(frames) == 20 and frames.closed
    h, w = runtime.image_hw
    k = VIEW.height // h
    assert frames[0].shape[1] >= k * w + VIEW.width  # the camera, enlarged, beside the view
    assert (frames[1] != frames[-1]).any()  # the episode moves on


def test_video_episodes_below_one_are_refused() -> None:
    envs = DiffBotVectorEnv(1, obs_mode="privileged")
    with pytest.raises(ValueError, match="video episodes must be at least 1, got 0"):
        from opd.episode_video import EpisodeVideo

        EpisodeVideo(lambda *a: None, envs, recording(Frames(), 0), "teacher")
