"""Gymnasium view of a robot backend (one env), registered as `agent/DiffBot-v0` and variants.

Importing this module registers the environments, so either `import sim.gym_env` first or name the module
in the id: `gymnasium.make("sim.gym_env:agent/DiffBotPrivileged-v0")`. Vectorise with Gymnasium's vector
API: `gymnasium.make_vec(id, num_envs=16)` uses the registered `vector_entry_point`, N envs in one backend
object (`sim.vector_env.DiffBotVectorEnv`, the fast way); `vectorization_mode="sync"` or `"async"` wraps N
copies of this single env instead.

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

from policies.skill_contract import SkillContract
from sim.backends import make_backend
from sim.config import SimConfig
from sim.real_robot_proxy import ProxyConfig, RealRobotProxy
from sim.robot_interface import Observation, Outcome, RobotInterface, RobotSpec

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
        self.config, self.robot = make_robot(config, obs_mode, proxy, num_envs=1)
        self.obs_mode, self.action_repeat = obs_mode, check_action_repeat(action_repeat)
        self.contract = self.robot.spec.contract
        self.observation_space = observation_space(self.robot.spec, self.config, obs_mode)
        self.action_space = action_space(self.contract)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        if not self.robot.connected:
            self.robot.connect()
        # Without a seed, continue the robot's own generator (seeded by the first seeded reset).
        obs = self.robot.reset(seed=seed)
        return self._obs(obs), _first(observation_info(obs, self.robot.spec))

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Hold the action for `action_repeat` control periods (fewer if the episode ends).

        The reward and `info["reward_terms"]` are summed over them; the observation is the last one.
        """
        skill = np.asarray([action["skill"]]).reshape(1)
        params = np.asarray(action["params"], dtype=np.float64).reshape(1, -1)
        obs, reward, terminated, truncated, info = repeat_step(self.robot, skill, params, self.action_repeat)
        return self._obs(obs), float(reward[0]), bool(terminated[0]), bool(truncated[0]), _first(info)

    def close(self) -> None:
        self.robot.close()

    def _obs(self, obs: Observation) -> dict[str, Any]:
        out = _first(observation_arrays(obs, self.obs_mode))
        out["skill"] = int(out["skill"])
        return out


def make_robot(
    config: SimConfig | str | Path | dict[str, Any] | None,
    obs_mode: ObsMode,
    proxy: ProxyConfig | str | Path | dict[str, Any] | None,
    num_envs: int,
) -> tuple[SimConfig, RobotInterface]:
    """The validated SimConfig (camera on exactly when `obs_mode` needs images) and its unconnected robot."""
    if obs_mode not in OBS_MODES:
        raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
    cfg = _load(SimConfig, config if config is not None else CONFIG_DIR / "mujoco.yaml")
    # The observation mode decides rendering: privileged-state training must not pay for frames.
    camera = cfg.camera.model_copy(update={"enabled": obs_mode != "privileged"})
    cfg = cfg.model_copy(update={"num_envs": num_envs, "camera": camera})
    cfg = SimConfig.from_dict(cfg.model_dump())  # validated again after the update
    robot: RobotInterface = make_backend(cfg)
    if proxy is not None:
        robot = RealRobotProxy(robot, _load(ProxyConfig, proxy))
    return cfg, robot


def check_action_repeat(action_repeat: int) -> int:
    """`action_repeat` if it is a whole number of control periods >= 1, else a ValueError naming it."""
    if action_repeat < 1:
        raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
    return int(action_repeat)


def observation_space(spec: RobotSpec, cfg: SimConfig, obs_mode: ObsMode) -> spaces.Dict:
    """Observation space of one env (see the module docstring for the keys)."""
    max_steps = float(np.ceil(cfg.task.time_limit_s * spec.control_hz))
    obs: dict[str, spaces.Space] = {
        "skill": spaces.Discrete(spec.contract.num_skills),
        "progress": spaces.Box(0.0, 1.0, (1,), np.float32),
        "step": spaces.Box(0.0, max_steps, (1,), np.float32),
    }
    if obs_mode in ("privileged", "all"):
        obs["privileged"] = spaces.Box(-np.inf, np.inf, (len(spec.privileged_fields),), np.float32)
    if obs_mode in ("sensors", "all"):
        obs["image"] = spaces.Box(0, 255, spec.image_shape, np.uint8)
        obs["imu"] = spaces.Box(-np.inf, np.inf, (spec.imu_window, 6), np.float32)
        obs["proprio"] = spaces.Box(-np.inf, np.inf, (len(spec.proprio_fields),), np.float32)
    return spaces.Dict(obs)


