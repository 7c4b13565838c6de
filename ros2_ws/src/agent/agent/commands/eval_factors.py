"""`agent eval factors`: what each factor of a gap preset costs a student and its teacher
(`opd.benchmark.factors`).

    agent eval factors --artifact opd/results/transfer_wide_bf16/seed1000/pretrain/artifact \\
        --teacher sim/robots/diffbot/teacher_view_memory_obstacles_wide/teacher.pt \\
        --proxy-config sim/configs/proxy_gap.yaml --episodes 200 --out opd/results/gap_factors

Rerunning the same command resumes: each evaluation is written as it finishes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.commands import at_least

POLICIES = ("student", "teacher")


def add_parser(sub: argparse._SubParsersAction) -> None:
    f = sub.add_parser("factors", help="each factor of a gap preset alone, and all of it: a student's and "
                       "its teacher's success, as a table and a bar chart")  # fmt: skip
    f.add_argument("--artifact", type=Path, required=True, help="the student artifact (agent export)")
    f.add_argument(
        "--teacher", type=Path, help="teacher.pt; default: the one the artifact was distilled from"
    )
    f.add_argument("--proxy-config", type=Path, default=Path("sim/configs/proxy_gap.yaml"), help="the preset")
    f.add_argument("--episodes", type=at_least(1), default=200, help="seeded episodes per policy and setting")
    f.add_argument("--envs", type=at_least(1), default=16, help="episodes run side by side")
    f.add_argument("--policies", default=",".join(POLICIES), help="which to measure, comma separated")
    f.add_argument("--out", type=Path, required=True, help="output directory (resumed when it exists)")


def run(args: argparse.Namespace) -> int:
    from opd.benchmark.factors import measure
    from opd.evaluation import evaluate_student, evaluate_teacher
    from opd.live.loading import default_teacher
    from policies.artifact import Artifact
    from policies.config import from_root
    from policies.runtime import load_student
    from policies.teacher_policy import load_teacher
    from sim.real_robot_proxy import ProxyConfig

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies or set(policies) - set(POLICIES):
        raise ValueError(f"--policies {args.policies!r}: choose among {', '.join(POLICIES)}")
    preset = ProxyConfig.from_yaml(from_root(args.proxy_config))
    episodes, envs, runners = args.episodes, args.envs, {}
    if "student" in policies:
        runtime = load_student(args.artifact, backend="onnxruntime")
        runners["student"] = lambda proxy: evaluate_student(runtime, episodes, proxy=proxy, num_envs=envs)
    if "teacher" in policies:
        teacher = load_teacher(args.teacher or default_teacher(Artifact.load(args.artifact)))
        runners["teacher"] = lambda proxy: evaluate_teacher(teacher, episodes, proxy=proxy, num_envs=envs)
    table = measure(runners, preset, args.out)
    print((args.out / "factors.md").read_text(), end="")
    print(
        f"wrote {args.out / 'factors.json'}, factors.md and factors.png ({len(table['settings'])} settings)"
    )
    return 0
