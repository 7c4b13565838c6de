"""`agent eval teacher|student|merge|transfer|factors`: success rates with Wilson 95% intervals, seeded
episodes.

`teacher` and `student` show their progress on stderr (stdout stays the report, one JSON line with
--json), and the report says what it measured: the policy (checkpoint or artifact, with its hash), the sim
and proxy configs (path and hash of the config as it ran) and the seeds. A teacher not named is the one the
student artifact was distilled from (its manifest's `teacher`), so a student is compared with its own.

With --shard-out DIR, a process runs its shard of the episode list (--num-shards, --shard-id: by default
the launcher's WORLD_SIZE and RANK, torchrun's or Slurm's) and writes DIR/shard-K-of-N.json; `merge` makes
the shards' files into the report one process would print (`opd.eval_report`).

`transfer` is the sim-to-real benchmark (`opd.benchmark.transfer`): students trained at one label budget,
each evaluated acting alone on the real-robot proxy (the config's, or the preset --proxy-config names), and
a report against the issue's targets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import opd
import sim
from agent.commands import at_least, device_spec, eval_factors
from agent.commands.video_options import add_video_arguments, recording_of
from policies.config import from_root
from sim.robots import diffbot

if TYPE_CHECKING:  # imported when the command runs: `agent --help` must not load rich's progress or torch
    from rich.console import Console
    from rich.progress import Progress

    from opd.eval_report import Shard

SIM_DIR = Path(sim.__file__).parent
DEFAULT_TEACHER = from_root(diffbot.TEACHER)
DEFAULT_PROXY = SIM_DIR / "configs" / "proxy.yaml"
# opd.evaluation.ASSISTS and ASSIST_RANGE_M, spelled out here so that `agent --help` loads no torch
ASSISTS = ("teacher_unseen", "search_unseen", "teacher_out_of_view", "teacher_far_in_view",
           "teacher_far_out_of_view")  # fmt: skip
ASSIST_RANGE_M = 2.0  # m
EVAL_SEED = 10_000  # opd.evaluation.EVAL_SEED
DEFAULT_STUDENT = from_root(diffbot.STUDENT)  # the committed OPD student artifact
OPD_CONFIGS = Path(opd.__file__).parent / "configs"
PLAIN_EVERY_S = 30.0  # progress off a terminal: one line at most this often, s
PROXY_HELP = (
    "proxy YAML; implies --proxy (default with --proxy: sim/configs/proxy.yaml); the report records its "
    "path and the SHA-256 of the config as it ran"
)
TEACHER_HELP = "default: the one the student artifact was distilled from (its manifest.json's teacher)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    eval_factors.add_parser(sub)
    t = sub.add_parser(
        "teacher", help="evaluate a trained teacher in the clean sim or on the real-robot proxy"
    )
    t.add_argument("--episodes", type=at_least(1), default=200, help="seeded episodes")
    t.add_argument("--proxy", action="store_true", help="run on the real-robot proxy (privileged state)")
    t.add_argument("--proxy-config", type=Path, help=PROXY_HELP)
    which_teacher = t.add_mutually_exclusive_group()
    which_teacher.add_argument("--checkpoint", type=Path, help="teacher.pt (teacher.yaml beside it); "
                               f"{TEACHER_HELP}, else {diffbot.TEACHER}")  # fmt: skip
    which_teacher.add_argument("--artifact", type=Path, default=DEFAULT_STUDENT, help="the student artifact "
                               "whose teacher is evaluated when --checkpoint is not given (default: the "
                               "committed student)")  # fmt: skip
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.add_argument(
        "--envs", type=at_least(1), default=16, help="episodes run side by side (one backend object)"
    )
    add_shard_arguments(t)
    add_video_arguments(t)
    add_device_argument(t)
    s = sub.add_parser("student", help="evaluate an exported student acting alone (no teacher)")
    add_device_argument(s)
    s.add_argument("--artifact", type=Path, default=DEFAULT_STUDENT, help="artifact directory (agent export)")
    s.add_argument("--episodes", type=at_least(1), default=200, help="seeded episodes")
    s.add_argument("--proxy", action="store_true", help="run on the real-robot proxy")
    s.add_argument("--proxy-config", type=Path, help=PROXY_HELP)
    s.add_argument("--backend", default="onnxruntime", help="runtime backend (torch, onnxruntime, tensorrt)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument(
        "--envs", type=at_least(1), default=16, help="episodes run side by side (one backend object)"
    )
    s.add_argument("--assist", choices=ASSISTS, help="diagnostic: override the student in one regime of its "
                   "target (unseen since it became the target, out of view now, farther than --assist-range "
                   "in or out of view) by the teacher or a scripted search; bounds what fixing that regime "
                   "is worth")  # fmt: skip
    s.add_argument("--assist-range", type=float, default=ASSIST_RANGE_M,
                   help="m: where the target counts as far, for --assist teacher_far_*")  # fmt: skip
    s.add_argument("--collisions", action="store_true", help="diagnostic: for each collision, what was hit, "
                   "whether the nearest obstacle was in the camera's view in the last 0.5 s, and the skills "
                   "the student and the teacher (on its own view, not driving) chose then")  # fmt: skip
    s.add_argument("--teacher", type=Path, help="teacher.pt for --assist teacher_* and --collisions; "
                   f"{TEACHER_HELP}")  # fmt: skip
    s.add_argument("--seed", type=at_least(0), default=EVAL_SEED, help=f"seed of the first episode (default "
                   f"{EVAL_SEED}: the held-out test seeds; e.g. 20000 for validation)")  # fmt: skip
    s.add_argument(
        "--skill-bias",
        action="append",
        default=[],
        metavar="SKILL=B",
        type=_skill_bias,
        help="diagnostic: add B to the student's logit of SKILL (its head's bias, in a scratch copy of "
        "the artifact), so that it picks SKILL more (B > 0) or less often (repeatable)",
    )
    add_shard_arguments(s)
    add_video_arguments(s)
    m = sub.add_parser(
        "merge", help="the report of one evaluation from its shards' files (--shard-out), as one process "
        "would print it; refuses missing or doubled episodes and shards of different evaluations",
    )  # fmt: skip
    m.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="a shard file (shard-K-of-N.json) or a directory of them")  # fmt: skip
    m.add_argument("--json", action="store_true", help="print one JSON object")
    r = sub.add_parser(
        "transfer",
        help="sim-to-real benchmark: train sim_only, dagger, novelty and opd (and sim_only_dr where the "
        "config lists it) at one label budget, evaluate each student alone on the proxy, report against the "
        "targets (resumes from --out)",
    )
    which = r.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="tiny students, minutes on a CPU (a smoke run)")
    which.add_argument("--config", type=Path, help="TransferConfig YAML (default opd/configs/transfer.yaml)")
    r.add_argument("--proxy-config", type=Path, metavar="YAML",
                   help="the proxy preset to adapt and evaluate on (e.g. sim/configs/proxy_gap.yaml, the "
                   "reality gap); default: the config's")  # fmt: skip
    r.add_argument("--out", type=Path, help="output directory (default runs/transfer or runs/transfer_quick)")
    r.add_argument("--report", type=Path, help="report directory (default OUT/report)")
    r.add_argument("--json", action="store_true", help="print the report as one JSON object")
    r.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: every job in this process, one after another; ray: each job (a pretrain, "
                   "a method's training, an evaluation) a Ray task, side by side as the cluster's CPUs and "
                   "GPUs allow (docs/cluster.md); the report is the same")  # fmt: skip
    r.add_argument("--address", metavar="HOST:PORT",
                   help="the Ray cluster (--executor ray); default: RAY_ADDRESS, else Ray started on this "
                   "machine. --out must then be storage every node shares")  # fmt: skip
    r.add_argument("--train-gpus", type=float, default=0.0, metavar="G",
                   help="GPUs each training job holds on Ray (--executor ray)")  # fmt: skip


def add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    """--shard-out, --num-shards, --shard-id: this process's shard of the episode list."""
    parser.add_argument("--shard-out", type=Path, metavar="DIR", help="run one shard of the episodes "
                        "(those i with i %% num-shards == shard-id) and write DIR/shard-K-of-N.json for "
                        "agent eval merge")  # fmt: skip
    parser.add_argument("--num-shards", type=at_least(1), metavar="N", help="shards of the episode list "
                        "(default: WORLD_SIZE or SLURM_NTASKS, else 1)")  # fmt: skip
    parser.add_argument("--shard-id", type=at_least(0), metavar="K",
                        help="this process's shard (default: RANK or SLURM_PROCID, else 0)")  # fmt: skip


