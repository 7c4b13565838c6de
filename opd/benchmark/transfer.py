"""The sim-to-real transfer benchmark: students trained at one label budget, each evaluated alone.

`agent eval transfer` trains sim_only, dagger, novelty and opd (and sim_only_dr where a config lists it)
with `StudentTrainer` (the same training config, `total_steps` and seed: one teacher label per student
frame, so the same label budget), then runs each final student acting alone on the real-robot proxy (the
training config's, or the benchmark's `proxy_config` preset) on held-out seeds (`EVAL_SEED` + i) with a 95%
Wilson interval, and the teacher on the same proxy episodes. The report compares them against the issue's
targets (`Targets`). With `pretrain`, a student is first trained in the clean sim and every method starts
from it: the seed's setting, a sim-trained student deployed on the robot and adapted there (sim_only then
goes on in the clean sim with the same budget).

With several training `seeds`, the whole pipeline (the sim-trained start and every method) runs once per
seed, and the report adds each policy's mean over those runs with a 95% t interval (`over_runs`): one
training run moves a student by several points (docs/opd_experiments.md), more than the methods differ by,
and only runs trained apart show it. Runs go seed by seed, so a benchmark spanning sessions has at most
one run whose sim-trained start must be rebuilt.

Output directory (rerunning the same command resumes; finished steps are not redone):
    config.yaml                    resolved TransferConfig
    pretrain/                      with `pretrain`: the sim-trained start (trainer output, eval.json)
    <method>/                      StudentTrainer's output (checkpoints, history.jsonl, student.pt, artifact/)
    <method>/wall_clock.json       training seconds summed over the runs that trained it (the trainer's,
                                   kept in its checkpoints: a killed run counts to its last checkpoint)
    <method>/eval.json             the student's evaluation on the proxy
    sim_only/eval_clean.json       with `clean_reference`: the sim-only student in the clean sim
    teacher/eval.json              the teacher's evaluation on the proxy
    teacher/eval_clean.json        with `clean_reference`: the teacher in the clean sim
    seed<s>/                       the run of every seed but the first: its pretrain/ and <method>/ as
                                   above (the first seed's run is at the top, where a one-seed benchmark
                                   writes it, so more seeds can be added to a finished benchmark)
    report/                        results.json, report.md, *.png (`opd.benchmark.report`)
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import Field, field_validator
from scipy import stats

from opd.distill.learner import native_bf16
from opd.evaluation import (
    EVAL_SEED,
    config_sha256,
    evaluate_student,
    evaluate_teacher,
    project_path,
    wilson_interval,
)
from opd.runs import checkpoints, read_json, write_json
from opd.student.trainer import (
    ROLLING_EPISODES,
    Method,
    StudentTrainConfig,
    StudentTrainer,
    refuse_another_config,
)
from policies.artifact import MANIFEST, Artifact
from policies.config import Config, from_root
from policies.runtime import load_student
from policies.teacher_policy import load_teacher
from sim.real_robot_proxy import ProxyConfig

log = logging.getLogger(__name__)

METHODS: tuple[Method, ...] = ("sim_only", "dagger", "novelty", "opd")  # baselines first, as in the report
# The methods OPD must beat, each compared where the benchmark ran it: the practitioner's domain-randomised
# sim (sim_only_dr), DAgger on the robot and the novelty gate.
RIVALS: tuple[Method, ...] = ("sim_only_dr", "dagger", "novelty")
# Variants of OPD a config may add to its methods, each with the rivals it is compared with; the targets stay
# OPD's (the gate), a variant's comparisons are reported beside them.
VARIANTS: dict[str, tuple[Method, ...]] = {"opd_novelty": ("dagger", "novelty", "opd")}
LAST_SHARE = 0.2  # the "last 20% of training", fraction of decisions
SWITCH_ROWS = 3  # log lines averaged for the final switches per minute


class Targets(Config):
    """The issue's acceptance targets for OPD."""

    opd_success: float = Field(0.9, ge=0, le=1)  # OPD student's success rate on the proxy, fraction
    # share of the gap OPD closes, fraction: of the transfer gap (what the sim-only student loses from the
    # clean sim to the proxy: `gap_split`'s won-back share) with `gap: transfer`, the reality-gap issue's;
    # of the sim-only-to-teacher gap on the proxy with `gap: teacher`, the first OPD issue's
    gap_closed: float = Field(0.8, ge=0)
    gap: Literal["transfer", "teacher"] = "teacher"
    intervention_last20: float = Field(0.1, ge=0, le=1)  # teacher share of decisions, last 20%, fraction
    # OPD ahead of a rival passes only with the paired McNemar p (over runs: every run's episodes pooled)
    # below this; None: ahead on the mean is enough (the first OPD issue's bar)
    p_value: float | None = Field(None, gt=0, le=1)


class PretrainConfig(Config):
    """The student every method starts from, trained in the clean sim (as sim_only)."""

    train_config: str  # StudentTrainConfig YAML; its method is set to sim_only
    total_steps: int | None = Field(None, ge=1)  # decisions; None = the config's
    # Another benchmark's output directory whose sim-trained starts this one begins from: a seed's start
    # there, trained by the same config and seed, is the same student (it never saw a proxy), so it is
    # taken, not retrained, where its artifact is kept; it is evaluated again here, on this benchmark's
    # proxy. A seed whose start is not kept there is trained here. None: every start is trained here.
    starts_from: str | None = None