def action_space(contract: SkillContract) -> spaces.Dict:
    """Action space of one env: the skill id and the flat parameter slots in contract bounds."""
    layout = contract.layout
    return spaces.Dict(
        {
            "skill": spaces.Discrete(contract.num_skills),
            "params": spaces.Box(layout.low.astype(np.float32), layout.high.astype(np.float32)),
        }
    )


def observation_arrays(obs: Observation, obs_mode: ObsMode) -> dict[str, np.ndarray]:
    """The observation of N envs as batched arrays: skill (N,), progress (N, 1), privileged (N, Dq), ..."""
    out: dict[str, np.ndarray] = {
        "skill": obs.skill.copy(),
        "progress": obs.task.progress[:, None].astype(np.float32),  # (N,) -> (N, 1)
        "step": obs.task.step[:, None].astype(np.float32),  # (N,) -> (N, 1)
    }
    if obs_mode in ("privileged", "all"):
        out["privileged"] = obs.privileged
    if obs_mode in ("sensors", "all"):
        out["image"], out["imu"], out["proprio"] = obs.image, obs.imu, obs.proprio
    return out


def observation_info(obs: Observation, spec: RobotSpec) -> dict[str, Any]:
    """Task details and sensor ages of all N envs that are not part of the learning input, each (N,).

    Times are relative (episode time, sample ages) so that a seeded episode is reproducible; the robot's
    absolute stamps are in `robot.observation()`.
    """
    info: dict[str, Any] = {
        "episode_time_s": obs.task.step / spec.control_hz,
        "outcome": np.array(obs.task.reasons, dtype=object),
        "success": obs.task.success,
        "reward_terms": {k: v.astype(np.float64) for k, v in obs.task.reward_terms.items()},
    }
    if obs.image_stamp_s is not None:
        # rounded to 1 us: the difference of two large stamps carries float noise from their magnitude
        info["image_age_s"] = np.round(obs.time_s - obs.image_stamp_s, 6)
    return info


def repeat_step(
    robot: RobotInterface, skill: np.ndarray, params: np.ndarray, action_repeat: int
) -> tuple[Observation, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Hold one action per env for `action_repeat` control periods; an env whose episode ends holds.

    Shapes: skill (N,), params (N, P) -> the last Observation, reward (N,) float64, terminated (N,),
    truncated (N,) and the info of `observation_info` with `reward_terms` summed over the periods (an
    ended env scores 0) and the applied action (applied_skill (N,), applied_params (N, P), clipped (N,)).
    """
    spec = robot.spec
    n = spec.num_envs
    reward, terms = np.zeros(n), {name: np.zeros(n) for name in spec.reward_terms}
    for _ in range(action_repeat):
        applied = robot.send_action(skill, params)
        obs = robot.step()
        reward += obs.task.reward
        for name, value in obs.task.reward_terms.items():
            terms[name] += value
        if obs.task.done.all():
            break
    info = observation_info(obs, spec)
    info.update(
        reward_terms=terms,
        applied_skill=applied.skill,
        applied_params=applied.params,
        clipped=applied.clipped,
    )
    outcome = obs.task.outcome
    terminated = np.isin(outcome, (Outcome.SUCCESS, Outcome.COLLISION, Outcome.NAN))
    return obs, reward, terminated, outcome == Outcome.TIMEOUT, info


def _first(batched: dict[str, Any]) -> dict[str, Any]:
    """Env 0 of a batched dict (nested dicts too), as Python scalars where the value is a scalar."""
    out: dict[str, Any] = {}
    for key, value in batched.items():
        if isinstance(value, dict):
            out[key] = _first(value)
        else:
            out[key] = value[0].item() if isinstance(value[0], np.generic) else value[0]
    return out


def _load(cls: type, value: Any) -> Any:
    """A config from an instance, a YAML path or a dict."""
    if isinstance(value, cls):
        return value
    if isinstance(value, (str, Path)):
        return cls.from_yaml(value)
    return cls.from_dict(value)


for _env_id, _kwargs in ENV_IDS.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point=DiffBotEnv,
            vector_entry_point="sim.vector_env:DiffBotVectorEnv",  # imported when first used
            kwargs=_kwargs,
        )