def shard_of(args: argparse.Namespace) -> Shard | None:
    """This process's shard with --shard-out; None without it, where more than one shard is refused (each
    process would evaluate every episode)."""
    from opd.eval_report import Shard
    from opd.world import World

    count, index = args.num_shards, args.shard_id
    if count is None or index is None:  # shards never meet: no MASTER_ADDR/MASTER_PORT needed (srun)
        world = World.from_env(rendezvous=False)
        count = world.size if count is None else count
        index = world.rank if index is None else index
    shard = Shard(index, count)
    if args.shard_out is None:
        if count > 1:
            raise ValueError(f"{count} shards write one file each: give --shard-out DIR, then merge the "
                             "files with agent eval merge DIR")  # fmt: skip
        return None
    return shard


def _skill_bias(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SKILL=B, B a number") from None


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=device_spec, default="auto", help="auto|cpu|cuda[:N]: where the "
                        "policy runs (auto: this rank's GPU when there is one; ONNX Runtime uses it through "
                        "its CUDA provider where installed); the sim renders on EGL")  # fmt: skip


def device_of(args: argparse.Namespace) -> str:
    """--device as a device name; on a GPU, MuJoCo renders headless on it (set before the sim loads)."""
    from opd.world import World, device_name

    device = device_name(args.device, World.from_env(rendezvous=False))
    if device.startswith("cuda"):
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("MUJOCO_EGL_DEVICE_ID", device.partition(":")[2])
    return device


