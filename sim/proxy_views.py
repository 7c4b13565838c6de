"""The same scenes as the sim renders them and as a proxy delivers them, and what each costs per frame.

`side_by_side` is what `agent render` writes: one column per seed, the sim's frame above the proxy's, taken
when each episode starts (the robot settled at its start pose, the frame a reset returns: never delayed or
dropped), so both rows show one arena from one pose. `frame_cost` is `agent bench proxy`: the wall time of a
control step with the camera on, per frame captured, for the bare backend and for each proxy, in rounds that
interleave them (a host's stalls then fall on all alike), so their ratios compare within one run.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from sim.config import SimConfig
from sim.real_robot_proxy import ProxyConfig, RealRobotProxy
from sim.robot_interface import RobotInterface


def _robot(sim_cfg: SimConfig, proxy: ProxyConfig | None) -> RobotInterface:
    from sim.backends import make_backend

    backend = make_backend(sim_cfg)
    return backend if proxy is None else RealRobotProxy(backend, proxy)


def first_frames(sim_cfg: SimConfig, proxy: ProxyConfig | None, seeds: list[int]) -> np.ndarray:
    """The frame each seed's episode starts on, (S, H, W, 3) uint8, one env per seed."""
    cfg = sim_cfg.model_copy(update={"num_envs": 1})
    out = []
    with _robot(cfg, proxy) as robot:
        for seed in seeds:
            obs = robot.reset(seed=seed)
            if obs.image is None:
                raise ValueError("the sim config's camera is off (camera.enabled: false): nothing to render")
            out.append(obs.image[0])
    return np.stack(out)


def side_by_side(sim_cfg: SimConfig, proxy: ProxyConfig, seeds: list[int], out: Path, scale: int = 3) -> Path:
    """A PNG: the sim's frames (top row) over the proxy's (bottom row), one column per seed, each pixel
    `scale` x `scale` (nearest, so the proxy's own blur and blocks show as they are)."""
    from PIL import Image

    rows = [first_frames(sim_cfg, p, seeds) for p in (None, proxy)]  # 2 x (S, H, W, 3)
    gap = np.full((rows[0].shape[1], 2, 3), 255, dtype=np.uint8)  # white between columns
    lines = [np.concatenate([x for f in row for x in (f, gap)][:-1], axis=1) for row in rows]
    image = np.concatenate([lines[0], np.full((2, lines[0].shape[1], 3), 255, np.uint8), lines[1]], axis=0)
    out.parent.mkdir(parents=True, exist_ok=True)
    h, w = image.shape[:2]
    Image.fromarray(image).resize((w * scale, h * scale), Image.NEAREST).save(out)
    return out


def frame_cost(
    sim_cfg: SimConfig, proxies: dict[str, ProxyConfig | None], steps: int, rounds: int, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Per name: median over `rounds` of the wall ms per camera frame rendered over `steps` control steps
    (driving in circles; an env whose episode ends renders no more, so frames are counted, not assumed), and
    its ratio to the first name's. Every robot is built and warmed up first."""
    robots = {name: _robot(sim_cfg, p) for name, p in proxies.items()}
    n = sim_cfg.num_envs
    per_frame: dict[str, list[float]] = {name: [] for name in robots}
    try:
        for robot in robots.values():
            robot.connect()
        contract = next(iter(robots.values())).spec.contract
        skill, params = contract.action("drive", speed=0.3, curvature=1.5)
        for _ in range(rounds + 1):  # the first round warms caches up and is not counted
            for name, robot in robots.items():
                backend = robot.robot if isinstance(robot, RealRobotProxy) else robot
                robot.reset(seed=seed)  # every env running: the rounds render alike
                stamps, frames = backend.observation().image_stamp_s, 0
                t0 = time.perf_counter()
                for _ in range(steps):
                    robot.send_action(np.full(n, skill), np.tile(params, (n, 1)))
                    robot.step()
                    new = backend.observation().image_stamp_s
                    frames += int(np.sum(new != stamps))
                    stamps = new
                per_frame[name].append((time.perf_counter() - t0) / max(frames, 1))
    finally:
        for robot in robots.values():
            robot.close()
    medians = {name: float(np.median(v[1:])) for name, v in per_frame.items()}
    first = next(iter(medians))
    return {name: {"ms_per_frame": round(m * 1e3, 3), f"vs_{first}": round(m / medians[first], 3)}
            for name, m in medians.items()}  # fmt: skip
