"""Video of a policy's episodes: env 0's first episodes, each decision one frame (`sim.video`).

`EpisodeVideo` wraps an evaluation's driver as the diagnostics do (`opd.evaluation.Policy`): it sees each
observation and the action chosen on it, and changes neither, so an evaluation with a video reports what
it reports without one. Env 0's episodes follow one another in one file; which episodes env 0 runs is
fixed by the seeds and the number of envs, so the same command records the same episodes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from policies.skill_contract import SkillContract
from sim.third_person import ThirdPersonConfig, ThirdPersonView
from sim.video import FrameSink, compose

if TYPE_CHECKING:
    from sim.vector_env import DiffBotVectorEnv

Policy = Callable[[dict, dict, np.ndarray], tuple[np.ndarray, np.ndarray]]  # opd.evaluation.Policy


@dataclass(frozen=True)
class Recording:
    """What to record: env 0's first `episodes` episodes, into the sink `open(fps)` returns."""

    open: Callable[[float], FrameSink]
    episodes: int = 3
    view: ThirdPersonConfig | None = None  # the third-person camera (default: ThirdPersonConfig())


def action_text(contract: SkillContract, skill: int, params: np.ndarray) -> str:
    """A decision as the overlay shows it, e.g. 'drive(speed=0.40, curvature=-1.20)'."""
    named = contract.named_params(skill, params)
    return f"{contract.names[skill]}({', '.join(f'{k}={v:.2f}' for k, v in named.items())})"


def overlay_lines(
    episode: int, step: int, time_s: float, progress: float, source: str, action: str
) -> list[str]:
    """The overlay's text: which episode and decision, who acted (the gate's source, or the policy acting
    alone) and what it chose."""
    return [f"episode {episode}  decision {step}  t {time_s:5.2f} s  progress {progress:.2f}",
            f"acted: {source}  {action}"]  # fmt: skip


class EpisodeVideo:
    """A driver that records env 0's first `recording.episodes` episodes while `driver` acts."""

    def __init__(self, driver: Policy, envs: DiffBotVectorEnv, recording: Recording, source: str) -> None:
        """`source` says who acts, for the overlay (e.g. 'student alone', 'teacher')."""
        if recording.episodes < 1:
            raise ValueError(f"video episodes must be at least 1, got {recording.episodes}")
        self.driver, self.recording, self.source = driver, recording, source
        self.contract = envs.contract
        hz = envs.config.rates.control_hz / envs.action_repeat  # decisions a second
        self.view = ThirdPersonView(envs.robot, recording.view)
        self.sink: FrameSink | None = recording.open(hz)
        self.episodes = 0  # env 0's episodes begun
        self.step = 0  # decisions in env 0's episode

    def __call__(self, obs: dict, info: dict, started: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        skill, params = self.driver(obs, info, started)
        if started[0]:
            self.episodes, self.step = self.episodes + 1, 0
            if self.episodes > self.recording.episodes:
                self.close()
        running = info.get("running", np.ones(len(skill), dtype=bool))
        if self.sink is not None and running[0]:
            lines = overlay_lines(int(info["episode"][0]), self.step, float(info["episode_time_s"][0]),
                                  float(obs["progress"][0, 0]), self.source,
                                  action_text(self.contract, int(skill[0]), params[0]))  # fmt: skip
            camera = obs["image"][0] if "image" in obs else None  # (h, w, 3) as the policy saw it
            self.sink.append(compose(self.view.render(0), camera, lines))
            self.step += 1
        return skill, params

    def close(self) -> None:
        """Finish the video (idempotent): the sink's file is complete after this."""
        if self.sink is not None:
            self.sink.close()
            self.view.close()
            self.sink = None

    def __enter__(self) -> EpisodeVideo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def recorded(
    driver: Policy, envs: DiffBotVectorEnv, video: Recording | None, source: str
) -> AbstractContextManager[Policy]:
    """`driver` recording into `video` for a with block, the video finished as it ends (an error or Ctrl-C
    included: what was recorded stays playable); `driver` itself without a video."""
    return nullcontext(driver) if video is None else EpisodeVideo(driver, envs, video, source)