def run(args: argparse.Namespace) -> int:
    if args.what == "transfer":
        return run_transfer(args)
    if args.what == "factors":
        return eval_factors.run(args)
    if args.what == "merge":
        from opd.eval_report import merge

        return _print(merge(args.paths), args.json)
    shard = shard_of(args)
    video = recording_of(args)
    device = device_of(args)
    from opd.evaluation import checkpoint_record, evaluate_student, evaluate_teacher
    from policies.teacher_policy import load_teacher

    proxy = args.proxy_config or (DEFAULT_PROXY if args.proxy else None)
    episodes = len(shard.episodes(args.episodes)) if shard else args.episodes  # this process runs
    which = f" (shard {shard.id} of {shard.count})" if shard else ""
    if args.what == "student":
        from policies.runtime import load_student

        artifact = args.artifact
        if args.skill_bias:
            from opd.evaluation import biased_student

            scratch = tempfile.TemporaryDirectory(prefix="agent-skill-bias-")
            artifact = biased_student(artifact, dict(args.skill_bias), Path(scratch.name) / "student")
        runtime = load_student(artifact, backend=args.backend, device=device)
        teacher, record = None, None  # only the diagnostics run the teacher
        if args.assist or args.collisions:
            path, chosen = teacher_of(args.artifact, args.teacher)
            teacher, record = load_teacher(path), {**checkpoint_record(path), "chosen": chosen}
        with EpisodeProgress(episodes, f"student{which}") as progress:
            report = evaluate_student(
                runtime, args.episodes, proxy=proxy, num_envs=args.envs, assist=args.assist, teacher=teacher,
                assist_range_m=args.assist_range, collisions=args.collisions, seed=args.seed,
                on_progress=progress, shard=shard, video=video,
            )  # fmt: skip
        if args.skill_bias:  # the scratch copy ran: the report names the student it was made from
            from opd.evaluation import artifact_record
            from policies.artifact import Artifact

            report["skill_bias"] = dict(args.skill_bias)
            report["artifact"] = artifact_record(Artifact.load(args.artifact))
        if record:
            report["teacher"] = record
    else:
        path, chosen = teacher_of(args.artifact, args.checkpoint)
        with EpisodeProgress(episodes, f"teacher{which}") as progress:
            teacher = load_teacher(path).to(device)
            report = evaluate_teacher(teacher, args.episodes, proxy=proxy, num_envs=args.envs,
                                      on_progress=progress, shard=shard, video=video)  # fmt: skip
        report["teacher"] = {**checkpoint_record(path), "chosen": chosen}
    return _print(report, args.json) if shard is None else _write_shard(report, shard, args)