class TransferConfig(Config):
    """One transfer benchmark: which methods, how long each trains, how many evaluation episodes."""

    methods: list[Method] = Field(default_factory=lambda: list(METHODS), min_length=1)  # trained in order
    train_config: str = "opd/configs/student.yaml"  # StudentTrainConfig YAML shared by every method
    total_steps: int | None = Field(None, ge=1)  # decisions per method (= labels); None = the config's
    episodes: int = Field(200, ge=1)  # evaluation episodes per policy (seeds EVAL_SEED + i), episodes
    num_envs: int = Field(16, ge=1)  # evaluation episodes run side by side (one backend object), envs
    # training seeds (override the training configs'): every method, and the sim-trained start, is trained
    # once per seed; the report's intervals over runs need two or more
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    backend: str = "onnxruntime"  # runtime backend the students are evaluated with (torch, onnxruntime)
    # The proxy preset every method but the sim-only ones trains on and every policy is evaluated on
    # (overrides the training config's proxy_config; the sim-trained start never sees a proxy, so its
    # config, and a start kept from another benchmark, stays the same). None: the training config's.
    proxy_config: str | None = None
    pretrain: PretrainConfig | None = None  # None: every method starts from scratch
    # The sim-only student and the teacher evaluated in the clean sim too, on the same seeds: what the
    # sim-only student loses to the proxy (the transfer gap, what adapting there can win back) apart from
    # what it lacks against the teacher even in the clean sim (the imitation gap).
    clean_reference: bool = True
    targets: Targets = Field(default_factory=Targets)

    @field_validator("methods", "seeds")
    @classmethod
    def _unique(cls, values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError(f"must not repeat: {values}")
        return values

    def train(self, method: str | None = None, seed: int | None = None) -> StudentTrainConfig:
        """The training config of `method` (None: the shared one) with this benchmark's budget and `seed`
        (None: the first)."""
        base = StudentTrainConfig.from_yaml(from_root(self.train_config))
        seed = self.seeds[0] if seed is None else seed
        update: dict[str, Any] = {"seed": seed, "total_steps": self.total_steps or base.total_steps}
        if self.proxy_config is not None:
            update["proxy_config"] = self.proxy_config
        if method is not None:
            update["method"] = method
        given = base.model_dump(exclude_unset=True)  # what the file gave: resolving fills in the rest
        return StudentTrainConfig.from_dict({**given, **update}, self.train_config)

    def pretrain_train(self, seed: int | None = None) -> StudentTrainConfig:
        """The training config of the sim-trained start (requires `pretrain`) for `seed` (None: the
        first)."""
        assert self.pretrain is not None
        path = self.pretrain.train_config
        base = StudentTrainConfig.from_yaml(from_root(path))
        steps = self.pretrain.total_steps or base.total_steps
        seed = self.seeds[0] if seed is None else seed
        update = {"method": "sim_only", "seed": seed, "total_steps": steps}
        return StudentTrainConfig.from_dict({**base.model_dump(exclude_unset=True), **update}, path)


class TransferBenchmark:
    """Trains, evaluates and summarises each method into `out`; `run()` resumes what is missing."""

    def __init__(self, cfg: TransferConfig, out_dir: Path, command: str = "") -> None:
        self.cfg, self.out, self.command = cfg, Path(out_dir), command
        self.base = cfg.train()
        proxy = ProxyConfig.from_yaml(from_root(self.base.proxy_config))
        self.proxy_sha256 = config_sha256(proxy)  # the proxy every evaluation on it records
        self.out.mkdir(parents=True, exist_ok=True)
        cfg.to_yaml(self.out / "config.yaml")

    def run_dir(self, seed: int | None = None) -> Path:
        """Where the run of `seed` (None: the first) is written: OUT for the first seed, OUT/seed<s> else."""
        seed = self.cfg.seeds[0] if seed is None else seed
        return self.out if seed == self.cfg.seeds[0] else self.out / f"seed{seed}"

    def run(self) -> dict[str, Any] | None:
        """Every method trained and evaluated once per seed, and the teacher evaluated; the report dict
        (the first seed's run, with `over_runs` when there are several), or None when training was
        stopped (SIGINT/SIGTERM after a checkpoint)."""
        runs: dict[int, tuple[dict[str, dict[str, Any]], dict[str, Any] | None]] = {}
        for seed in self.cfg.seeds:
            run = self.seed_run(seed)
            if run is None:
                return None
            runs[seed] = run
        teacher = self.teacher()
        reports = {
            seed: build_report(self.cfg, self.base, teacher, methods, self.command, pretrain)
            for seed, (methods, pretrain) in runs.items()
        }
        return with_runs(reports, self.cfg) if len(reports) > 1 else reports[self.cfg.seeds[0]]

    def seed_run(self, seed: int) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None] | None:
        """Every method of `seed`'s run trained (from its sim-trained start, with `pretrain`) and
        evaluated: (per-method results, the start's result or None); None when stopped."""
        start = None
        if self.cfg.pretrain is not None:
            start = self.sim_trained_start(seed)
            if start is None:
                return None
        methods: dict[str, dict[str, Any]] = {}
        for method in self.cfg.methods:
            result = self.method(method, start, seed)
            if result is None:
                return None
            methods[method] = result
        pretrain = self._pretrain_result(seed) if self.cfg.pretrain is not None else None
        return methods, pretrain

    def sim_trained_start(self, seed: int) -> Path | None:
        """`pretrained` for `seed`'s run, its artifact needed unless every method of the run is finished."""
        needed = not all(self._finished(m, seed) for m in self.cfg.methods)
        return self.pretrained(needed=needed, seed=seed)

    def pretrained(self, needed: bool = True, seed: int | None = None) -> Path | None:
        """The sim-trained start's artifact (absolute) of `seed`'s run, trained (resuming) and evaluated
        unless done; None when its training was stopped. Its eval.json alone stands for it once no method
        needs its artifact; a method that does, in a checkout holding only the small files, gets it
        retrained: deterministic for the seed on one kind of CPU, so the same start unless its first
        training was stopped and resumed or ran on another CPU (the math kernels differ). eval.json and each
        method's init_from.json keep the hash of the start's weights: a start that is not the one evaluated
        is evaluated again, and the report says when one run's methods began from different starts."""
        out, made = self.run_dir(seed) / "pretrain", self.start_dir(seed)
        if (made / "config.yaml").is_file():  # its results stand for the run this config makes
            refuse_another_config(made / "config.yaml", self.cfg.pretrain_train(seed))
        artifact = (made / "artifact").resolve()
        steps = self.cfg.pretrain_train(seed).total_steps
        evaluation = read_json(out / "eval.json")
        done = evaluation is not None and evaluation["steps"] >= steps
        # its export says to how many decisions it was trained (a start taken from another benchmark was
        # trained there; one kept here as eval.json alone was trained in another checkout)
        trained = done or exported_steps(made) >= steps
        evaluated = done and self._fits(evaluation)  # over this benchmark's episodes and proxy
        present = (artifact / MANIFEST).is_file()
        if evaluated and present and evaluation.get("weights_sha256") not in (None, weights_hash(artifact)):
            log.warning(
                "%s is another student than the one its eval.json evaluated (retrained after a resume or on "
                "another CPU): evaluating it again; this run's methods trained from the other one are "
                "flagged in the report", artifact,
            )  # fmt: skip
            evaluated = False
        if evaluated and (present or not needed):
            return artifact
        if not (trained and present) and train_and_export(self.cfg.pretrain_train(seed), made) is None:
            return None
        if not evaluated:  # first evaluated, or over other episodes or another proxy, or another student
            evaluation = {"steps": steps, "weights_sha256": weights_hash(artifact)}
            write_json(out / "eval.json", {**evaluation, **self._evaluate_student(artifact)})
        return artifact

    def start_dir(self, seed: int | None = None) -> Path:
        """Where `seed`'s sim-trained start is trained: this benchmark's run (OUT/.../pretrain), or with
        `pretrain.starts_from` that benchmark's run of the seed where its start is kept (its artifact,
        trained to this benchmark's decisions at least): nothing is ever trained there."""
        own = self.run_dir(seed) / "pretrain"
        assert self.cfg.pretrain is not None
        if self.cfg.pretrain.starts_from is None:
            return own
        source = from_root(self.cfg.pretrain.starts_from)
        other = TransferConfig.from_yaml(source / "config.yaml")
        seed = self.cfg.seeds[0] if seed is None else seed
        if seed not in other.seeds:
            return own
        theirs = source / ("" if seed == other.seeds[0] else f"seed{seed}") / "pretrain"
        kept = (theirs / "artifact" / MANIFEST).is_file()
        return theirs if kept and exported_steps(theirs) >= self.cfg.pretrain_train(seed).total_steps else own

    def _pretrain_result(self, seed: int | None = None) -> dict[str, Any]:
        out, made = self.run_dir(seed) / "pretrain", self.start_dir(seed)
        evaluation = read_json(out / "eval.json")
        assert evaluation is not None  # written by `pretrained` before any method trained
        wall = read_json(made / "wall_clock.json") or {"seconds": 0.0}
        rows = read_history(made / "history.jsonl")
        labels = rows[-1]["labels"] if rows else None
        start = evaluation.get("weights_sha256")  # None for an evaluation kept from before it was recorded
        return {**summary(evaluation), "decisions": evaluation["steps"], "labels": labels,
                "wall_clock_s": wall["seconds"], "start_sha256": start}  # fmt: skip

    def method(
        self, method: str, start: Path | None = None, seed: int | None = None
    ) -> dict[str, Any] | None:
        """Train (resuming; from the artifact `start` if given) and evaluate `method` with `seed` (None:
        the first) unless its evaluation is already there."""
        steps = self.train_method(method, start, seed)
        if steps is None:
            return None
        evaluation = self.evaluate_method(method, steps, seed)
        out = self.run_dir(seed) / method
        wall = read_json(out / "wall_clock.json") or {"seconds": 0.0}
        metrics = training_metrics(read_history(out / "history.jsonl"))
        origin = read_json(out / "init_from.json")  # the start's hash: one run's methods share it
        start_sha = (origin or {}).get("weights_sha256")  # None: no start, or recorded before the field
        result = {
            **summary(evaluation),
            **metrics,
            "wall_clock_s": wall["seconds"],
            "start_sha256": start_sha,
        }
        if method == "sim_only" and self.cfg.clean_reference:
            result["clean"] = self.clean_student(out)
        return result

    def train_method(self, method: str, start: Path | None = None, seed: int | None = None) -> int | None:
        """`method`'s student of `seed`'s run (None: the first) trained (resuming; from the artifact `start`
        if given) and exported unless its evaluation is already there: the decisions it was trained to, or
        None when stopped."""
        out = self.run_dir(seed) / method
        if (out / "config.yaml").is_file():  # its results stand for the run this config makes
            refuse_another_config(out / "config.yaml", self.cfg.train(method, seed))
        if self._finished(method, seed):
            log.info("%s: trained and evaluated already (%s)", method, out / "eval.json")
            return self.evaluate_method(method, self.base.total_steps, seed)["steps"]  # the kept one's
        return self._train(method, out, start, seed)

    def evaluate_method(self, method: str, steps: int, seed: int | None = None) -> dict[str, Any]:
        """The evaluation of `method`'s student of `seed`'s run, trained to `steps` decisions: kept in its
        eval.json, or made on the proxy and kept there (written whole, last: it marks the method finished)."""
        out = self.run_dir(seed) / method
        evaluation = read_json(out / "eval.json")
        if evaluation is not None and self._finished(method, seed):
            return evaluation
        evaluation = {"steps": steps, **self._evaluate_student(out / "artifact")}
        write_json(out / "eval.json", evaluation)
        return evaluation

    def clean_student(self, out: Path) -> dict[str, Any] | None:
        """The method's student in the clean sim (cached in OUT/<method>/eval_clean.json); None when only
        the small files of its run are here (its artifact is needed to evaluate it)."""
        path = out / "eval_clean.json"
        if not self._cached(path) and not (out / "artifact" / "manifest.json").is_file():
            log.warning("%s: no artifact to evaluate in the clean sim; the clean reference is n/a", out)
            return None
        return self._evaluation(path, lambda: self._evaluate_student(out / "artifact", proxy=False))

    def _cached(self, path: Path) -> dict[str, Any] | None:
        """The evaluation kept at `path` if it `_fits` this benchmark."""
        cached = read_json(path)
        return cached if cached is not None and self._fits(cached) else None

    def _fits(self, evaluation: dict[str, Any]) -> bool:
        """The evaluation is over this benchmark's number of episodes and, on a proxy, this benchmark's
        proxy (by its resolved config's hash; one recorded before the hash was kept counts only in a
        benchmark on its training config's proxy, where it was made)."""
        if evaluation["episodes"] != self.cfg.episodes:
            return False
        ran = evaluation.get("proxy_config")
        if ran is None:  # the clean sim, or recorded before the proxy's hash was
            return not evaluation.get("proxy") or self.cfg.proxy_config is None
        return ran["sha256"] == self.proxy_sha256

    def _evaluation(self, path: Path, evaluate: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """`summary` of the evaluation kept at `path`, or of `evaluate()`, which is then kept there."""
        evaluation = self._cached(path)
        if evaluation is not None:
            log.info("evaluated already (%s)", path)
        else:
            evaluation = evaluate()
            write_json(path, evaluation)
        return summary(evaluation)

    def _finished(self, method: str, seed: int | None = None) -> bool:
        """The method's evaluation is of a student trained to this budget, over this many episodes.
        eval.json is written only after the exported artifact was evaluated, so a kept result directory
        needs neither the artifact nor the checkpoints (a run can span machines with only the small files
        kept)."""
        evaluation = self._cached(self.run_dir(seed) / method / "eval.json")
        return evaluation is not None and evaluation["steps"] >= self.base.total_steps

    def _train(self, method: str, out: Path, start: Path | None, seed: int | None) -> int | None:
        """Train into `out` (from the artifact `start` if given) and export its artifact; the trained
        steps, or None when stopped."""
        cfg = self.cfg.train(method, seed)
        if start is not None:  # as the project names it: the saved config holds no absolute path
            cfg = cfg.model_copy(update={"init_from": project_path(start)})
        return train_and_export(cfg, out)

    def _evaluate_student(self, artifact: Path, proxy: bool = True) -> dict[str, Any]:
        """The student alone on the held-out seeds, on the proxy or (`proxy` False) in the clean sim."""
        runtime = load_student(artifact, backend=self.cfg.backend)
        return evaluate_student(
            runtime, self.cfg.episodes, proxy=from_root(self.base.proxy_config) if proxy else None,
            sim_config=from_root(self.base.sim_config), seed=EVAL_SEED, num_envs=self.cfg.num_envs,
        )  # fmt: skip

    def teacher(self) -> dict[str, Any]:
        """The teacher on the same proxy episodes (OUT/teacher/eval.json), and with `clean_reference` in
        the clean sim as "clean" (OUT/teacher/eval_clean.json); both cached."""
        result = self.teacher_eval(proxy=True)
        if self.cfg.clean_reference:
            result["clean"] = self.teacher_eval(proxy=False)
        return result

    def teacher_eval(self, proxy: bool) -> dict[str, Any]:
        """The teacher's evaluation on the proxy or (`proxy` False) in the clean sim, cached."""
        return self._evaluation(
            self.out / "teacher" / ("eval.json" if proxy else "eval_clean.json"),
            lambda: evaluate_teacher(
                load_teacher(from_root(self.base.teacher)), self.cfg.episodes,
                proxy=from_root(self.base.proxy_config) if proxy else None,
                sim_config=from_root(self.base.sim_config), seed=EVAL_SEED, num_envs=self.cfg.num_envs,
            ),
        )  # fmt: skip

    def histories(self) -> dict[str, list[dict[str, Any]]]:
        """Each method's cleaned history.jsonl (see `read_history`) of the first seed's run."""
        return {m: read_history(self.out / m / "history.jsonl") for m in self.cfg.methods}


def train_and_export(cfg: StudentTrainConfig, out: Path) -> int | None:
    """Train (resuming) into `out`, record its wall clock and export its artifact; the trained steps, or
    None when training was stopped. A call that found the training done is not counted as a run; one that
    finds only the final student's export (student.yaml and the artifact, committed for its evaluation in a
    later session) takes it as it is."""
    kept, exported = checkpoints(out / "checkpoints"), exported_steps(out)
    if not kept and exported >= cfg.total_steps and (out / "artifact" / MANIFEST).is_file():
        # trained in an earlier checkout, whose artifact was kept for its evaluation (its checkpoints were
        # not): that student, not another training
        log.info("%s: trained to %d decisions already; its artifact is kept", out, exported)
        return exported
    resumed_at = int(kept[-1].stem.removeprefix("step_")) if kept else 0
    if resumed_at < cfg.total_steps and cfg.opd.distill.precision == "bf16" and not native_bf16():
        # emulated, an update of the wide CPU student cost 12x float32's (`agent bench learner`, 2026-12-05):
        # a method of transfer_wide_bf16 would train for ~10 h instead of ~45 min
        raise RuntimeError(
            f"{out}: this CPU has no native bfloat16 (AVX512-BF16 or AMX), and the config's updates are in "
            "bfloat16 (distill.precision), which it would emulate ~12x slower than float32 (`agent bench "
            "learner`). Run this "
            "benchmark on a CPU with native bfloat16 (the same command resumes from the last checkpoint), "
            "or use a config with distill.precision fp32 (another benchmark: its students are not "
            "comparable with these; opd/configs/transfer_gap.yaml and "
            "docs/experiments/configs/transfer_wide_fp32_mix.yaml are such)."
        )
    trainer = StudentTrainer(cfg, out)
    try:
        if trainer.run() is None:
            return None
    finally:
        if trainer.steps > resumed_at or not (out / "wall_clock.json").is_file():
            record_wall_clock(out / "wall_clock.json", trainer.train_seconds)
    trainer.export_artifact()
    return trainer.steps


def exported_steps(run: Path) -> int:
    """The decisions a training run's exported student was trained for (its student.yaml); 0 without one."""
    path = run / "student.yaml"
    return int(yaml.safe_load(path.read_text())["steps"]) if path.is_file() else 0


def summary(evaluation: dict[str, Any]) -> dict[str, Any]:
    """The report's evaluation fields of an `evaluate_*` result; with its per-episode outcomes, each
    episode's success as one character ("1"/"0", episode i on seed EVAL_SEED + i), for paired comparisons
    (None for an evaluation written before they were kept)."""
    keys = ("success_rate", "ci95", "episodes", "outcomes", "mean_return")
    per_episode = evaluation.get("episode_outcomes")
    success = None if per_episode is None else "".join("1" if o == "success" else "0" for o in per_episode)
    return {**{k: evaluation[k] for k in keys}, "episode_success": success}


def read_history(path: Path) -> list[dict[str, Any]]:
    """history.jsonl as the run that finished saw it: lines written after the checkpoint a resumed run
    restarted from are dropped (the resumed run logs those steps again)."""
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        while rows and rows[-1]["step"] >= row["step"]:
            rows.pop()
        rows.append(row)
    return rows


def last_window(rows: list[dict[str, Any]], share: float = LAST_SHARE) -> tuple[dict, dict] | None:
    """The rows bounding the last `share` of training: the last line at or before (1 - share) of the steps
    (a line at step 0 with zero counts when there is none) and the last line. None without decisions."""
    if not rows:
        return None
    end = rows[-1]
    cut = (1.0 - share) * end["step"]
    start = next(
        (r for r in reversed(rows) if r["step"] <= cut), {"step": 0, "teacher_steps": 0, "gate_counts": {}}
    )
    return (start, end) if end["step"] > start["step"] else None


def last_share(rows: list[dict[str, Any]], share: float = LAST_SHARE) -> float | None:
    """Teacher-executed share of the decisions in the last `share` of training: the difference of the
    cumulative teacher_steps between `last_window`'s rows over the decisions between them. None without
    two points."""
    window = last_window(rows, share)
    if window is None:
        return None
    start, end = window
    return (end["teacher_steps"] - start["teacher_steps"]) / (end["step"] - start["step"])


def last_reasons(rows: list[dict[str, Any]], share: float = LAST_SHARE) -> dict[str, float] | None:
    """Why the gate chose the teacher over the last `share` of training: per reason
    (`opd.distill.gate.REASONS`), the share of the decisions it ruled "teacher/<reason>", from the cumulative
    gate counts of a history that logs them (None for one logged before them, or without a gate's rulings).
    Decisions the gate did not rule (no student frame yet) are not among them."""
    window = last_window(rows, share)
    if window is None or "gate_counts" not in window[1] or "gate_counts" not in window[0]:
        return None
    start, end = window
    decisions = end["step"] - start["step"]
    reasons = {
        k.split("/", 1)[1]: (v - start["gate_counts"].get(k, 0)) / decisions
        for k, v in end["gate_counts"].items()
        if k.startswith("teacher/")
    }
    return {k: v for k, v in sorted(reasons.items()) if v > 0} or None


def training_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Labels, teacher-executed decisions and their share (all and last 20%), switches per minute and the
    final prediction error per horizon, from a method's history rows (None where nothing was logged)."""
    if not rows:
        keys = ("decisions", "labels", "teacher_decisions", "intervention_rate", "intervention_rate_last20")
        keys += ("switches_per_min", "training_episodes", "teacher_reasons_last20")
        return {**dict.fromkeys(keys), "pred_error": {}}
    end = rows[-1]
    switches = [r["episode/switches_per_min"] for r in rows if "episode/switches_per_min" in r]
    with_pred = [r for r in rows if "pred_error/h1" in r]
    last_pred = with_pred[-1] if with_pred else {}
    pred = {k.split("/")[1]: finite(v) for k, v in last_pred.items() if k.startswith("pred_error/")}
    return {
        "decisions": end["step"],
        "labels": end["labels"],
        "teacher_decisions": end["teacher_steps"],
        "intervention_rate": end["teacher_steps"] / end["step"] if end["step"] else None,
        "intervention_rate_last20": last_share(rows),
        "teacher_reasons_last20": last_reasons(rows),
        "switches_per_min": finite(np.mean(switches[-SWITCH_ROWS:])) if switches else None,
        "pred_error": pred,
        "training_episodes": training_episodes(rows),
    }


def training_episodes(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How the executed policy (the gate's choice, the teacher's actions included) did while it learned:
    the finished training episodes, their successes and their outcomes, with a 95% Wilson interval.

    From the cumulative counts of a history that logs them (`train_outcomes`, "whole_run": True). A history
    logged before them holds only the mean over the newest 100 episodes, which is exact while no more than
    100 have finished: then the first episodes are counted ("whole_run": False, no outcomes). None when no
    episode finished."""
    end = rows[-1]
    counts = end.get("train_outcomes")
    if counts is not None:
        n, successes, outcomes, whole = sum(counts.values()), counts.get("success", 0), counts, True
    else:
        early = [r for r in rows if 0 < r.get("episodes", 0) <= ROLLING_EPISODES and "episode/success" in r]
        if not early:
            return None
        n, whole, outcomes = early[-1]["episodes"], False, None
        successes = round(early[-1]["episode/success"] * n)
    if n == 0:
        return None
    lo, hi = wilson_interval(successes, n)
    return {"episodes": n, "successes": successes, "success_rate": successes / n,
            "ci95": [round(lo, 4), round(hi, 4)], "outcomes": outcomes, "whole_run": whole}  # fmt: skip


def finite(value: float) -> float | None:
    """A float for the report, None when NaN or infinite (strict JSON has neither)."""
    return float(value) if np.isfinite(value) else None


def gap_closed(opd: float, sim_only: float, teacher: float) -> float | None:
    """(opd - sim_only) / (teacher - sim_only): the share of the transfer gap OPD closes; None when the
    teacher is no better than sim_only (there is no gap to close)."""
    gap = teacher - sim_only
    return (opd - sim_only) / gap if gap > 0 else None


def cis_separate(better: list[float], worse: list[float]) -> bool:
    """True when `better`'s 95% interval lies wholly above `worse`'s: lower bound > upper bound."""
    return better[0] > worse[1]


def points(bounds: list[float]) -> str:
    """An interval of success-rate differences in percentage points."""
    return f"{bounds[0] * 100:+.1f} to {bounds[1] * 100:+.1f} points"


def paired(a: str, b: str, z: float = 1.959964) -> dict[str, Any]:
    """Policy a against b on the same episodes (`summary`'s "episode_success" of each): the seeds only one
    of them succeeded on, the difference of success rates with a 95% interval, and McNemar's exact p.

    Every policy plays the same seeds, so a layout that is hard for one is mostly hard for the other: the
    difference's spread comes from the discordant seeds only, and separate intervals (which ignore that)
    understate a real difference. Interval: the adjusted Wald interval for paired proportions (Bonett &
    Price 2012: one pseudo-count added to each discordant cell); p: the two-sided exact binomial test of the
    discordant seeds (McNemar's exact test)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired outcomes need the same episodes: {len(a)} against {len(b)}")
    n = len(a)
    only_a = sum(x == "1" and y == "0" for x, y in zip(a, b, strict=True))
    only_b = sum(x == "0" and y == "1" for x, y in zip(a, b, strict=True))
    pa, pb = (only_a + 1) / (n + 2), (only_b + 1) / (n + 2)
    diff = pa - pb
    half = z * math.sqrt(max((pa + pb - diff**2) / (n + 2), 0.0))
    discordant = only_a + only_b
    tail = sum(math.comb(discordant, k) for k in range(min(only_a, only_b) + 1)) / 2**discordant
    return {"episodes": n, "only_a": only_a, "only_b": only_b, "difference": (only_a - only_b) / n,
            "ci95": [round(max(diff - half, -1.0), 4), round(min(diff + half, 1.0), 4)],
            "p_value": min(1.0, 2 * tail)}  # fmt: skip


def gap_split(methods: dict[str, dict[str, Any]], teacher: dict[str, Any]) -> dict[str, Any] | None:
    """The sim-only-to-teacher gap on the proxy split in two with the clean-sim references: the transfer
    gap (what the sim-only student loses from the clean sim to the proxy) and the imitation gap (the
    teacher's lead over it in the clean sim), in success-rate fractions; and how much of the transfer gap
    each adapted method wins back, (method - sim_only) / transfer (None without one). None without both
    references."""
    sim_only = methods.get("sim_only") or {}
    clean_student, clean_teacher = sim_only.get("clean"), teacher.get("clean")
    if clean_student is None or clean_teacher is None:
        return None
    transfer = clean_student["success_rate"] - sim_only["success_rate"]
    won_back = {
        m: (r["success_rate"] - sim_only["success_rate"]) / transfer if transfer > 0 else None
        for m, r in methods.items()
        if m != "sim_only"
    }
    return {"sim_only_clean": clean_student["success_rate"], "teacher_clean": clean_teacher["success_rate"],
            "transfer": transfer, "imitation": clean_teacher["success_rate"] - clean_student["success_rate"],
            "transfer_won_back": won_back}  # fmt: skip


def derived(methods: dict[str, dict[str, Any]], teacher: dict[str, Any]) -> dict[str, Any]:
    """OPD's gap closed, the gap's split (`gap_split`) and OPD's comparison with dagger and novelty (None
    where a method was not run); under "variants", each OPD variant run (`VARIANTS`) with its gap closed and
    its comparisons."""
    split = gap_split(methods, teacher)
    out: dict[str, Any] = {
        "opd_gap_closed": gap_of(methods, "opd", teacher),
        "gap_split": split,
        # the reality-gap issue's figure: (opd - sim_only) / (sim_only in the clean sim - sim_only)
        "opd_transfer_won_back": None if split is None else split["transfer_won_back"].get("opd"),
    }
    for other in RIVALS:
        out[f"opd_vs_{other}"] = versus(methods, "opd", other)
    out["variants"] = {
        v: {"gap_closed": gap_of(methods, v, teacher), "vs": {r: versus(methods, v, r) for r in rivals}}
        for v, rivals in VARIANTS.items()
        if v in methods
    }
    return out


def gap_of(methods: dict[str, dict[str, Any]], method: str, teacher: dict[str, Any]) -> float | None:
    """The share of the sim-only-to-teacher gap `method` closes (None where either was not run)."""
    m, sim_only = methods.get(method), methods.get("sim_only")
    if not (m and sim_only):
        return None
    return gap_closed(m["success_rate"], sim_only["success_rate"], teacher["success_rate"])


def versus(methods: dict[str, dict[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    """Method a against b: the difference, whether the CIs separate, and the paired comparison on the same
    seeds (None: an evaluation kept from before per-episode outcomes); None where either was not run."""
    ra, rb = methods.get(a), methods.get(b)
    if not (ra and rb):
        return None
    both = ra.get("episode_success") and rb.get("episode_success")
    return {
        "difference": ra["success_rate"] - rb["success_rate"],
        "ci_separated": cis_separate(ra["ci95"], rb["ci95"]),
        "paired": paired(ra["episode_success"], rb["episode_success"]) if both else None,
    }


def check_targets(
    methods: dict[str, dict[str, Any]], extra: dict[str, Any], targets: Targets
) -> list[dict[str, Any]]:
    """The issue's targets with the measured value and pass/fail (None: not measurable in this run)."""
    opd = methods.get("opd")

    def row(name: str, goal: str, value: float | None, passed: bool | None, note: str = "") -> dict:
        # value: a fraction, or for the comparisons a difference of success rates
        return {"target": name, "goal": goal, "value": value, "pass": passed, "note": note}

    success = opd["success_rate"] if opd else None
    if targets.gap == "transfer":
        gap, gap_name = extra["opd_transfer_won_back"], "transfer gap won back (sim-only clean to proxy)"
    else:
        gap, gap_name = extra["opd_gap_closed"], "sim-only-to-teacher gap closed"
    last20 = opd["intervention_rate_last20"] if opd else None
    rows = [
        row("OPD success on the proxy", f">= {targets.opd_success:.0%}", success,
            None if success is None else success >= targets.opd_success),
        row(gap_name, f">= {targets.gap_closed:.0%}", gap,
            None if gap is None else gap >= targets.gap_closed),
    ]  # fmt: skip
    goal = "> rival" if targets.p_value is None else f"> rival, p < {targets.p_value:g}"
    for other in RIVALS:
        versus = extra.get(f"opd_vs_{other}")
        if versus is None:  # not run in this benchmark
            continue
        pair = versus.get("paired")
        if runs := versus.get("runs"):  # over training runs (`check_targets_over_runs`)
            note = f"ahead in {runs['ahead_in']} of {runs['runs']} runs"
            if runs["ci95"] is not None:
                excludes = runs["ci95"][0] > 0 or runs["ci95"][1] < 0
                zero = "excludes" if excludes else "includes"
                note += f"; 95% t CI over runs {points(runs['ci95'])} ({zero} 0)"
            pair = runs.get("pooled_paired")
            if pair:
                note += f"; pooled paired p = {pair['p_value']:.3g}"
        else:
            note = f"95% CIs separate: {'yes' if versus['ci_separated'] else 'no'}"
            if pair:
                note += f"; paired 95% CI {points(pair['ci95'])}, p = {pair['p_value']:.3g}"
        passed: bool | None = versus["difference"] > 0
        if targets.p_value is not None:  # a lead counts only when the paired test says it is not noise
            passed = None if pair is None else passed and pair["p_value"] < targets.p_value
        rows.append(row(f"better than {other} at equal budget", goal, versus["difference"], passed, note))
    rows.append(
        row("teacher interventions, last 20% of training", f"< {targets.intervention_last20:.0%}", last20,
            None if last20 is None else last20 < targets.intervention_last20)
    )  # fmt: skip
    return rows


def build_report(
    cfg: TransferConfig,
    base: StudentTrainConfig,
    teacher: dict[str, Any],
    methods: dict[str, dict[str, Any]],
    command: str,
    pretrain: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report dict: per method, the teacher, the sim-trained start (None without one), derived
    figures, targets, the command and the config."""
    extra = derived(methods, teacher)
    return {
        "command": command,
        "methods": methods,
        "teacher": teacher,
        "pretrain": pretrain,
        "derived": extra,
        "targets": check_targets(methods, extra, cfg.targets),
        "eval_seed": EVAL_SEED,
        # the shared training config; each method's own is OUT/<method>/config.yaml
        "config": {
            "transfer": cfg.model_dump(mode="json"),
            "train": base.model_dump(mode="json", exclude={"method"}),
        },
    }


def over_runs(values: list[float], bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """Runs' figures (one per training seed): their mean and a 95% t interval over them (None for one
    run: a single run says nothing of how far retraining moves it). `bounds` clips the interval to the
    figure's range (a success rate's t interval can pass 100% with few runs)."""
    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return {"runs": n, "values": values, "mean": mean, "sd": None, "ci95": None}
    sd = float(np.std(values, ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return {"runs": n, "values": values, "mean": mean, "sd": sd, "ci95": [lo, hi]}


def pooled(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Every run's evaluation episodes counted together, with a 95% Wilson interval: the evaluation noise
    alone, blind to retraining (`over_runs` is not)."""
    successes = sum(round(r["success_rate"] * r["episodes"]) for r in results)
    episodes = sum(r["episodes"] for r in results)
    lo, hi = wilson_interval(successes, episodes)
    return {"successes": successes, "episodes": episodes, "success_rate": successes / episodes,
            "ci95": [round(lo, 4), round(hi, 4)]}  # fmt: skip


def run_starts(report: dict[str, Any]) -> int:
    """How many different sim-trained starts one run's methods began from and its `pretrained` row
    evaluated (by the artifact's hash): 1 as it should be, more when the start was retrained into another
    student between them (after a stopped and resumed first training, or on another CPU); 0 without one."""
    results = [*report["methods"].values(), report["pretrain"] or {}]
    return len({r["start_sha256"] for r in results if r.get("start_sha256")})


def weights_hash(artifact: Path) -> str:
    """Which student the artifact holds (`Artifact.weights_hash`, as init_from.json records it), its files
    verified against the manifest."""
    return Artifact.load(artifact).weights_hash


def with_runs(reports: dict[int, dict[str, Any]], cfg: TransferConfig) -> dict[str, Any]:
    """The report of several training seeds: the first seed's report, each run's figures ("runs"), the
    figures over runs ("over_runs") and the targets judged on those (the means, and for the comparisons
    the per-run differences' 95% t interval)."""
    seeds = list(reports)
    first = reports[seeds[0]]
    teacher = first["teacher"]
    policies = (["pretrained"] if first["pretrain"] is not None else []) + list(first["methods"])

    def result(report: dict[str, Any], policy: str) -> dict[str, Any]:
        return report["pretrain"] if policy == "pretrained" else report["methods"][policy]

    table: dict[str, Any] = {}
    for policy in policies:
        results = [result(reports[s], policy) for s in seeds]
        last20 = [r.get("intervention_rate_last20") for r in results]
        table[policy] = {
            **over_runs([r["success_rate"] for r in results], bounds=(0.0, 1.0)),
            "pooled": pooled(results),
            "intervention_rate_last20": None if None in last20 else float(np.mean(last20)),
        }
    opd_vs = {other: versus_over_runs(reports, "opd", other) for other in RIVALS}
    means = {p: {"success_rate": t["mean"]} for p, t in table.items()}
    variants = {
        v: {
            "gap_closed": gap_of(means, v, teacher),
            "vs": {r: versus_over_runs(reports, v, r) for r in rivals},
        }
        for v, rivals in VARIANTS.items()
        if v in table
    }
    gap = gap_of(means, "opd", teacher)
    cleans = [(r["methods"].get("sim_only") or {}).get("clean") for r in reports.values()]
    if "sim_only" in means and all(cleans):  # the gap's split between the means
        means["sim_only"]["clean"] = {"success_rate": float(np.mean([c["success_rate"] for c in cleans]))}
    split = gap_split(means, teacher)
    starts = {str(s): run_starts(r) for s, r in reports.items()}
    summary_runs = {"seeds": seeds, "policies": table, "opd_vs": opd_vs, "opd_gap_closed": gap,
                    "gap_split": split,
                    "opd_transfer_won_back": None if split is None else split["transfer_won_back"].get("opd"),
                    "variants": variants, "starts_per_run": starts}  # fmt: skip
    return {
        **first,
        "runs": {str(s): {k: r[k] for k in ("methods", "pretrain", "derived")} for s, r in reports.items()},
        "over_runs": summary_runs,
        "targets_first_run": first["targets"],
        "targets": check_targets_over_runs(summary_runs, cfg.targets),
    }


def versus_over_runs(reports: dict[int, dict[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    """Method a against b over the runs: the per-run differences' mean and 95% t interval, in how many runs
    a was ahead, and every run's episodes paired on their seeds (evaluation noise only); None where either
    was not run."""
    if any(a not in r["methods"] or b not in r["methods"] for r in reports.values()):
        return None
    pairs = [(r["methods"][a], r["methods"][b]) for r in reports.values()]
    diffs = [ra["success_rate"] - rb["success_rate"] for ra, rb in pairs]
    outcomes = [(ra.get("episode_success"), rb.get("episode_success")) for ra, rb in pairs]
    kept = all(x and y for x, y in outcomes)
    return {
        **over_runs(diffs),
        "ahead_in": sum(d > 0 for d in diffs),
        "pooled_paired": paired(*("".join(x) for x in zip(*outcomes, strict=True))) if kept else None,
    }


def check_targets_over_runs(runs: dict[str, Any], targets: Targets) -> list[dict[str, Any]]:
    """`check_targets` on the means over runs; a comparison passes when OPD's mean lead is positive, and
    its note says whether the 95% t interval of the per-run differences excludes zero."""
    policies = runs["policies"]
    opd = policies.get("opd")
    methods = {}
    if opd is not None:
        methods["opd"] = {
            "success_rate": opd["mean"],
            "intervention_rate_last20": opd["intervention_rate_last20"],
        }
    extra: dict[str, Any] = {
        "opd_gap_closed": runs["opd_gap_closed"],
        "opd_transfer_won_back": runs.get("opd_transfer_won_back"),
    }
    for other, versus in runs["opd_vs"].items():
        extra[f"opd_vs_{other}"] = None if versus is None else {"difference": versus["mean"], "runs": versus}
    return check_targets(methods, extra, targets)


def record_wall_clock(path: Path, seconds: float) -> None:
    """The method's training seconds so far (the trainer sums them over resumes) and runs that trained it."""
    runs = (read_json(path) or {"runs": 0})["runs"] + 1
    write_json(path, {"seconds": seconds, "runs": runs})
