"""`agent replay BAG`: a recorded run, offline and deterministic, through the encoder, predictor, gate and
student (`opd.replay.runner`). Stdout carries the summary (or the JSON with --json); --report DIR writes the
markdown report and plots. Errors that stop a replay (no such bag, nothing mapped, --reuse-state with
another artifact's embeddings) end with one line naming the bag and the topic."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_ARTIFACT = "sim/robots/diffbot/student"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="rosbag2 bag directory (MCAP or sqlite3, split or not), or a "
                        "bare .mcap file (one cut short replays up to the cut)")  # fmt: skip
    parser.add_argument("--artifact", type=Path, help="student artifact (default: the recorded run's when it "
                        f"is here, else {DEFAULT_ARTIFACT})")  # fmt: skip
    parser.add_argument("--config", type=Path, help="ReplayConfig YAML (default opd/configs/replay.yaml)")
    parser.add_argument("--reuse-state", action="store_true",
                        help="use the bag's recorded embeddings, not the camera re-encoded")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--report", type=Path, help="write report.md, results.json and PNG plots here")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from opd.replay.bags.reader import BagError, dumps
    from opd.replay.runner import Replay, load_config
    from policies.config import from_root

    artifact = args.artifact or recorded_artifact(args.bag) or from_root(DEFAULT_ARTIFACT)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(f"{stage} frames", total=total)
            bar.update(tasks[stage], completed=done)

        replay = Replay(args.bag, artifact, load_config(args.config), args.reuse_state, progress)
        try:
            result = replay.run()
        except BagError as err:
            raise RuntimeError(str(err)) from None
    if args.report:
        from opd.replay.report import write_report

        md = write_report(result, replay.timeline, args.report)
    if args.json:
        print(dumps(result))
    else:
        _print(result)
        if args.report:
            print(f"wrote {md}")
    return 0


def recorded_artifact(bag: Path) -> Path | None:
    """The artifact the recorded run used (`agent run --record` stores it), when it is on this machine."""
    from opd.replay.bags.reader import recorded_custom_data, recorded_launch_args

    path = recorded_launch_args(recorded_custom_data(bag)).get("artifact_dir")
    return Path(path) if path and Path(path).is_dir() else None


def _print(r: dict) -> None:
    live = r["live_match"]
    print(f"{r['decisions']} decisions on {r['frames']['built']} frames of {r['bag']['path']} "
          f"({r['bag']['duration_s']:.1f} s, {r['mode']})")  # fmt: skip
    if live["compared"]:
        print(f"live decisions reproduced: gate {live['gate_equal']}/{live['compared']}, "
              f"executed actions {live['actions_equal']}/{live['actions_compared']}")  # fmt: skip
    for g in r["gates"]:
        rate = "-" if g["teacher_rate"] is None else f"{g['teacher_rate']:.1%}"
        print(f"  {g['name']:<36} teacher {rate:>6}  switches/min {g['switches_per_min']:6.1f}")
    for h, e in r["prediction_error"].items():
        if e.get("n"):
            print(f"  prediction error {h}: mean {e['mean']:.3f} p90 {e['p90']:.3f} (n={e['n']})")
    for role, topic in r["missing_topics"].items():
        print(f"  not in the bag: {role} ({topic})")
    for s in r["skipped"]:
        print(f"  skipped {s['count']} on {s['topic']} ({s['reason']}): {s['detail'][:100]}")