def _write_shard(record: dict, shard: Shard, args: argparse.Namespace) -> int:
    """Write a shard's record to --shard-out; print it (--json) or a line saying what it holds."""
    from opd.eval_report import write_shard

    written = write_shard(args.shard_out, record)
    if args.json:
        print(json.dumps(record))
    else:
        n, done = sum(r["success"] for r in record["results"]), len(record["results"])
        print(f"shard {shard.id} of {shard.count}: {done} of {args.episodes} episodes, {n} success"
              f"{'' if n == 1 else 'es'}; wrote {written} (agent eval merge {args.shard_out})")  # fmt: skip
    return 0


def _print(report: dict, as_json: bool) -> int:
    """An evaluation's report on stdout: one JSON line, or the text `_print_report` lays out."""
    if as_json:
        print(json.dumps(report))
    else:
        _print_report(report)
    return 0


def teacher_of(artifact: Path, given: Path | None) -> tuple[Path, str]:
    """The teacher checkpoint to run and why it is that one: `given`, else the one the student `artifact`
    was distilled from (its manifest's record, refused when missing or changed since), else the committed
    teacher when the manifest names none."""
    if given is not None:
        return given, "given"
    from opd.evaluation import project_path
    from opd.live.loading import default_teacher
    from policies.artifact import Artifact

    student, name = Artifact.load(artifact), project_path(artifact)
    if student.teacher is not None:
        return default_teacher(student), f"the teacher {name} was distilled from (its manifest.json)"
    return DEFAULT_TEACHER, f"the committed default: {name}'s manifest.json names no teacher"


def _print_report(report: dict) -> None:
    lo, hi = report["ci95"]
    proxy = report["proxy_config"]
    where = f"real-robot proxy ({proxy['path']}, sha256 {proxy['sha256'][:12]})" if proxy else "clean sim"
    if art := report.get("artifact"):
        print(f"student {art['path']} (manifest sha256 {art['manifest_sha256'][:12]})")
    if teacher := report.get("teacher"):
        print(f"teacher {teacher['path']} (sha256 {teacher['sha256'][:12]}): {teacher['chosen']}")
    if assist := report.get("assist"):
        print(f"assisted ({assist['mode']}) on {assist['share']:.1%} of control steps")
    seeds = report["seeds"]
    print(f"{report['episodes']} episodes on the {where}, seeds {seeds['first']}-"
          f"{seeds['first'] + seeds['count'] - 1}: success {report['success_rate']:.1%} "
          f"(95% CI {lo:.1%}-{hi:.1%}), mean return {report['mean_return']:.2f}, "
          f"outcomes {report['outcomes']}")  # fmt: skip
    for outcome, end in report["by_outcome"].items():
        print(f"  {outcome}: {end['progress_mean']:.0%} of the tour done on average, "
              f"at {end['time_s_mean']:.1f} s")  # fmt: skip
    if hit := report.get("collisions"):
        print(f"collisions: {hit['hazard']}; nearest obstacle in view in the last {hit['window_s']} s: "
              f"{hit['obstacle_in_view']}; skill most chosen then: {hit['skill']}, the teacher's "
              f"{hit['teacher_skill']}; agreement {hit['agreement']}")  # fmt: skip


