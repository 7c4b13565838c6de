"""Seeded evaluation of the greedy teacher or the deployed student, with a Wilson 95% interval on success.

Episode i always draws its layout from seed EVAL_SEED + i, whichever of the N parallel envs runs it, so a
report depends on the policy and the episode count only (for a fixed N: a row's float rounding can
depend on the batch it is computed in). A report is the aggregates over the episodes' results
(`opd.eval_report`), so the shards of one evaluation merge into the same report.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from opd.episode_video import Recording, recorded
from opd.eval_report import EpisodeResult, Shard, finish
from opd.eval_report import wilson_interval as wilson_interval  # where the benchmarks import it from
from policies.artifact import MANIFEST, Artifact, sha256_file
from policies.config import PROJECT_ROOT, Config
from policies.embedding_window import EmbeddingWindow
from policies.runtime.student_runtime import StudentRuntime
from policies.teacher_policy import TeacherPolicy
from policies.teacher_view import TeacherView, ViewConfig, ViewObject

if TYPE_CHECKING:
    from sim.vector_env import DiffBotVectorEnv

# Evaluation episodes use seeds EVAL_SEED + i (validation, by convention, 20000 + i). Training envs draw
# from seed + i (+ 1000 for the demonstrations) and continue their own generators; a resumed run reseeds
# them far above both (`training_reset_seed`), so no training episode repeats an evaluation one.
EVAL_SEED = 10_000
RESUME_SEED = 100_000_000  # a resumed training run's envs draw from RESUME_SEED + seed + steps + i


def training_reset_seed(seed: int, steps: int) -> int:
    """The seed of a training run's first reset after `steps` decisions: its own seed at the start, and
    on a resume seed + steps above RESUME_SEED. seed + steps alone reaches the evaluation seeds: a run
    resumed at 10,000 decisions would have trained on the first held-out layouts."""
    return seed if steps == 0 else RESUME_SEED + seed + steps


Policy = Callable[[dict, dict, np.ndarray], tuple[np.ndarray, np.ndarray]]
# Hears each episode's end: (episodes done, successes among them), for a progress display.
OnProgress = Callable[[int, int], None]


def project_path(path: str | Path) -> str:
    """A path as a report records it: relative to the project root when inside it (the same file on every
    checkout), else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def config_sha256(cfg: Config) -> str:
    """SHA-256 of a resolved config's canonical JSON (every field, defaults included, keys sorted): files
    that resolve alike (`extends:`, comments, key order) hash alike, and a changed default changes it. A
    field holding a path inside the project counts as the project names it (`project_path`), so one config
    hashes alike on every checkout."""

    def portable(value: object) -> object:
        if isinstance(value, dict):
            return {k: portable(v) for k, v in value.items()}
        if isinstance(value, list):
            return [portable(v) for v in value]
        if isinstance(value, str) and Path(value).is_absolute():
            return project_path(value)
        return value

    text = json.dumps(portable(cfg.model_dump(mode="json")), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def artifact_record(artifact: Artifact) -> dict[str, str]:
    """Which student an evaluation ran: its directory, the SHA-256 of its manifest.json (which lists every
    file's hash, so it names this export) and of its torch weights (the same student across exports)."""
    return {"path": project_path(artifact.root), "manifest_sha256": sha256_file(artifact.root / MANIFEST),
            "weights_sha256": artifact.weights_hash}  # fmt: skip


def checkpoint_record(path: str | Path) -> dict[str, str]:
    """Which teacher an evaluation ran: its checkpoint and the checkpoint's SHA-256."""
    return {"path": project_path(path), "sha256": sha256_file(Path(path))}


def measured_on(envs: DiffBotVectorEnv, sim_config: object, proxy: Path | None, seed: int,
                episodes: int, num_envs: int) -> dict:  # fmt: skip
    """What an evaluation measured on, for its report: the sim backend, the sim config and the proxy config
    (where each came from, None for one given as an object, and the SHA-256 of the config as it ran,
    `config_sha256`), the seeds of the whole list (episode i on first + i, whichever shard runs it) and
    `num_envs`, the most episodes run side by side (the setting: every shard of one evaluation has it). A
    report saying only `proxy: true` read the same for any proxy."""
    from sim.gym_env import CONFIG_DIR
    from sim.real_robot_proxy import RealRobotProxy

    def where(source: object) -> str | None:
        return project_path(source) if isinstance(source, (str, Path)) else None

    robot = envs.robot
    return {
        "sim": envs.config.backend,
        "proxy": proxy is not None,
        "sim_config": {"path": where(sim_config if sim_config is not None else CONFIG_DIR / "mujoco.yaml"),
                       "sha256": config_sha256(envs.config)},
        "proxy_config": {"path": where(proxy), "sha256": config_sha256(robot.cfg)}
        if isinstance(robot, RealRobotProxy) else None,
        "seeds": {"first": seed, "count": episodes},
        "envs": num_envs,
    }  # fmt: skip


def env_count(episodes: int, num_envs: int, seed: int) -> int:
    """Envs to run `episodes` side by side on at most `num_envs`; a clear error for counts that cannot be
    (no episode at all used to play one and then fail on its bookkeeping)."""
    for name, value, least in (("episodes", episodes, 1), ("envs", num_envs, 1), ("seed", seed, 0)):
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")
    return min(num_envs, episodes)


def evaluate_teacher(
    teacher: TeacherPolicy,
    episodes: int,
    proxy: Path | None = None,
    sim_config: str | Path | None = None,
    seed: int = EVAL_SEED,
    num_envs: int = 16,
    on_progress: OnProgress | None = None,
    shard: Shard | None = None,
    video: Recording | None = None,
) -> dict:
    """Run `episodes` seeded episodes with the greedy teacher, holding each decision for the teacher's
    `action_repeat` control periods; return the report dict (see `agent eval teacher --json`), with what
    it measured on (`measured_on`). `on_progress` hears each episode's end. With `shard`, only its
    episodes of the list run and the return is the shard's record (`opd.eval_report`). With `video`, env
    0's first episodes are recorded as they run (`opd.episode_video`); the report is the same."""
    from sim.vector_env import DiffBotVectorEnv

    n = env_count(episodes, num_envs, seed)
    listed = (shard or Shard()).episodes(episodes)
    n = min(n, len(listed))  # a shard's envs: as many as it has episodes, at most
    envs = DiffBotVectorEnv(
        n, sim_config, "privileged", proxy, teacher.cfg.action_repeat, AutoresetMode.DISABLED
    )

    sightings = teacher.new_memory(n)  # a remembering view's state, per env

    def policy(obs: dict, info: dict, started: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if sightings is not None:
            sightings.reset(started)
        return teacher.act(teacher.features(obs["privileged"], obs["skill"], memory=sightings))

    header = measured_on(envs, sim_config, proxy, seed, episodes, num_envs)
    with recorded(policy, envs, video, "teacher") as policy:
        return finish(header, run_episodes(envs, policy, listed, seed, on_progress=on_progress), shard)


def biased_student(artifact: str | Path, skill_bias: dict[str, float], out_dir: str | Path) -> Path:
    """A diagnostic copy of a student artifact whose head adds `skill_bias` ({skill name: B}) to its skill
    logits (the bias of the logit layer), so the deployed argmax, and with it the parameters the head gives
    the chosen skill, shift towards or away from a skill: how much a more or less eager skill would
    change. Written as a head version of the artifact (`policies.export.export_head_version`) from its
    torch weights; returns its directory."""
    from policies.export import export_head_version
    from policies.runtime.torch_backend import build_module

    base = Artifact.load(artifact)
    student, predictor = build_module(base, "policy").policy, build_module(base, "predictor")
    with torch.no_grad():
        for name, b in skill_bias.items():
            student.head.logits.bias[base.contract.skill_id(name)] += b
    return export_head_version(base, student, predictor, out_dir, 1)


class StudentDriver:
    """The deployed student acting alone on N envs: it encodes each new camera frame and acts on the
    window of its last frames, and the robot holds that action until the next frame (as the ROS graph
    does)."""

    def __init__(self, runtime: StudentRuntime, num_envs: int) -> None:
        self.runtime = runtime
        contract = runtime.contract
        self.skill = np.full(num_envs, contract.safe_skill_id, dtype=np.int64)
        self.params = np.tile(contract.layout.defaults, (num_envs, 1))
        self.frame_time = np.full(num_envs, np.nan)  # episode time of the frame acted on, s
        self.windows = EmbeddingWindow(num_envs, runtime.memory, runtime.embed_dim)

    def __call__(self, obs: dict, info: dict, started: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # a frame is new when its capture time (episode time - age) differs from the last one acted on
        stamp = np.round(info["episode_time_s"] - info["image_age_s"], 6)
        new = started | (stamp != self.frame_time)
        if new.any():
            idx = np.flatnonzero(new)
            self.windows.reset(np.flatnonzero(started))
            emb, _ = self.runtime.encode(
                obs["image"][idx],
                obs["imu"][idx],
                obs["skill"][idx].astype(np.int64),
                obs["progress"][idx, 0],
                obs["step"][idx, 0],
            )
            _, skill, params = self.runtime.act_window(self.windows.push(idx, emb))
            self.skill[idx], self.params[idx] = skill, params
            self.frame_time[idx] = stamp[idx]
        return self.skill.copy(), self.params.copy()


# Diagnostic assists (`agent eval student --assist`): where the student loses. Each overrides the student
# in one regime of the current target marker, judged from the true state: unseen = not yet inside the
# camera's field of view since it became the target; out of view = not inside it now; far = farther than
# the assist's range.
ASSISTS = ("teacher_unseen", "search_unseen", "teacher_out_of_view", "teacher_far_in_view",
           "teacher_far_out_of_view")  # fmt: skip
SEARCH_TURN_RADPS = 1.2  # search_unseen: turn in place to the left at this rate
ASSIST_RANGE_M = 2.0  # teacher_far_*: the target counts as far beyond this distance, m


class AssistedDriver:
    """The student driver, overridden in one regime of the target (`ASSISTS`) by the teacher or by a
    scripted search. A diagnostic: success with an assist bounds what fixing that regime is worth."""

    def __init__(
        self, student: StudentDriver, teacher: TeacherPolicy, assist: str, fields: tuple[str, ...],
        half_fov_deg: float, range_m: float = ASSIST_RANGE_M,
    ) -> None:  # fmt: skip
        if assist not in ASSISTS:
            raise ValueError(f"assist {assist!r}: choose one of {ASSISTS}")
        if not range_m > 0:
            raise ValueError(f"assist range {range_m} m must be > 0")
        self.student, self.teacher, self.assist, self.range_m = student, teacher, assist, range_m
        target = ViewObject(x="target_dx_m", y="target_dy_m")
        self.view = TeacherView(ViewConfig(half_fov_deg=half_fov_deg, objects=[target]), fields)
        self.progress = fields.index("progress")
        self.target_xy = [fields.index("target_dx_m"), fields.index("target_dy_m")]
        n = len(student.skill)
        self.target = np.full(n, -1.0)  # progress value of the target being tracked (one per marker)
        self.seen = np.zeros(n, dtype=bool)  # that target has been inside the field of view
        self.steps = self.assisted = 0  # control steps driven, of them overridden
        self.sightings = teacher.new_memory(n)  # the teacher's, when its view remembers: fed every step

    def __call__(self, obs: dict, info: dict, started: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        skill, params = self.student(obs, info, started)
        privileged = obs["privileged"]
        if self.sightings is not None:
            self.sightings.reset(started)
        teacher_seen = self.teacher.seen(privileged, self.sightings)  # (N, Dq): every env's memory moves on
        in_view = self.view.visible(privileged)[:, 0]
        new_target = started | (privileged[:, self.progress] != self.target)
        self.target = privileged[:, self.progress].astype(np.float64)
        self.seen = np.where(new_target, in_view, self.seen | in_view)
        far = np.hypot(*privileged[:, self.target_xy].T) > self.range_m
        override = {
            "teacher_out_of_view": ~in_view,
            "teacher_far_in_view": far & in_view,
            "teacher_far_out_of_view": far & ~in_view,
        }.get(self.assist, ~self.seen)
        if override.any():
            idx = np.flatnonzero(override)
            if self.assist == "search_unseen":
                contract = self.teacher.contract
                turn = contract.skill_id("turn_in_place")
                skill[idx], params[idx] = contract.action(turn, turn_rate=SEARCH_TURN_RADPS)
            else:
                feats = self.teacher.features(privileged[idx], obs["skill"][idx], seen=teacher_seen[idx])
                skill[idx], params[idx] = self.teacher.act(feats)
        # envs that hold an ended episode (run_episodes waits for the others) are not counted
        running = info.get("running", np.ones(len(skill), dtype=bool))
        self.steps += int(running.sum())
        self.assisted += int((override & running).sum())
        return skill, params


WITNESS_S = 0.5  # the collision diagnostic looks back this long before each collision, s


class CollisionWitness:
    """A driver wrapper for the collision diagnostic (`agent eval student --collisions`): over each env's
    last `window` control steps it notes whether the nearest obstacle was inside the camera's view and the
    skill the driver and the teacher (acting on its own view, not driving) chose; at each collision it
    keeps what was hit, those notes, and where the nearest obstacle was at impact (in view or not, its
    bearing). It tells a student that does not see what it hits from one that sees it and does not react,
    and a head-on hit from a side clip of an obstacle that has left the view."""

    def __init__(
        self, driver: Policy, teacher: TeacherPolicy, num_envs: int, fields: tuple[str, ...],
        half_fov_deg: float, control_hz: int, window_s: float = WITNESS_S,
    ) -> None:  # fmt: skip
        from sim.robots.diffbot.constants import OBSTACLE_RADIUS_M

        self.driver, self.teacher = driver, teacher
        nearest = ViewObject(x="obstacle0_dx_m", y="obstacle0_dy_m", radius_m=OBSTACLE_RADIUS_M)
        self.view = TeacherView(ViewConfig(half_fov_deg=half_fov_deg, objects=[nearest]), fields)
        self.gap, self.wall = fields.index("obstacle0_gap_m"), fields.index("wall_gap_m")
        self.dx, self.dy = fields.index("obstacle0_dx_m"), fields.index("obstacle0_dy_m")
        self.window_s, window = window_s, max(1, round(window_s * control_hz))
        self.sightings = teacher.new_memory(num_envs)  # the teacher's, when its view remembers
        self.recent = [deque(maxlen=window) for _ in range(num_envs)]  # (in view, own skill, teacher's)
        self.hazard = np.full(num_envs, "obstacle", dtype=object)  # the nearer of the two at the last step
        self.bearing = np.zeros(num_envs)  # the nearest obstacle's bearing at the last step, deg, + = left
        # (hazard, in view in the window, own skills, teacher's, in view at impact, bearing at impact)
        self.collisions: list[tuple[str, bool, tuple[int, ...], tuple[int, ...], bool, float]] = []

    def __call__(self, obs: dict, info: dict, started: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        skill, params = self.driver(obs, info, started)
        privileged = obs["privileged"]
        if self.sightings is not None:
            self.sightings.reset(started)
        seen = self.teacher.seen(privileged, self.sightings)
        would, _ = self.teacher.act(self.teacher.features(privileged, obs["skill"], seen=seen))
        in_view = self.view.visible(privileged)[:, 0]
        self.hazard = np.where(privileged[:, self.wall] < privileged[:, self.gap], "wall", "obstacle")
        self.bearing = np.degrees(np.arctan2(privileged[:, self.dy], privileged[:, self.dx]))
        for i, recent in enumerate(self.recent):
            if started[i]:
                recent.clear()
            recent.append((bool(in_view[i]), int(skill[i]), int(would[i])))
        return skill, params

    def ended(self, env: int, outcome: str) -> None:
        """`run_episodes`' episode-end hook: keep env's notes if it collided."""
        if outcome == "collision" and self.recent[env]:
            in_view, own, would = zip(*self.recent[env], strict=True)
            at_impact = (bool(in_view[-1]), float(self.bearing[env]))
            self.collisions.append((str(self.hazard[env]), any(in_view), own, would, *at_impact))

    def report(self) -> dict:
        """Counts over the collisions: what was hit, the obstacles in view, each side's most chosen skill."""
        names = self.teacher.contract.names

        def most_chosen(side: int) -> dict[str, int]:  # collisions by the skill most chosen in the window
            return dict(Counter(names[Counter(c[side]).most_common(1)[0][0]] for c in self.collisions))

        obstacles = [c for c in self.collisions if c[0] == "obstacle"]
        bearings = [abs(c[5]) for c in obstacles]
        quartiles = np.percentile(bearings, [25, 50, 75]).round(1).tolist() if bearings else None
        steps = [(o, w) for c in self.collisions for o, w in zip(c[2], c[3], strict=True)]
        return {
            "window_s": self.window_s,
            "count": len(self.collisions),
            "hazard": dict(Counter(c[0] for c in self.collisions)),
            "obstacle_in_view": sum(c[1] for c in obstacles),  # the nearest obstacle, in the window
            "obstacle_in_view_at_impact": sum(c[4] for c in obstacles),
            # |bearing| of the obstacle hit, deg (0 = dead ahead, 90 = abeam): quartiles
            "impact_bearing_deg": quartiles,
            "skill": most_chosen(2),
            "teacher_skill": most_chosen(3),
            "agreement": round(float(np.mean([o == w for o, w in steps])), 4) if steps else None,
        }


def evaluate_student(
    runtime: StudentRuntime,
    episodes: int,
    proxy: Path | None = None,
    sim_config: str | Path | None = None,
    seed: int = EVAL_SEED,
    num_envs: int = 16,
    assist: str | None = None,
    teacher: TeacherPolicy | None = None,
    assist_range_m: float = ASSIST_RANGE_M,
    collisions: bool = False,
    on_progress: OnProgress | None = None,
    shard: Shard | None = None,
    video: Recording | None = None,
) -> dict:
    """The student acting alone (no teacher) for `episodes` seeded episodes, its camera at the artifact's
    image size; the same report as `evaluate_teacher`, and which student it was (`artifact_record`). With
    `assist` (`ASSISTS`; the teacher for the teacher's), the diagnostic `AssistedDriver` drives and the
    report says how often it overrode. With `collisions` (and the teacher) the report says what each
    collision hit and what was chosen before it (`CollisionWitness`). With `shard`, as `evaluate_teacher`;
    the diagnostics count over one process's episodes and are refused there. `video`: as
    `evaluate_teacher`'s."""
    from sim.config import SimConfig
    from sim.gym_env import CONFIG_DIR
    from sim.vector_env import DiffBotVectorEnv

    if shard is not None and (assist or collisions):
        raise ValueError("--assist and --collisions count over one process's episodes: run them without "
                         "--shard-out")  # fmt: skip
    n = env_count(episodes, num_envs, seed)
    listed = (shard or Shard()).episodes(episodes)
    n = min(n, len(listed))  # a shard's envs: as many as it has episodes, at most
    cfg = SimConfig.from_yaml(sim_config or CONFIG_DIR / "mujoco.yaml")
    h, w = runtime.image_hw
    cfg = cfg.model_copy(update={"camera": cfg.camera.model_copy(update={"height": h, "width": w})})
    if (assist or collisions) and teacher is None:
        raise ValueError("an assisted evaluation or the collision diagnostic needs the teacher")
    envs = DiffBotVectorEnv(
        n, SimConfig.from_dict(cfg.model_dump()), "all" if assist or collisions else "sensors", proxy, 1,
        AutoresetMode.DISABLED,
    )  # fmt: skip
    from sim.robots.diffbot.constants import CAMERA_FOVY_DEG

    half_fov = math.degrees(math.atan(math.tan(math.radians(CAMERA_FOVY_DEG) / 2) * w / h))
    fields = envs.robot.spec.privileged_fields
    student = StudentDriver(runtime, n)
    driver: Policy = student
    assisted = witness = None
    if assist:
        driver = assisted = AssistedDriver(student, teacher, assist, fields, half_fov, assist_range_m)
    if collisions:
        hz = envs.config.rates.control_hz
        driver = witness = CollisionWitness(driver, teacher, n, fields, half_fov, hz)
    header = {**measured_on(envs, sim_config, proxy, seed, episodes, num_envs),
              "artifact": artifact_record(runtime.artifact)}  # fmt: skip
    with recorded(driver, envs, video, f"student, {assist} assist" if assist else "student alone") as driver:
        results = run_episodes(envs, driver, listed, seed, witness and witness.ended, on_progress)
    report = finish(header, results, shard)
    if assisted is not None:
        report["assist"] = {"mode": assist, "share": round(assisted.assisted / max(assisted.steps, 1), 4)}
        if assist.startswith("teacher_far"):
            report["assist"]["range_m"] = assist_range_m
    if witness is not None:
        report["collisions"] = witness.report()
    return report


def run_episodes(
    envs: VectorEnv, policy: Policy, episodes: Sequence[int], seed: int,
    on_end: Callable[[int, str], None] | None = None, on_progress: OnProgress | None = None,
) -> list[EpisodeResult]:  # fmt: skip
    """Run the listed `episodes` (episode i on seed + i) to their ends on a DISABLED-autoreset vector env
    of at most len(episodes) envs; their results, in the order they ended. `on_end(env, outcome)` hears
    each episode's end, `on_progress(done, successes)` the count after each step that ended one.

    `policy(obs, info, started)` returns (skill (N,), params (N, P)); `started` (N,) marks envs whose
    episode began with this observation, `info["running"]` (N,) those with an episode still running and
    `info["episode"]` (N,) the episode each env runs (-1 for none).
    """
    n, listed = envs.num_envs, list(episodes)
    episode_of = np.array(listed[:n])  # episode each env runs; -1 once there are no more to start
    returns = np.zeros(n)
    results: list[EpisodeResult] = []
    successes, started = 0, n
    try:
        obs, info = envs.reset(seed=[seed + int(e) for e in episode_of])
        fresh = np.ones(n, dtype=bool)
        while (episode_of >= 0).any():
            skill, params = policy(
                obs, {**info, "running": episode_of >= 0, "episode": episode_of.copy()}, fresh
            )
            obs, reward, terminated, truncated, info = envs.step({"skill": skill, "params": params})
            running = episode_of >= 0
            returns += np.where(running, reward, 0.0)
            ended = running & (terminated | truncated)
            for i in np.flatnonzero(ended):
                outcome = str(info["outcome"][i])
                if on_end is not None:
                    on_end(int(i), outcome)
                results.append(EpisodeResult(
                    episode=int(episode_of[i]), outcome=outcome, success=bool(info["success"][i]),
                    episode_return=float(returns[i]), progress=float(obs["progress"][i, 0]),
                    time_s=float(info["episode_time_s"][i]),
                ))  # fmt: skip
                successes += results[-1].success
                returns[i] = 0.0
                episode_of[i] = listed[started] if started < len(listed) else -1
                started += 1
            if on_progress is not None and ended.any():
                on_progress(len(results), successes)
            fresh = ended & (episode_of >= 0)
            if fresh.any():  # the others hold their ended episodes (not simulated) until all are done
                seeds = [seed + int(e) if r else None for e, r in zip(episode_of, fresh, strict=True)]
                obs, reset_info = envs.reset(seed=seeds, options={"reset_mask": fresh})
                info = _merge_fresh(info, reset_info, fresh)
    finally:
        envs.close()
    return results


def _merge_fresh(info: dict, reset_info: dict, fresh: np.ndarray) -> dict:
    """The step's info with the restarted envs' episode time and image age taken from their reset."""
    out = dict(info)
    for key in ("episode_time_s", "image_age_s"):
        if key in reset_info:
            out[key] = np.where(fresh, reset_info[key], info[key])
    return out
