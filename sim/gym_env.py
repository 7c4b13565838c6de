"""Gymnasium view of a robot backend (one env), registered as `agent/DiffBot-v0` and variants.

Importing this module registers the environments, so either `import sim.gym_env` first or name the module
in the id: `gymnasium.make("sim.gym_env:agent/DiffBotPrivileged-v0")`. Vectorise with Gymnasium's vector
API, e.g. `gymnasium.make_vec(id, num_envs=8, vectorization_mode="async")`.

Observation (a Dict; which keys depends on `obs_mode`):
    skill       Discrete(K)            active skill (applied during the last control period)
    progress    Box (1,) float32       fraction of markers reached; tells which colour is next
    step        Box (1,) float32       control steps since reset
    privileged  Box (Dq,) float32      [privileged, all] true state, fields in `spec.privileged_fields`
    image       Box (H, W, 3) uint8    [sensors, all] newest camera frame, RGB
    imu         Box (W_imu, 6) float32 [sensors, all] accel xyz m/s^2, gyro xyz rad/s, oldest first
    proprio     Box (Dp,) float32      [sensors, all] wheel encoders and odometry
Action: Dict(skill=Discrete(K), params=Box(P,)) with P the flat parameter slots of all skills in contract
order (`SkillContract.layout`); the robot clips it to the contract and reports what it applied in `info`.
Episodes end with `terminated` on success, collision or a non-finite state and `truncated` on timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sim.backends import make_backend
from sim.config import SimConfig
from sim.real_robot_proxy import ProxyConfig, RealRobotProxy
from sim.robot_interface import Observation, Outcome, RobotInterface

ObsMode = Literal["privileged", "sensors", "all"]
OBS_MODES: tuple[str, ...] = ("privileged", "sensors", "all")
CONFIG_DIR = Path(__file__).resolve().parent / "configs"

# id -> keyword arguments of DiffBotEnv
ENV_IDS: dict[str, dict[str, Any]] = {
    "agent/DiffBot-v0": {"obs_mode": "sensors"},  # the student's view: camera, IMU, proprioception
    "agent/DiffBotPrivileged-v0": {"obs_mode": "privileged"},  # the teacher's view, no rendering
    "agent/DiffBotProxy-v0": {"obs_mode": "all", "proxy": CONFIG_DIR / "proxy.yaml"},  # robot proxy + teacher
    # the same robot on Isaac Sim (GPU hosts; elsewhere gym.make fails at once naming what is missing)
    "agent/DiffBotPrivilegedIsaac-v0": {"obs_mode": "privileged", "config": CONFIG_DIR / "isaacsim.yaml"},
}


class DiffBotEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """One env of a robot backend (MuJoCo by default), optionally behind the real-robot proxy."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        config: SimConfig | str | Path | dict[str, Any] | None = None,
        obs_mode: ObsMode = "sensors",
        proxy: ProxyConfig | str | Path | dict[str, Any] | None = None,
        action_repeat: int = 1,
    ) -> None:
        """Args:
        config: SimConfig, YAML path or dict (default sim/configs/mujoco.yaml); the camera is on exactly
            when `obs_mode` includes the image.
        proxy: ProxyConfig, YAML path or dict; None = the bare backend.
        action_repeat: control periods each action is held. Deciding less often (e.g. 4: 5 Hz on the 20 Hz
            loop) shortens the credit-assignment horizon of teacher training; the policy can still be
            queried every period at deployment.
        """
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        self.action_repeat = action_repeat
        cfg = _load(SimConfig, config if config is not None else CONFIG_DIR / "mujoco.yaml")
        # The observation mode decides rendering: privileged-state training must not pay for frames.
        camera = cfg.camera.model_copy(update={"enabled": obs_mode != "privileged"})
        cfg = cfg.model_copy(update={"num_envs": 1, "camera": camera})
        self.config = SimConfig.from_dict(cfg.model_dump())  # validated again after the update
        self.obs_mode = obs_mode
        robot: RobotInterface = make_backend(self.config)
        if proxy is not None:
            robot = RealRobotProxy(robot, _load(ProxyConfig, proxy))
        self.robot = robot
        spec = robot.spec
        self.contract = spec.contract
        max_steps = float(np.ceil(self.config.task.time_limit_s * spec.control_hz))
        obs: dict[str, spaces.Space] = {
            "skill": spaces.Discrete(self.contract.num_skills),
            "progress": spaces.Box(0.0, 1.0, (1,), np.float32),
            "step": spaces.Box(0.0, max_steps, (1,), np.float32),
        }
        if obs_mode in ("privileged", "all"):
            obs["privileged"] = spaces.Box(-np.inf, np.inf, (len(spec.privileged_fields),), np.float32)
        if obs_mode in ("sensors", "all"):
            obs["image"] = spaces.Box(0, 255, spec.image_shape, np.uint8)
            obs["imu"] = spaces.Box(-np.inf, np.inf, (spec.imu_window, 6), np.float32)
            obs["proprio"] = spaces.Box(-np.inf, np.inf, (len(spec.proprio_fields),), np.float32)
        self.observation_space = spaces.Dict(obs)
        layout = self.contract.layout
        self.action_space = spaces.Dict(
            {
                "skill": spaces.Discrete(self.contract.num_skills),
                "params": spaces.Box(layout.low.astype(np.float32), layout.high.astype(np.float32)),
            }
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        if not self.robot.connected:
            self.robot.connect()
        # Without a seed, continue the robot's own generator (seeded by the first seeded reset).
        obs = self.robot.reset(seed=seed)
        return self._obs(obs), self._info(obs)

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Hold the action for `action_repeat` control periods (fewer if the episode ends).

        The reward and `info["reward_terms"]` are summed over them; the observation is the last one.
        """
        skill = np.asarray([action["skill"]]).reshape(1)
        params = np.asarray(action["params"], dtype=np.float64).reshape(1, -1)
        reward, terms = 0.0, dict.fromkeys(self.robot.spec.reward_terms, 0.0)
        for _ in range(self.action_repeat):
            applied = self.robot.send_action(skill, params)
            obs = self.robot.step()
            reward += float(obs.task.reward[0])
            for name, value in obs.task.reward_terms.items():
                terms[name] += float(value[0])
            if obs.task.done[0]:
                break
        outcome = int(obs.task.outcome[0])
        info = self._info(obs)
        info.update(
            reward_terms=terms,
            applied_skill=int(applied.skill[0]),
            applied_params=applied.params[0],
            clipped=bool(applied.clipped[0]),
        )
        terminated = outcome in (Outcome.SUCCESS, Outcome.COLLISION, Outcome.NAN)
        return self._obs(obs), reward, terminated, outcome == Outcome.TIMEOUT, info

    def close(self) -> None:
        self.robot.close()

    def _obs(self, obs: Observation) -> dict[str, Any]:
        out: dict[str, Any] = {
            "skill": int(obs.skill[0]),
            "progress": obs.task.progress[:1].astype(np.float32),
            "step": obs.task.step[:1].astype(np.float32),
        }
        if self.obs_mode in ("privileged", "all"):
            out["privileged"] = obs.privileged[0]
        if self.obs_mode in ("sensors", "all"):
            out["image"], out["imu"], out["proprio"] = obs.image[0], obs.imu[0], obs.proprio[0]
        return out

    def _info(self, obs: Observation) -> dict[str, Any]:
        """Task details and sensor ages that are not part of the learning input.

        Times are relative (episode time, sample ages) so that a seeded episode is reproducible; the robot's
        absolute stamps are in `self.robot.observation()`.
        """
        info: dict[str, Any] = {
            "episode_time_s": float(obs.task.step[0]) / self.robot.spec.control_hz,
            "outcome": obs.task.reasons[0],
            "success": bool(obs.task.success[0]),
            "reward_terms": {k: float(v[0]) for k, v in obs.task.reward_terms.items()},
        }
        if obs.image_stamp_s is not None:
            # rounded to 1 us: the difference of two large stamps carries float noise from their magnitude
            info["image_age_s"] = round(float(obs.time_s[0] - obs.image_stamp_s[0]), 6)
        return info


def _load(cls: type, value: Any) -> Any:
    """A config from an instance, a YAML path or a dict."""
    if isinstance(value, cls):
        return value
    if isinstance(value, (str, Path)):
        return cls.from_yaml(value)
    return cls.from_dict(value)


for _env_id, _kwargs in ENV_IDS.items():
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=DiffBotEnv, kwargs=_kwargs)
