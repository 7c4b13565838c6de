"""`agent eval teacher|student`: success rate with a Wilson 95% interval over seeded episodes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import sim

SIM_DIR = Path(sim.__file__).parent
DEFAULT_TEACHER = SIM_DIR / "robots" / "diffbot" / "teacher" / "teacher.pt"
DEFAULT_PROXY = SIM_DIR / "configs" / "proxy.yaml"
DEFAULT_STUDENT = SIM_DIR / "robots" / "diffbot" / "student"  # the committed OPD student artifact


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    t = sub.add_parser(
        "teacher", help="evaluate a trained teacher in the clean sim or on the real-robot proxy"
    )
    t.add_argument("--episodes", type=int, default=200, help="seeded episodes")
    t.add_argument("--proxy", action="store_true", help="run on the real-robot proxy (privileged state)")
    t.add_argument("--proxy-config", type=Path, default=DEFAULT_PROXY, help="proxy YAML used with --proxy")
    t.add_argument(
        "--checkpoint", type=Path, default=DEFAULT_TEACHER, help="teacher.pt (teacher.yaml beside it)"
    )
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.add_argument("--envs", type=int, default=16, help="episodes run side by side (one backend object)")
    s = sub.add_parser("student", help="evaluate an exported student acting alone (no teacher)")
    s.add_argument("--artifact", type=Path, default=DEFAULT_STUDENT, help="artifact directory (agent export)")
    s.add_argument("--episodes", type=int, default=200, help="seeded episodes")
    s.add_argument("--proxy", action="store_true", help="run on the real-robot proxy")
    s.add_argument("--proxy-config", type=Path, default=DEFAULT_PROXY, help="proxy YAML used with --proxy")
    s.add_argument("--backend", default="onnxruntime", help="runtime backend (torch, onnxruntime, tensorrt)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--envs", type=int, default=16, help="episodes run side by side (one backend object)")


def run(args: argparse.Namespace) -> int:
    from opd.evaluation import evaluate_student, evaluate_teacher, load_teacher

    proxy = args.proxy_config if args.proxy else None
    if args.what == "student":
        from policies.runtime import load_student

        runtime = load_student(args.artifact, backend=args.backend)
        report = evaluate_student(runtime, args.episodes, proxy=proxy, num_envs=args.envs)
    else:
        report = evaluate_teacher(
            load_teacher(args.checkpoint), args.episodes, proxy=proxy, num_envs=args.envs
        )
    if args.json:
        print(json.dumps(report))
    else:
        lo, hi = report["ci95"]
        where = "real-robot proxy" if report["proxy"] else "clean sim"
        print(f"{report['episodes']} episodes on the {where}: success {report['success_rate']:.1%} "
              f"(95% CI {lo:.1%}-{hi:.1%}), mean return {report['mean_return']:.2f}, "
              f"outcomes {report['outcomes']}")  # fmt: skip
    return 0
