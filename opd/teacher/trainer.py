"""Headless teacher training: hybrid SAC on privileged observations, bootstrapped from demonstrations.

The recipe, and why (measured on the 2-core CPU this project targets):
1. One Gymnasium vector env over one backend holding all N envs (`sim.vector_env`, ~2.2x the env steps/s
   of a SyncVectorEnv of single envs).
2. Decisions at 5 Hz (`teacher.action_repeat` 4 on the 20 Hz loop) with gamma 0.97 per decision: the
   credit-assignment horizon shrinks fourfold, and a 5 Hz scripted controller loses nothing (98% success).
3. Demonstrations of the scripted privileged controller (`sim.scripted_controller`), used twice:
   - behaviour cloning warm-starts the actor, so RL starts from a policy that already finishes tours
     instead of spending most of the CPU budget discovering the first marker;
   - RLPD (Ball et al. 2023, "Efficient Online RL with Offline Data"): every update batch draws
     `demos.batch_fraction` of its rows from the demonstrations, so the critic keeps seeing good
     actions and the actor is not dragged off them by early critic errors.
   The teacher is still the hybrid-SAC policy: RL fine-tunes every weight, with the KL anchor starting
   at the cloned actor.

Counting: `steps` are env steps (decisions) summed over envs and ranks; the demonstrations come on top.

On N ranks (torchrun or srun: `opd.world`), rsl_rl's way: each rank steps its own envs (rank r's env i draws
from seed + r x num_envs + i, its demonstrations likewise) into its own replay, and the learner's updates are
data-parallel (`HybridSAC.distribute`: DDP, gradients averaged, so weights, targets and temperatures stay the
same on every rank). What must stay alike and is not a weight is made alike: the observation statistics of
the demonstrations are merged over the ranks, and every rank's normaliser sees every rank's reward terms, so
its scale, its breaker and its pauses (which updates run) are the same everywhere. Rank 0 alone logs,
evaluates, writes the checkpoint and exports; each rank writes its own replay beside the checkpoint.

Output directory layout (resumable; rerunning the same command continues from the last checkpoint):
    config.yaml                 resolved training config
    checkpoints/step_XXXXXXXXX.pt + .yaml   learner state (weights only) and the config beside it
    checkpoints/replay.npz      online replay buffer at the last checkpoint (rank R > 0: replay.rankR.npz)
    checkpoints/demos.npz       the demonstrations, written once before RL (rank R > 0: demos.rankR.npz)
    teacher.pt, teacher.yaml    the final actor (weights only) and what is needed to rebuild it
    tb/                         TensorBoard scalars; breaker/ circuit-breaker dumps
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
import yaml
from pydantic import Field

from opd.distributed import all_gather, all_gather_rows, any_rank, barrier, gather_to_main
from opd.evaluation import training_reset_seed
from opd.runs import check_world_size, checkpoint_path, checkpoints, phase_progress, run_resumably
from opd.teacher.hybrid_sac import HybridSAC, SACConfig
from opd.teacher.replay_buffer import Batch, ReplayBuffer
from opd.teacher.reward_normalizer import RewardNormalizer, RewardNormConfig
from opd.world import DEVICE_PATTERN, World, torch_device
from policies.config import Config, from_root
from policies.files import atomic_path
from policies.running_norm import RunningNorm
from policies.teacher_policy import TeacherConfig, TeacherPolicy
from policies.torch_files import load_torch

log = logging.getLogger(__name__)

ENV_IDS = {"mujoco": "agent/DiffBotPrivileged-v0", "isaacsim": "agent/DiffBotPrivilegedIsaac-v0"}
DEMO_SEED_OFFSET = 1_000  # demonstrations use seeds seed + 1000 + i, apart from the RL envs' seed + i
# In-training evaluations use their own seeds: the teacher kept for export is chosen on them, and
# `agent eval teacher` (opd.evaluation.EVAL_SEED) then reports on episodes the choice never saw.
SELECT_SEED_OFFSET = 2_000


class DemoConfig(Config):
    """Demonstrations of the scripted privileged controller that bootstrap RL (0 episodes = none)."""

    # each of N ranks collects ceil(episodes / N) of them, from its own seeds
    episodes: int = Field(200, ge=0)  # scripted episodes collected before RL, summed over envs and ranks
    batch_fraction: float = Field(0.5, ge=0, lt=1)  # share of each update batch drawn from them (RLPD), 1
    bc_updates: int = Field(3_000, ge=0)  # behaviour-cloning steps of the actor before RL, updates


class TeacherTrainConfig(Config):
    """Teacher training job."""

    sim: Literal["mujoco", "isaacsim"] = "mujoco"  # simulator backend
    sim_config: str | None = None  # sim YAML (None = the backend's default)
    num_envs: int = Field(16, ge=1)  # envs in the one vector env (one backend object), per rank
    # Every step count below (total, starts, periods) is summed over envs and ranks.
    total_steps: int = Field(200_000, ge=1)  # RL env steps (decisions), summed over envs
    seed: int = (
        0  # seeds torch, the sampler, the demonstrations and the envs (rank r's env i: seed + r*N + i)
    )
    random_steps: int = Field(0, ge=0)  # uniform random actions first, env steps (useful without demos)
    learning_starts: int = Field(2_000, ge=0)  # online env steps before the first (critic) update
    # The critics first learn the value of the cloned actor from its own rollouts and the demonstrations;
    # a random critic would pull the actor off the demonstrations in the first updates.
    actor_starts: int = Field(10_000, ge=0)  # online env steps before the actor and temperatures update
    # On N ranks an update takes N batches (one per rank) and counts once: per env step of one rank.
    updates_per_step: float = Field(0.25, gt=0)  # gradient updates per env step, updates
    buffer_size: int = Field(500_000, ge=1)  # online replay capacity, transitions
    checkpoint_every: int = Field(25_000, ge=1)  # env steps between checkpoints
    log_every: int = Field(2_000, ge=1)  # env steps between TensorBoard writes and log lines
    # Greedy evaluations on their own seeds, logged to TensorBoard; with them on, the exported teacher is
    # the evaluated actor with the best success rate (the final one included), not merely the last.
    eval_every: int = Field(0, ge=0)  # env steps between greedy evaluations (0 = off: export the last)
    eval_episodes: int = Field(50, ge=1)  # seeded episodes per evaluation
    threads: int = Field(1, ge=1)  # torch CPU threads of the learner (1 keeps runs bitwise reproducible)
    # where the learner's networks learn and act: auto (this rank's GPU, cuda:LOCAL_RANK, when there is one),
    # cpu, cuda, cuda:N; the envs step on the CPU
    device: str = Field("auto", pattern=DEVICE_PATTERN)
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)
    sac: SACConfig = Field(default_factory=SACConfig)
    reward: RewardNormConfig = Field(default_factory=RewardNormConfig)
    demos: DemoConfig = Field(default_factory=DemoConfig)


def make_vec_env(cfg: TeacherTrainConfig, autoreset: gym.vector.AutoresetMode) -> gym.vector.VectorEnv:
    """The privileged-observation env: `cfg.num_envs` envs in one backend, deciding every action_repeat."""
    import sim.gym_env  # noqa: F401  registers the environments

    kwargs: dict[str, Any] = {"action_repeat": cfg.teacher.action_repeat, "autoreset_mode": autoreset}
    if cfg.sim_config:
        kwargs["config"] = from_root(cfg.sim_config)  # as every repository path in a config: from the root
    return gym.make_vec(ENV_IDS[cfg.sim], num_envs=cfg.num_envs, vectorization_mode="vector_entry_point",
                        **kwargs)  # fmt: skip


class TeacherTrainer:
    """Owns env, learner, buffers, normaliser and logging; `run()` trains to `total_steps`."""

    def __init__(self, cfg: TeacherTrainConfig, out_dir: Path, world: World | None = None) -> None:
        """`world`: this rank's place in the job (default: the launcher's, `World.from_env`); a world of
        several ranks learns data-parallel and needs its process group joined
        (`opd.distributed.process_group`)."""
        self.cfg, self.out = cfg, Path(out_dir)
        self.world = world = world or World.from_env()
        self.device = torch_device(cfg.device, world)
        (self.out / "checkpoints").mkdir(parents=True, exist_ok=True)
        if world.is_main:
            cfg.to_yaml(self.out / "config.yaml")
        torch.manual_seed(
            cfg.seed + world.rank
        )  # each rank explores its own way (DDP broadcasts rank 0's init)
        torch.set_num_threads(cfg.threads)
        self.rng = np.random.default_rng(cfg.seed + world.rank)  # this rank's random actions and batches
        # SAME_STEP: a finished env restarts at once and its final observation comes in `info`.
        self.envs = make_vec_env(cfg, gym.vector.AutoresetMode.SAME_STEP)
        self.spec = self.envs.unwrapped.robot.spec
        self.contract = self.spec.contract
        self.obs_dim = len(self.spec.privileged_fields) + self.contract.num_skills
        self.term_names = self.spec.reward_terms
        weights = self.envs.unwrapped.config.task.rewards.model_dump()
        self.normalizer = RewardNormalizer(self.term_names, weights, cfg.reward,
                                           self.out / "breaker" if world.is_main else None,
                                           cfg.teacher.action_repeat)  # fmt: skip
        actor = TeacherPolicy(self.obs_dim, self.contract, cfg.teacher, self.spec.privileged_fields)
        scale = torch.tensor(self.normalizer.scale(), dtype=torch.float32)
        self.sac = HybridSAC(actor, cfg.sac, scale, self.device)
        if world.distributed:
            self.sac.distribute()
        sizes = (self.obs_dim, self.contract.num_params, len(self.term_names))
        self.buffer = ReplayBuffer(cfg.buffer_size, *sizes)
        self.demo_episodes = -(-cfg.demos.episodes // world.size)  # this rank's share, rounded up
        # demonstrations: `episodes` finished ones plus those in flight when the last one ends
        max_decisions = int(np.ceil(self.envs.unwrapped.config.task.time_limit_s * self.spec.control_hz
                                    / cfg.teacher.action_repeat))  # fmt: skip
        self.demos = ReplayBuffer(max(1, (self.demo_episodes + cfg.num_envs) * max_decisions), *sizes)
        self.first_env = cfg.seed + world.rank * cfg.num_envs  # the seed of this rank's env 0
        self.steps = 0
        self.best = (-1.0, 0)  # (greedy success rate, step) of the best evaluated actor so far
        self._bar: Any = None  # (rich Progress, task) of the training loop while it runs
        self.evaluated_at = -1  # step of the last evaluation
        self.episodes: deque[tuple[float, bool]] = deque(maxlen=100)  # (return, success) of recent episodes
        self.outcomes: Counter[str] = Counter()  # how episodes ended, since the start of this process
        self._ep_return = np.zeros(cfg.num_envs)
        self.sightings = self.sac.actor.new_memory(cfg.num_envs)  # a remembering view's state, per env
        self._stopped = False  # a signal stopped training on some rank (all ranks agree on it)

    def features(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Teacher input (N, F) of a batched observation (through the sightings of a remembering view)."""
        return self.sac.actor.features(obs["privileged"], obs["skill"], memory=self.sightings)

    def run(self) -> Path | None:
        """Train (resuming if a checkpoint exists), then write teacher.pt/teacher.yaml and return teacher.pt.

        SIGINT/SIGTERM stop the job at the next env step with a checkpoint; it then returns None.
        """
        try:
            resumed = self._resume()
        except BaseException:
            self.envs.close()
            raise
        log.info("rank %d of %d learning on %s", self.world.rank, self.world.size, self.device)
        if not resumed and self.cfg.demos.episodes > 0:
            self.bootstrap()
            self.save_checkpoint()
        steps = lambda: self.steps  # noqa: E731
        return run_resumably(self.out, self._train_and_evaluate, self.save_checkpoint, self.envs.close,
                             self.export_teacher, steps, main=self.world.is_main,
                             stopped=lambda: self._stopped)  # fmt: skip

    def _train_and_evaluate(self, writer: Any, stop: Any) -> None:
        self._train(writer, stop)
        if self.cfg.eval_every and not self._stopped and self.evaluated_at != self.steps:
            self.evaluate(writer)  # the final actor competes too

    def _phase(self, label: str, total: int, unit: str) -> Any:
        """`phase_progress` on rank 0; the other ranks show nothing."""
        if self.world.is_main:
            return phase_progress(label, total, unit)
        return contextlib.nullcontext(lambda done: None)

    def bootstrap(self) -> None:
        """Collect the demonstrations, fit the observation and reward statistics to them, clone the actor."""
        from sim.scripted_controller import ScriptedController

        t0 = time.time()
        controller = ScriptedController(self.spec)
        obs, _ = self._reset(self.first_env + DEMO_SEED_OFFSET)
        finished, successes, steps_terms = 0, 0, []
        with self._phase("demonstrations", self.demo_episodes, "episodes") as advance:
            while finished < self.demo_episodes:
                feats = self.features(obs)
                skill, params = controller.act(obs["privileged"])
                obs, terms, next_feats, terminated, done, info = self._env_step(skill, params)
                steps_terms.append(terms)  # (N, T)
                self.demos.add(feats, skill, params, terms, next_feats, terminated)
                self.sac.actor.norm.update(torch.from_numpy(feats).to(self.device))
                finished += int(done.sum())
                successes += int(np.asarray(info["final_info"]["success"])[done].sum()) if done.any() else 0
                advance(finished)
        # every rank's demonstrations, in rank order, so that the statistics come out alike on every rank
        for rank_terms in all_gather(steps_terms):
            for terms in rank_terms:
                self.normalizer.observe(terms, step=0)  # demonstrations are trusted: they shape the window
        self._merge_observation_statistics()
        if self.world.is_main:
            log.info("demonstrations: %d episodes, %d transitions, success %.1f%% (%.0f s; rank 0's of %d)",
                     finished, len(self.demos), 100 * successes / finished, time.time() - t0,
                     self.world.size)  # fmt: skip
        self._set_reward_scale()
        losses: dict[str, float] = {}
        with self._phase("behaviour cloning", self.cfg.demos.bc_updates, "updates") as advance:
            for i in range(self.cfg.demos.bc_updates):
                losses = self.sac.bc_update(self.demos.sample(self.cfg.sac.batch_size, self.rng))
                advance(i + 1)
        if losses and self.world.is_main:
            log.info("behaviour cloning: %s", {k: round(v, 4) for k, v in losses.items()})

    def _merge_observation_statistics(self) -> None:
        """The actor's observation statistics of every rank's demonstrations, merged in rank order: the same
        on every rank (alone: its own, untouched)."""
        if not self.world.distributed:
            return
        norm = self.sac.actor.norm
        merged = RunningNorm(self.obs_dim).to(self.device)
        for count, mean, var in all_gather((norm.count.cpu(), norm.mean.cpu(), norm.var.cpu())):
            if count > 0:
                merged.merge(count.to(self.device), mean.to(self.device), var.to(self.device))
        norm.load_state_dict(merged.state_dict())

    def _set_reward_scale(self) -> None:
        self.sac.reward_scale = torch.tensor(self.normalizer.scale(), dtype=torch.float32, device=self.device)

    def _observe(self, terms: np.ndarray, transition: dict[str, np.ndarray], writer: Any) -> np.ndarray:
        """Feed the normaliser every rank's step, (N x ranks, T) in rank order, so that its statistics, its
        breaker and the updates it pauses are the same on every rank; return this rank's rows (N,) that
        tripped the breaker. A trip's dump (rank 0's) names the env by its index over the ranks."""
        trips = self.normalizer.trips
        terms = all_gather_rows(terms, self.device)
        transition = {k: all_gather_rows(v, self.device) for k, v in transition.items()}
        bad = self.normalizer.observe(terms, self.steps, transition)
        if self.normalizer.trips != trips and writer is not None:
            writer.add_scalar("breaker/trips", self.normalizer.trips, self.steps)
        n = self.cfg.num_envs
        return bad[self.world.rank * n : (self.world.rank + 1) * n]

    def _train(self, writer: Any, stop: Any) -> None:
        """The RL loop: act, step, store, update; log, evaluate and checkpoint on their schedules."""
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        obs, _ = self._reset(training_reset_seed(self.first_env, self.steps))
        pending_updates, losses = 0.0, {}
        t0, steps0 = time.time(), self.steps
        cols = (TextColumn("[bold]teacher"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
        with Progress(*cols, refresh_per_second=2, disable=not self.world.is_main) as bar:
            task = bar.add_task("train", total=self.cfg.total_steps, completed=self.steps, stats="")
            self._bar = (bar, task)  # an evaluation on the schedule shows its episodes on it
            while self.steps < self.cfg.total_steps:
                # ranks stop together (a signal may reach one a step before another): each update needs all
                self._stopped = any_rank(stop(), self.device)
                if self._stopped:
                    break
                feats = self.features(obs)
                skill, params = self._explore(feats)
                obs, terms, next_feats, terminated, done, info = self._env_step(skill, params)
                transition = {"obs": feats, "skill": skill, "params": params, "next_obs": next_feats}
                bad = self._observe(terms, transition, writer)
                keep = ~bad  # an out-of-range reward stays out of the buffer as well as out of learning
                self.buffer.add(feats[keep], skill[keep], params[keep], terms[keep], next_feats[keep],
                                terminated[keep])  # fmt: skip
                self._track_episodes(terms, done, info)
                self.steps += self.cfg.num_envs * self.world.size
                if self.steps >= self.cfg.learning_starts:
                    pending_updates += self.cfg.num_envs * self.cfg.updates_per_step
                    losses = self._learn(int(pending_updates)) or losses
                    pending_updates -= int(pending_updates)
                self._on_schedule(writer, losses, (self.steps - steps0) / max(time.time() - t0, 1e-9))
                bar.update(task, completed=self.steps, stats=self._stats_text())
        self._bar = None

    def _on_schedule(self, writer: Any, losses: dict[str, float], sps: float) -> None:
        """Log (rank 0), evaluate and checkpoint when `steps` crosses their periods."""
        n = self.cfg.num_envs * self.world.size
        if self.world.is_main and self.steps % self.cfg.log_every < n:
            self._log(writer, losses, sps)
        if self.cfg.eval_every and self.steps % self.cfg.eval_every < n:
            self.evaluate(writer)
        if self.steps % self.cfg.checkpoint_every < n:
            self.save_checkpoint()

    def evaluate(self, writer: Any) -> None:
        """Greedy evaluation on the selection seeds by rank 0 while the others wait (every rank holds the
        same actor); keeps the actor if it is the best so far."""
        if self.world.is_main:
            self._evaluate(writer)
        barrier()
        self.evaluated_at = self.steps

    def _evaluate(self, writer: Any) -> None:
        from opd.evaluation import evaluate_teacher

        n = self.cfg.eval_episodes
        with contextlib.ExitStack() as stack:
            if self._bar is None:  # the final evaluation, after the training loop's bar
                advance = stack.enter_context(
                    phase_progress(f"evaluation at step {self.steps:,}", n, "episodes")
                )
            else:  # on the training bar: rich shows one live display at a time
                bar, task = self._bar
                advance = lambda done: bar.update(task, stats=f"evaluating: {done}/{n} episodes")  # noqa: E731
            report = evaluate_teacher(
                self.sac.actor, n, sim_config=self.cfg.sim_config, seed=self.cfg.seed + SELECT_SEED_OFFSET,
                num_envs=self.cfg.num_envs, on_progress=lambda done, _: advance(done),
            )  # fmt: skip
        writer.add_scalar("eval/success_rate", report["success_rate"], self.steps)
        writer.add_scalar("eval/return", report["mean_return"], self.steps)
        lo, hi = report["ci95"]
        log.info("step %d: greedy evaluation, %d episodes: success %.1f%% (95%% CI %.1f-%.1f%%), mean return "
                 "%.2f, outcomes %s", self.steps, report["episodes"], 100 * report["success_rate"], 100 * lo,
                 100 * hi, report["mean_return"], report["outcomes"])  # fmt: skip
        if report["success_rate"] > self.best[0]:
            self.best = (float(report["success_rate"]), self.steps)
            torch.save(self._actor_state(), self.out / "checkpoints" / "best_actor.pt")

    def _reset(self, seed: int) -> tuple[dict, dict]:
        """Every env starts an episode: new observations, and no sightings carried over."""
        if self.sightings is not None:
            self.sightings.reset()
        return self.envs.reset(seed=seed)

    def _env_step(
        self, skill: np.ndarray, params: np.ndarray
    ) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step every env; returns (obs after autoreset, terms (N, T), next features (N, F) of the step's own
        end state, terminated (N,) float32, done (N,) bool, info)."""
        obs, _, terminated, truncated, info = self.envs.step({"skill": skill, "params": params})
        done = terminated | truncated
        terms = self._terms(info, done)
        ended = np.flatnonzero(done)
        finals = {}  # the final observation, not the one the autoreset started: seen before that start
        for i in ended:
            final = info["final_obs"][i]
            finals[i] = self.sac.actor.features(final["privileged"][None], np.array([final["skill"]]),
                                                memory=self.sightings, envs=np.array([i]))[0]  # fmt: skip
        if self.sightings is not None:
            self.sightings.reset(ended)
        next_feats = self.features(obs)
        for i, feats in finals.items():
            next_feats[i] = feats
        return obs, terms, next_feats, terminated.astype(np.float32), done, info

    def _terms(self, info: dict, done: np.ndarray) -> np.ndarray:
        """Unweighted reward terms of this step, final-step values for envs that just ended. Shape: (N, T)."""
        terms = np.stack([np.asarray(info["reward_terms"][n], np.float64) for n in self.term_names], axis=1)
        if done.any():
            final = info["final_info"]["reward_terms"]
            terms[done] = np.stack([np.asarray(final[n])[done] for n in self.term_names], axis=1)
        return terms.astype(np.float32)

    def _explore(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.steps < self.cfg.random_steps:
            lay = self.contract.layout
            skill = self.rng.integers(0, self.contract.num_skills, size=self.cfg.num_envs)
            params = self.rng.uniform(lay.low, lay.high, size=(self.cfg.num_envs, lay.size))
            return skill, params
        return self.sac.act(feats)

    def _learn(self, updates: int) -> dict[str, float]:
        """Run up to `updates` gradient steps (fewer while the breaker pauses learning); the last losses."""
        losses: dict[str, float] = {}
        for _ in range(updates):
            if self.normalizer.allow_update():  # alike on every rank: DDP needs them all in each update
                self._set_reward_scale()
                losses = self.sac.update(self._sample(), actor=self.steps >= self.cfg.actor_starts)
        return losses

    def _sample(self) -> Batch:
        """An update batch: `demos.batch_fraction` of it from the demonstrations (RLPD), the rest online."""
        size = self.cfg.sac.batch_size
        n_demo = round(size * self.cfg.demos.batch_fraction) if len(self.demos) else 0
        if n_demo == 0:
            return self.buffer.sample(size, self.rng)
        if len(self.buffer) == 0:
            return self.demos.sample(size, self.rng)
        return Batch.cat([self.demos.sample(n_demo, self.rng), self.buffer.sample(size - n_demo, self.rng)])

    def _track_episodes(self, terms: np.ndarray, done: np.ndarray, info: dict) -> None:
        self._ep_return += terms.astype(np.float64) @ self.normalizer.weights
        for i in np.flatnonzero(done):
            outcome = str(info["final_info"]["outcome"][i])
            if outcome == "nan":
                log.warning("env %d of rank %d: episode failed on a non-finite simulation state (step %d)",
                            i, self.world.rank, self.steps)  # fmt: skip
            self.outcomes[outcome] += 1
            self.episodes.append((float(self._ep_return[i]), outcome == "success"))
            self._ep_return[i] = 0.0

    def _stats_text(self) -> str:
        if not self.episodes:
            return "no episode finished yet"
        ret, succ = np.mean([e[0] for e in self.episodes]), np.mean([e[1] for e in self.episodes])
        return f"return {ret:7.2f}  success {succ:5.1%}  (last {len(self.episodes)} episodes)"

    def _log(self, writer: Any, losses: dict[str, float], sps: float) -> None:
        for k, v in losses.items():
            writer.add_scalar(k, v, self.steps)
        writer.add_scalar("perf/env_steps_per_s", sps, self.steps)
        if self.episodes:
            writer.add_scalar("episode/return", np.mean([e[0] for e in self.episodes]), self.steps)
            writer.add_scalar("episode/success_rate", np.mean([e[1] for e in self.episodes]), self.steps)
        total = max(sum(self.outcomes.values()), 1)
        for outcome, count in self.outcomes.items():
            writer.add_scalar(f"episode/outcome_{outcome}", count / total, self.steps)
        for name, s in zip(self.term_names, self.normalizer.std, strict=True):
            writer.add_scalar(f"reward_std/{name}", s, self.steps)
        log.info("step %d/%d: %s, %.0f env steps/s", self.steps, self.cfg.total_steps, self._stats_text(),
                 sps)  # fmt: skip

    def save_checkpoint(self) -> None:
        """Learner, normaliser and counters (weights only), the config beside it, and the replay buffers. On
        N ranks each rank writes its own buffers and rank 0 the checkpoint, with each rank's samplers
        (`ranks`); the ranks go on together once it is written."""
        ckpt_dir = self.out / "checkpoints"
        path = checkpoint_path(ckpt_dir, self.steps)
        self.buffer.save(ckpt_dir / self._rank_file("replay"))
        demos = ckpt_dir / self._rank_file("demos")
        if len(self.demos) and not demos.is_file():
            self.demos.save(demos)
        mine = {"rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}
        ranks = gather_to_main(mine)  # on rank 0 once every rank has written its buffers
        if self.world.is_main:
            state = {"sac": self.sac.state_dict(), "normalizer": self.normalizer.state_dict(),
                     "steps": self.steps, "best": list(self.best), **mine, "world_size": self.world.size,
                     "ranks": ranks if self.world.distributed else None}  # fmt: skip
            self.cfg.to_yaml(path.with_suffix(".yaml"))
            # the .pt last, atomically: a checkpoint that exists has its buffers beside it
            with atomic_path(path) as tmp:
                torch.save(state, tmp)
            log.info("checkpoint %s", path)
        barrier()
        self.normalizer.last_checkpoint = str(path)

    def _rank_file(self, name: str) -> str:
        """This rank's file `name` in the checkpoints (rank 0's as a world of one names it)."""
        return f"{name}.npz" if self.world.rank == 0 else f"{name}.rank{self.world.rank}.npz"

    def _resume(self) -> bool:
        """Load the last checkpoint of the output directory, if any; True if one was loaded. A checkpoint of
        another world size is refused: each rank resumes its own replay and samplers."""
        ckpts = checkpoints(self.out / "checkpoints")
        if not ckpts:
            return False
        state = load_torch(ckpts[-1])
        check_world_size(ckpts[-1], state, self.world.size, "envs and replay buffer")
        if state.get("ranks"):  # this rank's own samplers over rank 0's
            state = {**state, **state["ranks"][self.world.rank]}
        self.sac.load_state_dict(state["sac"])
        self.normalizer.load_state_dict(state["normalizer"])
        self._set_reward_scale()
        self.steps = int(state["steps"])
        self.best = (float(state["best"][0]), int(state["best"][1]))
        self.rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        for buffer, name in ((self.buffer, "replay"), (self.demos, "demos")):
            if (self.out / "checkpoints" / self._rank_file(name)).is_file():
                buffer.load(self.out / "checkpoints" / self._rank_file(name))
        if self.world.is_main:
            log.info("resumed from %s at step %d with %d transitions (+%d demonstrations; rank 0's)",
                     ckpts[-1], self.steps, len(self.buffer), len(self.demos))  # fmt: skip
        return True

    def _actor_state(self) -> dict[str, torch.Tensor]:
        """The actor's weights on the CPU, whichever device it learns on."""
        return {k: v.cpu() for k, v in self.sac.actor.state_dict().items()}

    def export_teacher(self) -> Path:
        """teacher.pt (actor state_dict; the best evaluated one when evaluations ran) + teacher.yaml (what
        rebuilding and running it needs, and where it came from), by rank 0 while the others wait."""
        path = self.out / "teacher.pt"
        if self.world.is_main:
            self._export(path)
        barrier()
        return path

    def _export(self, path: Path) -> None:
        best = self.out / "checkpoints" / "best_actor.pt"
        state, steps = self._actor_state(), self.steps
        if self.cfg.eval_every and best.is_file():
            state, steps = load_torch(best), self.best[1]
        torch.save(state, path)
        meta = {"obs_dim": self.obs_dim, "sim": self.cfg.sim, "steps": steps, "seed": self.cfg.seed,
                "selection_success_rate": self.best[0] if self.cfg.eval_every else None,
                "control_hz": self.spec.control_hz,
                "teacher": self.cfg.teacher.model_dump(mode="json"),
                "contract": self.contract.model_dump(mode="json"),
                "privileged_fields": list(self.spec.privileged_fields), "ranks": self.world.size,
                "device": str(self.device)}  # fmt: skip
        (self.out / "teacher.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