class EpisodeProgress:
    """An evaluation's progress on stderr, so that stdout stays its report: episodes done, successes so far
    and the time left, as a rich bar on a terminal, else (a log, a pipe) as a plain line at most every
    `PLAIN_EVERY_S` and one at the end. Called with (episodes done, successes) as `run_episodes` hears
    each episode end."""

    def __init__(
        self, episodes: int, what: str, console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        from rich.console import Console

        self.episodes, self.what, self.clock = episodes, what, clock
        self.console = console or Console(stderr=True)
        self.bar: Progress | None = None
        self.started = self.last_line = clock()
        self.done = self.successes = 0

    def __enter__(self) -> EpisodeProgress:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.started = self.last_line = self.clock()
        if self.console.is_terminal:
            self.bar = Progress(
                TextColumn(f"[bold]eval {self.what}"), BarColumn(),
                TextColumn("{task.completed}/{task.total} episodes, {task.fields[successes]}"),
                TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                console=self.console, refresh_per_second=2,
            )  # fmt: skip
            self.bar.start()
            self.task = self.bar.add_task("eval", total=self.episodes, successes="no episode done yet")
        return self

    def __call__(self, done: int, successes: int) -> None:
        self.done, self.successes = done, successes
        if self.bar is not None:
            self.bar.update(self.task, completed=done, successes=self._successes())
        elif self.clock() - self.last_line >= PLAIN_EVERY_S and done < self.episodes:
            self._line()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.stop()
        elif kind is None:
            self._line()

    def _successes(self) -> str:
        if not self.done:
            return "none yet"
        n = self.successes
        return f"{n} success{'' if n == 1 else 'es'} ({n / self.done:.1%})"

    def _line(self) -> None:
        """One plain line: done, successes, elapsed and (from the pace so far) the time left."""
        self.last_line = now = self.clock()
        elapsed = now - self.started
        left = elapsed / self.done * (self.episodes - self.done) if self.done else None
        rest = "" if left is None or self.done == self.episodes else f", about {_duration(left)} left"
        self.console.print(
            f"eval {self.what}: {self.done}/{self.episodes} episodes, {self._successes()}, "
            f"{_duration(elapsed)} elapsed{rest}", markup=False, highlight=False, soft_wrap=True,
        )  # fmt: skip


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s:02d} s" if minutes else f"{s} s"


def run_transfer(args: argparse.Namespace) -> int:
    from opd.benchmark.report import write_report
    from opd.benchmark.transfer import TransferBenchmark, TransferConfig
    from opd.evaluation import project_path

    name = "transfer_quick" if args.quick else "transfer"
    cfg = TransferConfig.from_yaml(args.config or OPD_CONFIGS / f"{name}.yaml")
    if args.proxy_config is not None:
        cfg = TransferConfig.from_dict({**cfg.model_dump(), "proxy_config": project_path(args.proxy_config)})
    if args.executor == "local" and (args.address is not None or args.train_gpus):
        raise ValueError("--address and --train-gpus are for --executor ray")
    out = args.out or Path("runs") / name
    command = shlex.join(["agent", *_without_executor(sys.argv[1:])])
    # Ray's workers run in their own working directory, perhaps on another node: OUT absolute
    bench = TransferBenchmark(cfg, out.resolve() if args.executor == "ray" else out, command)
    with contextlib.redirect_stdout(sys.stderr):  # training's progress bars; stdout carries the results
        finished = True
        if args.executor == "ray":  # every job a Ray task (`opd.benchmark.ray_jobs`); False: one was stopped
            from opd.benchmark.ray_jobs import run_jobs
            from opd.benchmark.transfer_jobs import JobResources, transfer_jobs

            resources = JobResources.from_dict({"train_gpus": args.train_gpus}, "--train-gpus")
            finished = run_jobs(transfer_jobs(bench, resources), bench, args.address)
        report = bench.run() if finished else None  # after Ray: made of the kept results, nothing to run
    if report is None:  # stopped by SIGINT/SIGTERM after a checkpoint
        print(f"interrupted; rerun the same command to resume from {out}")
        return 130
    md = write_report(report, bench.histories(), args.report or out / "report")
    if args.json:
        print(json.dumps(report))
    else:
        _print_transfer(report)
        print(f"wrote {md}")
    return 0


