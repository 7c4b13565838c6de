"""Headless student training: the OPD core (or a baseline) run in simulated time on the vector robot.

`agent train student --method opd|dagger|novelty|sim_only|sim_only_dr|opd_novelty` runs `OnlineDistillation`
in lockstep (no real-time pacing): the MuJoCo default behind the real-robot proxy is the "real" robot (camera
120 ms late, noise, randomised dynamics), the committed teacher acts on the same robot's privileged state.
Methods:
- opd: the teacher's action is executed when the LSTM predictor's error is high (`opd.distill.gate`);
- novelty: the same gate on ensemble disagreement (ThriftyDAgger-style);
- opd_novelty: the same gate on the higher of the two, on one scale (`opd.distill.signal_mix`);
- dagger: the student always acts, the teacher labels (rsl_rl / Isaac Lab distillation);
- sim_only: DAgger in the clean sim (no proxy): the student never sees the real robot's delay and noise;
- sim_only_dr: DAgger in the sim under domain randomisation of its own look and dynamics (`dr_config`,
  `sim/configs/proxy_dr.yaml`): what an Isaac Lab user trains first; it never sees the "real" robot either.
Every method gets the same label budget: one teacher label per student frame, `total_steps` decisions.

The config is resolved once, before the run starts (`resolve`: the method's switch, the robot's control
period, the buffer's window and the predictor's widths filled in), and that is what is saved beside the run
and each checkpoint and what the learner runs: a run restarted from its saved config makes the same
decisions.

Output directory (rerunning the same command resumes from the last checkpoint):
    config.yaml                         resolved config (`resolve`)
    checkpoints/step_XXXXXXXXX.pt + .yaml  learner state (weights only), config beside it
    checkpoints/store_XXXXXXXXX.npz     the learner's sample store, as of the newest checkpoint
    history.jsonl                       one line per log period: losses, intervention rate, threshold, ...
    student.pt, predictor.pt, student.yaml  the final student and predictor (weights) and their configs
    init_from.json                      with `init_from`: the artifact the run started from (manifest hash)
    tb/                                 TensorBoard scalars
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import yaml
from pydantic import Field

from opd.distill.config import NoveltyConfig, OPDConfig, resolve_config
from opd.distill.from_artifact import load_artifact_weights
from opd.distill.learner import OnlineDistillation
from opd.distributed import all_min, any_rank, barrier, gather_to_main
from opd.evaluation import project_path, training_reset_seed
from opd.runs import check_world_size, checkpoint_path, checkpoints, flushed_denormals, run_resumably
from opd.world import DEVICE_PATTERN, World, torch_device
from policies.artifact import MANIFEST, Artifact, sha256_file
from policies.camera_model import CameraModel
from policies.config import Config, from_root
from policies.files import atomic_path, write_atomic
from policies.student_input import StudentInput
from policies.student_policy import StudentConfig, StudentPolicy
from policies.teacher_policy import TeacherPolicy, load_teacher
from policies.torch_files import load_torch
from sim.config import SimConfig
from sim.marker_task import robot_privileged_fields
from sim.robots import diffbot

log = logging.getLogger(__name__)

Method = Literal["opd", "dagger", "novelty", "sim_only", "sim_only_dr", "opd_novelty"]
SWITCH = {"opd": "predictor", "novelty": "novelty", "dagger": "student", "sim_only": "student",
          "sim_only_dr": "student", "opd_novelty": "predictor_novelty"}  # fmt: skip
ROLLING_EPISODES = 100  # the newest finished episodes the logged episode means are over
# Settings a run may change when it resumes: how long it goes on, how often it logs and checkpoints, its
# threads and device, and the artifact it started from (only a fresh run reads it). Any other change is
# another run.
RESUMABLE = frozenset({"total_steps", "checkpoint_every", "log_every", "threads", "device", "init_from"})
# What each rank of a job keeps apart from the others (its envs' gate, counters, sampler and episodes); the
# weights and the optimiser are the same on every rank and saved once
RANK_LEARNER_KEYS = ("gate", "signal_mix", "steps", "teacher_steps", "rng")
RANK_KEYS = ("episode_count", "episodes", "outcomes", "pending_updates", "torch_rng")


class StudentTrainConfig(Config):
    """Student training job (OPD or a baseline)."""

    method: Method = "opd"  # see the module docstring
    sim_config: str = "sim/configs/mujoco.yaml"  # sim YAML; the camera size follows the student's image
    proxy_config: str = "sim/configs/proxy.yaml"  # the "real" robot (unused by sim_only and sim_only_dr)
    # sim_only_dr's randomised sim (a proxy config that varies only what the sim already has)
    dr_config: str = "sim/configs/proxy_dr.yaml"
    student_config: str = "policies/configs/student_cpu.yaml"  # student architecture
    teacher: str = diffbot.TEACHER  # teacher.pt (teacher.yaml beside it); frozen
    num_envs: int = Field(8, ge=1)  # envs in one backend object, per rank
    total_steps: int = Field(100_000, ge=1)  # decisions (control periods), summed over envs and ranks
    updates_per_step: float = Field(0.05, gt=0)  # gradient updates per decision, updates
    learning_starts: int = Field(1_000, ge=0)  # samples in the store before the first update
    checkpoint_every: int = Field(10_000, ge=1)  # decisions between checkpoints
    log_every: int = Field(2_000, ge=1)  # decisions between log lines and TensorBoard writes
    # seeds torch, the learner's sampler (rank r: seed + r) and the envs (env i of rank r: seed + r * num_envs
    # + i, by the global rank: seeds by the local rank repeat on every node, as they did in Isaac Lab)
    seed: int = 0
    threads: int = Field(2, ge=1)  # torch CPU threads, per rank
    # where the learner learns and acts: auto|cpu|cuda[:N]; auto and cuda are this rank's GPU (LOCAL_RANK)
    device: str = Field("auto", pattern=DEVICE_PATTERN)
    # An artifact whose student and predictor weights the run starts from (fine-tuning a shipped student);
    # None: random init. Only a fresh run reads it: a run with a checkpoint resumes from the checkpoint.
    init_from: str | None = None
    opd: OPDConfig = Field(default_factory=OPDConfig)


def resolve(
    cfg: StudentTrainConfig, teacher: TeacherPolicy | None = None, check_given: bool = True
) -> StudentTrainConfig:
    """The config a run runs, every derived value filled in: the gate's switch (the method's, `SWITCH`:
    the `opd.switch` a file gives is not what a method runs), the buffer's period (the robot's control
    period, which the predictor's horizons count in), and the buffer's window and horizon and the
    predictor's widths (`opd.distill.learner.resolve_config`). Resolving a resolved config changes
    nothing. `teacher`: `cfg.teacher` loaded already (else it is loaded here). A derived value the config
    gives otherwise is refused, but with `check_given` False (a saved config, compared: `resolve_config`)."""
    student_cfg = StudentConfig.from_yaml(from_root(cfg.student_config))
    teacher = teacher if teacher is not None else load_teacher(from_root(cfg.teacher))
    control_hz = SimConfig.from_yaml(from_root(cfg.sim_config)).rates.control_hz
    given = cfg.opd.align.period_s
    if (
        check_given
        and "period_s" in cfg.opd.align.model_fields_set
        and not math.isclose(given, 1 / control_hz)
    ):
        period = 1.0 / control_hz
        raise ValueError(f"opd.align.period_s = {given} is not the robot's control period ({period} s): it "
                         f"comes from {cfg.sim_config}'s rates.control_hz; leave it out")  # fmt: skip
    align = cfg.opd.align.model_copy(update={"period_s": 1.0 / control_hz})
    opd = cfg.opd.model_copy(update={"switch": SWITCH[cfg.method], "align": align})
    opd = resolve_config(opd, student_cfg, teacher, check_given)
    return StudentTrainConfig.from_dict({**cfg.model_dump(), "opd": opd.model_dump()}, "resolved config")


def robot_proxy(cfg: StudentTrainConfig) -> str | None:
    """The proxy config `cfg.method` trains behind: none for sim_only, the randomised sim for sim_only_dr,
    the "real" robot for every other method."""
    return {"sim_only": None, "sim_only_dr": cfg.dr_config}.get(cfg.method, cfg.proxy_config)


def trained_camera(cfg: StudentTrainConfig, student_cfg: StudentConfig) -> CameraModel:
    """The camera the student learnt from, for its artifact's manifest: the robot's at the student's image
    size, through the lens of the proxy its method trains behind (none: the sim's pinhole)."""
    from sim.real_robot_proxy import ProxyConfig, robot_camera

    img, proxy = student_cfg.encoder.image, robot_proxy(cfg)
    return robot_camera(img.height, img.width, ProxyConfig.from_yaml(from_root(proxy)) if proxy else None)


def make_robot_for(cfg: StudentTrainConfig, student_cfg: StudentConfig, proxy: str | None) -> Any:
    """The vector robot (camera at the student's image size), behind the proxy config `proxy` if any."""
    from sim.gym_env import make_robot

    sim_cfg = SimConfig.from_yaml(from_root(cfg.sim_config))
    img = student_cfg.encoder.image
    camera = sim_cfg.camera.model_copy(update={"width": img.width, "height": img.height})
    sim_cfg = SimConfig.from_dict(sim_cfg.model_copy(update={"camera": camera}).model_dump())
    _, robot = make_robot(sim_cfg, "all", from_root(proxy) if proxy else None, cfg.num_envs)
    return robot


class StudentTrainer:
    """Owns the robot and the learner; `run()` trains to `total_steps` and writes the student."""

    def __init__(self, cfg: StudentTrainConfig, out_dir: Path, world: World | None = None) -> None:
        """`cfg` as given or as saved by a run: resolved here (`resolve`), once, and run as resolved.
        `world`: this rank's place in the job (default: the launcher's, `World.from_env`); a world of several
        ranks trains data-parallel and needs its process group joined (`opd.distributed.process_group`)."""
        self.out = Path(out_dir)
        self.world = world = world or World.from_env()
        self.device = torch_device(cfg.device, world)
        (self.out / "checkpoints").mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.threads)
        self.student_cfg = StudentConfig.from_yaml(from_root(cfg.student_config))
        teacher = load_teacher(from_root(cfg.teacher))
        self.cfg = cfg = resolve(cfg, teacher)
        self.robot = make_robot_for(cfg, self.student_cfg, robot_proxy(cfg))
        period = self.robot.spec.control_period_s
        if period != cfg.opd.align.period_s:  # `resolve` read the rate from the sim config
            self.robot.close()
            raise ValueError(f"the robot's control period ({period} s) is not the resolved config's "
                             f"opd.align.period_s ({cfg.opd.align.period_s} s)")  # fmt: skip
        student = StudentPolicy(self.student_cfg, teacher.contract)
        self.learner = OnlineDistillation(student, teacher, cfg.opd, cfg.num_envs, seed=cfg.seed + world.rank,
                                          device=self.device)  # fmt: skip
        if world.distributed:
            self.learner.distribute()
        self.decisions_per_step = cfg.num_envs * world.size  # one step of every env of every rank
        self.episodes: deque[dict[str, Any]] = deque(maxlen=ROLLING_EPISODES)
        self.episode_count = 0
        # Finished training episodes by outcome, over the whole run: how often the executed policy (the
        # gate's choice, teacher included) failed while learning. None: resumed from a checkpoint older
        # than the count, so the run's total is unknown.
        self.outcomes: Counter[str] | None = Counter()
        self.pending_updates = 0.0
        # seconds spent training, summed over the runs that resumed this one (as of the last checkpoint):
        # a run killed before its end still counts up to its last checkpoint
        self.train_seconds = 0.0
        self._counted_to = time.monotonic()  # the moment train_seconds counts up to
        self._stopped = False  # a signal stopped training on some rank (all ranks agree on it)

    @property
    def steps(self) -> int:
        """Decisions so far, summed over the envs of every rank (the ranks step together)."""
        return self.learner.steps * self.world.size

    def run(self) -> Path | None:
        """Train (resuming if a checkpoint exists); write and return student.pt, or None if stopped."""
        try:
            self._resume()
        except BaseException:
            self.robot.close()
            raise
        if self.world.is_main:
            # once the checkpoint (if any) is known to be this run's
            self.cfg.to_yaml(self.out / "config.yaml")
            self._trim_history()
        log.info("rank %d of %d learning on %s", self.world.rank, self.world.size, self.device)
        steps = lambda: self.steps  # noqa: E731
        return run_resumably(self.out, self._train, self.save_checkpoint, self.robot.close, self.export,
                             steps, main=self.world.is_main, stopped=lambda: self._stopped)  # fmt: skip

    def _train(self, writer: Any, stop: Any) -> None:
        with flushed_denormals():
            self._train_loop(writer, stop)

    def _train_loop(self, writer: Any, stop: Any) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        robot, learner, n = self.robot, self.learner, self.cfg.num_envs
        every = self.decisions_per_step  # the global step count moves by this much per loop
        robot.connect()
        self._counted_to = time.monotonic()
        first_env = self.cfg.seed + self.world.rank * n  # this rank's envs' seeds follow the global rank
        obs = robot.reset(seed=training_reset_seed(first_env, self.steps))
        last_frame = np.full(n, -np.inf)
        losses: dict[str, float] = {}
        t0, steps0 = time.time(), self.steps
        cols = (
            TextColumn(f"[bold]student ({self.cfg.method})"),
            BarColumn(),
            TextColumn("{task.completed:,}/{task.total:,}"),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*cols, refresh_per_second=2, disable=not self.world.is_main) as bar:
            task = bar.add_task("train", total=self.cfg.total_steps, completed=self.steps, stats="")
            # ranks stop together (a signal may reach one a step before another): each update needs them all
            while self.steps < self.cfg.total_steps:
                self._stopped = any_rank(stop(), self.device)
                if self._stopped:
                    break
                now = obs.time_s
                learner.observe_teacher(now, obs.privileged, obs.skill, now)
                new = np.flatnonzero(obs.image_stamp_s > last_frame)
                if new.size:
                    last_frame[new] = obs.image_stamp_s[new]
                    learner.observe_student(new, obs.image_stamp_s[new], student_frame(obs, new), now[new])
                decision = learner.act(now)
                robot.send_action(decision.skill, decision.params)
                obs = robot.step()
                done = obs.task.done
                for summary in learner.process_step(obs.time_s, done, obs.task.reasons):
                    self.episodes.append(summary)
                    self.episode_count += 1
                    if self.outcomes is not None:
                        self.outcomes[summary["outcome"]] += 1
                if done.any():
                    idx = np.flatnonzero(done)
                    obs = robot.reset(envs=idx)
                    last_frame[idx] = -np.inf
                losses = self._learn() or losses
                if self.world.is_main and self.steps % self.cfg.log_every < every:
                    self._log(writer, losses, decision, (self.steps - steps0) / max(time.time() - t0, 1e-9))
                if self.steps % self.cfg.checkpoint_every < every:
                    self.save_checkpoint()
                bar.update(task, completed=self.steps, stats=self._stats_text())

    def _learn(self) -> dict[str, float]:
        if all_min(self.learner.stats()["samples"], self.device) < self.cfg.learning_starts:
            return {}
        self.pending_updates += self.cfg.num_envs * self.cfg.updates_per_step
        losses: dict[str, float] = {}
        while self.pending_updates >= 1.0:
            self.pending_updates -= 1.0
            losses = self.learner.update() or losses
        return losses

    def _stats_text(self) -> str:
        if not self.episodes:
            return "no episode finished yet"
        ep = self.episodes
        return (
            f"success {np.mean([e['success'] for e in ep]):5.1%}  teacher "
            f"{np.mean([e['intervention_rate'] for e in ep]):5.1%}  (last {len(ep)} episodes)"
        )

    def _log(self, writer: Any, losses: dict[str, float], decision: Any, sps: float) -> None:
        stats = self.learner.stats()
        record: dict[str, Any] = {
            "step": self.steps,
            "updates": stats["updates"],
            "labels": stats["labels"],
            "lost_frames": stats["lost_frames"],  # window frames read after being overwritten: 0
            "teacher_steps": stats["teacher_decisions"],
            "gate_counts": stats["gate_counts"],  # cumulative: "teacher/<reason>" -> decisions
            "episodes": self.episode_count,
            "train_outcomes": None if self.outcomes is None else dict(self.outcomes),  # cumulative
            "threshold": decision.threshold,
            "steps_per_s": sps,
            **losses,
        }
        if "gate_led" in stats:  # cumulative: takeovers on the gate's signal by which uncertainty set it
            record["gate_led"] = stats["gate_led"]
        if self.episodes:
            ep = list(self.episodes)
            for key in ("success", "intervention_rate", "switches_per_min", "skill_agreement", "param_error"):
                record[f"episode/{key}"] = float(np.mean([e[key] for e in ep]))
            pred = np.array([e["pred_error"] for e in ep], dtype=float)  # (episodes, H), NaN: not reached
            seen = np.isfinite(pred)
            pred = np.nansum(pred, axis=0) / np.where(seen.any(0), seen.sum(0), np.nan)
            record.update({f"pred_error/h{h + 1}": float(v) for h, v in enumerate(pred)})
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and np.isfinite(value):
                writer.add_scalar(key, value, self.steps)
        with (self.out / "history.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        log.info(
            "step %d/%d: %s, %.0f decisions/s", self.steps, self.cfg.total_steps, self._stats_text(), sps
        )

    def save_checkpoint(self) -> None:
        """Learner state (weights only) + counters, the config beside it, the sample store; atomically.
        In a job of several ranks every rank writes its own store and rank 0 the checkpoint, with each
        rank's own counters, sampler and gate (`RANK_KEYS`); the ranks go on together once it is written."""
        ckpt_dir = self.out / "checkpoints"
        path = checkpoint_path(ckpt_dir, self.steps)
        now = time.monotonic()
        self.train_seconds += now - self._counted_to
        self._counted_to = now
        # The store is named by its step and written first, the .pt last: a checkpoint that exists has its
        # own store beside it, and a write cut short leaves the last checkpoint with its store untouched.
        rank = self.world.rank
        store = store_path(ckpt_dir, self.steps, rank)
        state = {
            "learner": self.learner.save(store),
            "episode_count": self.episode_count,
            # the newest finished episodes: a resumed run's logged means go on over them instead of starting
            # from the few episodes finished since the resume
            "episodes": list(self.episodes),
            "outcomes": None if self.outcomes is None else dict(self.outcomes),
            "pending_updates": self.pending_updates,
            "train_seconds": self.train_seconds,
            "torch_rng": torch.get_rng_state(),
        }
        ranks = gather_to_main({"learner": {k: state["learner"][k] for k in RANK_LEARNER_KEYS},
                                **{k: state[k] for k in RANK_KEYS}})  # fmt: skip
        if self.world.is_main:
            state.update(world_size=self.world.size, ranks=ranks if self.world.distributed else None)
            self.cfg.to_yaml(path.with_suffix(".yaml"))  # atomic: a resume checks the .pt against it
            with atomic_path(path) as tmp:
                torch.save(state, tmp)
            for old in checkpoints(ckpt_dir)[:-2]:  # keep the last two
                old.unlink()
                old.with_suffix(".yaml").unlink(missing_ok=True)
            log.info("checkpoint %s", path)
        barrier()  # the checkpoint is written before any rank drops the store of the one before
        # the stores of older checkpoints go (~1 GB each): only the newest checkpoint's is kept
        for old in rank_stores(ckpt_dir, rank):
            if old != store:
                old.unlink()

    def _resume(self) -> None:
        ckpts = checkpoints(self.out / "checkpoints")
        if not ckpts:
            if self.cfg.init_from:
                self._init_from(Artifact.load(from_root(self.cfg.init_from)))
            return
        self._check_resumes(ckpts[-1])
        state = load_torch(ckpts[-1])
        check_world_size(ckpts[-1], state, self.world.size, "envs and sample store")
        size = self.world.size
        if state.get("ranks"):  # this rank's own counters, sampler and gate over rank 0's
            mine = state["ranks"][self.world.rank]
            state = {**state, **mine, "learner": {**state["learner"], **mine["learner"]}}
        steps = int(state["learner"]["steps"]) * size
        if steps >= self.cfg.total_steps + self.decisions_per_step:  # the last loop may overshoot by < N
            raise ValueError(
                f"{self.out}: its checkpoint is at step {steps}, past the {self.cfg.total_steps} steps "
                "asked for: pass --steps at least that, or export that checkpoint (agent export --from-run)"
            )
        ckpt_dir = self.out / "checkpoints"
        store = store_path(ckpt_dir, steps, self.world.rank)
        if not store.is_file() and (ckpt_dir / "store.npz").is_file():
            store = ckpt_dir / "store.npz"  # a run checkpointed before stores were named by their step
        if not store.is_file():
            log.warning(
                "%s: no sample store beside the checkpoint; learning resumes from an empty one", ckpt_dir
            )
        self.learner.load(state["learner"], store if store.is_file() else None)
        self.episode_count = int(state["episode_count"])
        self.episodes.extend(state.get("episodes", []))  # none in a checkpoint older than the field
        counts = state.get("outcomes", None)
        self.outcomes = None if counts is None else Counter(counts)
        self.pending_updates = float(state["pending_updates"])
        self.train_seconds = float(state.get("train_seconds", 0.0))  # 0: a checkpoint older than the field
        torch.set_rng_state(state["torch_rng"])
        samples = self.learner.stats()["samples"]
        log.info("resumed from %s at step %d with %d samples", ckpts[-1], self.steps, samples)

    def _check_resumes(self, ckpt: Path) -> None:
        """Refuse a checkpoint written under another config (method, seed, student, teacher, learner...):
        loading it would go on with settings this command does not ask for."""
        saved = ckpt.with_suffix(".yaml")
        if not saved.is_file():
            log.warning("%s: no config beside the checkpoint; resuming without checking it", ckpt)
            return
        refuse_another_config(saved, self.cfg)

    def _trim_history(self) -> None:
        """Drop history lines logged past the step training resumes from: a run killed after its last
        checkpoint (or a checkout holding a committed history but no checkpoint) would log them again."""
        path = self.out / "history.jsonl"
        if not path.is_file():
            return
        lines = path.read_text().splitlines()
        keep = []
        for line in lines:
            try:
                if json.loads(line)["step"] <= self.steps:
                    keep.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):  # a line cut short by the kill
                pass
        if len(keep) == len(lines):
            return
        write_atomic(path, "".join(f"{line}\n" for line in keep))
        log.info("history: dropped %d lines past step %d", len(lines) - len(keep), self.steps)

    def _init_from(self, artifact: Artifact) -> None:
        """Start from a deployed student: its weights (hash-verified), refused unless its architecture and
        contract are this run's (a mismatch named, not a shape error deep in torch). A novelty ensemble it
        carries starts this run's where both have the same shape; otherwise this run's starts afresh."""
        theirs = artifact.student_config
        ours = self.student_cfg
        # A head without memory may grow one: this run's memory starts from zero (policies.frame_memory).
        new_memory = theirs.memory.frames == 1 < ours.memory.frames
        # A camera may grow wider at one height: the image position embedding is widened.
        width = ours.encoder.image.width
        wider = theirs.encoder.image.width < width
        image = theirs.encoder.image.model_copy(update={"width": width})
        rest = theirs.model_copy(
            update={"memory": ours.memory, "encoder": theirs.encoder.model_copy(update={"image": image})}
        )
        memory_fits = theirs.memory == ours.memory or new_memory
        if rest != ours or theirs.encoder.image.width > width or not memory_fits:
            raise ValueError(f"{artifact.root}: its student config is not {self.cfg.student_config}")
        if artifact.contract.fingerprint != self.learner.contract.fingerprint:
            raise ValueError(f"{artifact.root}: its skill contract is not the teacher's")
        if artifact.predictor_config != self.learner.predictor_cfg:
            raise ValueError(f"{artifact.root}: its predictor config differs from this run's")
        theirs_novelty = artifact.novelty_config if self.learner.novelty is not None else None
        ours_novelty = self.learner.cfg.novelty
        same_novelty = theirs_novelty is not None and (
            NoveltyConfig.from_dict(theirs_novelty, f"{artifact.root}: config.novelty") == ours_novelty
        )
        if theirs_novelty is not None and not same_novelty:
            log.warning("%s: its novelty ensemble %s is not this run's shape %s: this run's starts afresh",
                        artifact.root, theirs_novelty, ours_novelty.model_dump())  # fmt: skip
        load_artifact_weights(self.learner, artifact, new_memory, wider, novelty=same_novelty)
        origin = {"artifact": project_path(artifact.root),
                  "manifest_sha256": sha256_file(artifact.root / MANIFEST),
                  "weights_sha256": artifact.weights_hash}  # fmt: skip
        if theirs_novelty is not None:
            origin["novelty"] = "the artifact's ensemble" if same_novelty else "a fresh one (another shape)"
        if self.world.is_main:
            (self.out / "init_from.json").write_text(json.dumps(origin, indent=2) + "\n")
        log.info("initialised from %s (manifest sha256 %s)", artifact.root, origin["manifest_sha256"][:16])

    def export(self) -> Path:
        """student.pt, predictor.pt (weights, on the CPU) and student.yaml (configs and provenance), by
        rank 0 while the others wait (every rank holds the same weights)."""
        if self.world.is_main:
            self._export()
        barrier()
        return self.out / "student.pt"

    def _export(self) -> None:
        student, predictor = self.learner.get_policy()
        origin = self.out / "init_from.json"
        for model, name in ((student, "student.pt"), (predictor, "predictor.pt")):
            torch.save({k: v.cpu() for k, v in model.state_dict().items()}, self.out / name)
        meta = {
            "method": self.cfg.method,
            "steps": self.steps,
            "updates": self.learner.updates,
            "labels": self.learner.stats()["labels"],
            "train_seconds": round(self.train_seconds, 1),
            "seed": self.cfg.seed,
            "ranks": self.world.size,
            "device": str(self.device),  # rank 0's
            "init_from": json.loads(origin.read_text()) if origin.is_file() else None,
            "student": self.student_cfg.model_dump(mode="json"),
            "predictor": self.learner.predictor_cfg.model_dump(mode="json"),
        }
        (self.out / "student.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))

    def export_artifact(self) -> Path:
        """OUT/artifact: the deployable student (ONNX graphs, weights, manifest) of `export()`'s weights,
        with the acting novelty ensemble for a method that gates on one."""
        from opd.live.loading import teacher_record
        from policies.export import export_artifact

        return export_artifact(
            self.out / "artifact",
            self.student_cfg,
            self.learner.contract,
            self.learner.predictor_cfg,
            privileged_fields=robot_privileged_fields(from_root(self.cfg.sim_config)),
            student_weights=self.out / "student.pt",
            predictor_weights=self.out / "predictor.pt",
            teacher=teacher_record(self.cfg.teacher),
            camera=trained_camera(self.cfg, self.student_cfg),
            novelty=self.learner.novelty_export(),
        )


def store_path(ckpt_dir: Path, step: int, rank: int = 0) -> Path:
    """The sample store rank `rank` saved with the checkpoint at `step` decisions."""
    return ckpt_dir / (f"store_{step:09d}.npz" if rank == 0 else f"store_{step:09d}.rank{rank}.npz")


def rank_stores(ckpt_dir: Path, rank: int) -> list[Path]:
    """Every sample store rank `rank` saved in `ckpt_dir` (rank 0's as a world of one names them)."""
    if rank > 0:
        return sorted(ckpt_dir.glob(f"store_*.rank{rank}.npz"))
    return sorted(p for p in ckpt_dir.glob("store*.npz") if ".rank" not in p.name)


def config_changes(old: StudentTrainConfig, new: StudentTrainConfig) -> list[str]:
    """The settings (dotted names, "name: old -> new") two training configs differ in once both are
    resolved (`resolve`), `RESUMABLE` aside: a config saved before runs saved their resolved config (its
    `opd.switch` the file's, not the method's) is the run its resolved form is."""
    a, b = (
        resolve(c, check_given=c is new).model_dump(mode="json", exclude=set(RESUMABLE)) for c in (old, new)
    )
    return [f"{k}: {x!r} -> {y!r}" for k, x, y in _differences(a, b)]


def refuse_another_config(saved: Path, want: StudentTrainConfig) -> None:
    """A ValueError naming the settings when the training config `saved` (a checkpoint's, a run's) is not
    `want` but for `RESUMABLE`, both resolved: what was written under it is another run than the one
    asked for."""
    if changed := config_changes(StudentTrainConfig.from_yaml(saved), want):
        raise ValueError(
            f"{saved} was written under another config ({'; '.join(changed)}): use the config it was "
            "written by, or another --out"
        )


def _differences(a: Any, b: Any, name: str = "") -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            yield from _differences(a.get(k), b.get(k), f"{name}.{k}" if name else k)
    elif a != b:
        yield name, a, b


def export_checkpoint(run_dir: str | Path, out: str | Path, step: int | None = None, **options: Any) -> Path:
    """OUT: the deployable student of a run's checkpoint (the newest, or the one at `step` decisions), to
    evaluate a run while it goes on (`agent eval student --artifact OUT`); the run is only read. The
    acting student's weights are exported: the learner's, or their average with `acting_ema`, and a novelty
    gate's ensemble with them. `options`: `export_artifact`'s int8 and calibration."""
    from opd.live.loading import teacher_record
    from policies.export import Novelty, export_artifact

    ckpt_dir = Path(run_dir) / "checkpoints"
    ckpts = checkpoints(ckpt_dir)
    if step is not None:
        ckpts = [c for c in ckpts if c == checkpoint_path(ckpt_dir, step)]
    if not ckpts:
        which = "no checkpoint" if step is None else f"no checkpoint at step {step}"
        raise ValueError(f"{run_dir}: {which} in {ckpt_dir}")
    path = ckpts[-1]
    cfg = StudentTrainConfig.from_yaml(path.with_suffix(".yaml"))  # the config the checkpoint was written by
    student_cfg = StudentConfig.from_yaml(from_root(cfg.student_config))
    contract = load_teacher(from_root(cfg.teacher)).contract
    learner = load_torch(path)["learner"]
    acting = {**learner["student"], **(learner.get("acting") or {})}  # an average without a fixed encoder
    novelty = learner.get("novelty")
    novelty = None if novelty is None else Novelty(cfg.opd.novelty.model_dump(mode="json"), novelty)
    source = project_path(path)  # the checkpoint, not the scratch copies exported from (deleted after)
    named = {"student": f"{source} (the acting weights)", "predictor": source}
    with tempfile.TemporaryDirectory(prefix="agent-export-") as tmp:
        weights = {name: Path(tmp) / f"{name}.pt" for name in ("student", "predictor")}
        torch.save(acting, weights["student"])
        torch.save(learner["predictor"], weights["predictor"])
        try:
            return export_artifact(
                out, student_cfg, contract, cfg.opd.predictor,
                privileged_fields=robot_privileged_fields(from_root(cfg.sim_config)),
                student_weights=weights["student"], predictor_weights=weights["predictor"],
                teacher=teacher_record(cfg.teacher), novelty=novelty,
                camera=trained_camera(cfg, student_cfg), weights_named=named, **options,
            )  # fmt: skip
        except RuntimeError as err:  # torch's load_state_dict: weights of another architecture
            raise ValueError(f"{path}: its weights do not fit {cfg.student_config}: {err}") from None


def student_frame(obs: Any, envs: np.ndarray) -> dict[str, np.ndarray]:
    """The encoder's inputs of `envs` from a robot Observation, by name. Shapes: (M, ...)."""
    frame = StudentInput(
        image=obs.image[envs],
        imu=obs.imu[envs].astype(np.float32),
        skill=obs.skill[envs].astype(np.int64),
        progress=obs.task.progress[envs].astype(np.float32),
        step=obs.task.step[envs].astype(np.float32),
    )
    return frame._asdict()