def _without_executor(argv: list[str]) -> list[str]:
    """The command line less --executor, --address and --train-gpus, as the report records it: they say
    where the jobs ran, not what they made, and the report is the same whichever executor made it."""
    executor = argparse.ArgumentParser(add_help=False)  # matches them as the command's parser does
    for option in ("--executor", "--address", "--train-gpus"):
        executor.add_argument(option)
    return executor.parse_known_args(argv)[1]


def _print_transfer(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from opd.benchmark.report import ci, duration, number, pct, target_value

    title = f"students alone on the real-robot proxy, {report['teacher']['episodes']} episodes"
    if runs := report.get("over_runs"):
        title += f", the run with seed {runs['seeds'][0]}"
    table = Table(title=title)
    for col in ("policy", "success", "95% CI", "labels", "teacher", "last 20%", "switches/min", "train"):
        table.add_column(col)
    for name, m in report["methods"].items():
        table.add_row(
            name, pct(m["success_rate"]), ci(m["ci95"]), number(m["labels"]), pct(m["intervention_rate"]),
            pct(m["intervention_rate_last20"]), number(m["switches_per_min"], ".2f"),
            duration(m["wall_clock_s"]),
        )  # fmt: skip
    t = report["teacher"]
    table.add_row("teacher", pct(t["success_rate"]), ci(t["ci95"]), "-", "100%", "-", "-", "-")
    console = Console(width=None if sys.stdout.isatty() else 120)  # a pipe gets every column
    console.print(table)
    console.print(f"OPD closes {pct(report['derived']['opd_gap_closed'])} of the sim-only-to-teacher gap")
    if (won := report["derived"].get("opd_transfer_won_back")) is not None:
        console.print(f"OPD wins back {pct(won)} of the transfer gap (sim-only, clean sim to proxy)")
    if runs:
        over = Table(
            title=f"over {len(runs['seeds'])} training runs (seeds {', '.join(map(str, runs['seeds']))})"
        )
        for col in ("policy", "mean", "95% CI over runs", "per run"):
            over.add_column(col)
        for name, p in runs["policies"].items():
            per_run = " ".join(pct(v) for v in p["values"])
            over.add_row(name, pct(p["mean"]), ci(p["ci95"]) if p["ci95"] else "n/a", per_run)
        console.print(over)
        console.print(f"OPD closes {pct(runs['opd_gap_closed'])} of the gap between the means")
        if (won := runs.get("opd_transfer_won_back")) is not None:
            console.print(f"OPD wins back {pct(won)} of the transfer gap between the means")
    for row in report["targets"]:
        result = {True: "PASS", False: "FAIL", None: "n/a"}[row["pass"]]
        console.print(f"{result:4}  {row['target']} ({row['goal']}): {target_value(row)} {row['note']}")
    variants = (runs or report["derived"]).get("variants", {})
    for name, variant in variants.items():  # beside the targets, which stay OPD's
        rivals = [
            f"{other} {v['mean' if runs else 'difference'] * 100:+.1f}"
            for other, v in variant["vs"].items()
            if v is not None
        ]
        versus = f"; points vs {', '.join(rivals)}" if rivals else "; no rival run"
        console.print(
            f"variant {name}: closes {pct(variant['gap_closed'])} of the gap{versus}"
            + (" (means over runs)" if runs else "")
        )
