"""`agent train teacher|student`: headless teacher (hybrid SAC) and student (OPD or a baseline) training."""

from __future__ import annotations

import argparse
from pathlib import Path

import opd
from agent.commands import at_least

DEFAULT_CONFIG = Path(opd.__file__).parent / "configs" / "teacher.yaml"
DEFAULT_STUDENT_CONFIG = Path(opd.__file__).parent / "configs" / "student.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    t = sub.add_parser(
        "teacher", help="train the teacher with hybrid SAC (resumes from --out if it has a checkpoint)"
    )
    t.add_argument("--sim", choices=["mujoco", "isaacsim"], help="simulator backend (default: the config's)")
    t.add_argument("--envs", type=at_least(1), help="parallel envs (one backend object)")
    t.add_argument("--steps", type=at_least(1), help="RL env steps (decisions), summed over envs")
    t.add_argument("--seed", type=at_least(0), help="seed")
    t.add_argument("--out", type=Path, default=Path("runs/teacher"), help="output directory")
    t.add_argument("--config", type=Path, help="training config YAML (default opd/configs/teacher.yaml)")
    s = sub.add_parser(
        "student",
        help="train the student online from the teacher on the real-robot proxy (resumes from --out)",
    )
    s.add_argument("--method", choices=["opd", "dagger", "novelty", "sim_only", "sim_only_dr", "opd_novelty"],
                   help="default: the config's")  # fmt: skip
    s.add_argument("--sim", choices=["mujoco", "isaacsim"], help="simulator: sim/configs/<sim>.yaml (Isaac "
                   "Sim on GPU hosts with the isaacsim extra); default: the config's sim_config")  # fmt: skip
    s.add_argument("--envs", type=at_least(1), help="parallel envs (one backend object)")
    s.add_argument("--steps", type=at_least(1), help="decisions (control periods), summed over envs")
    s.add_argument("--seed", type=at_least(0), help="seed")
    s.add_argument("--out", type=Path, default=Path("runs/student"), help="output directory")
    s.add_argument("--config", type=Path, help="training config YAML (default opd/configs/student.yaml)")
    s.add_argument("--init-from", type=Path, metavar="ARTIFACT",
                   help="start from this artifact's student and predictor weights (fine-tuning a shipped "
                   "student; a fresh --out only)")  # fmt: skip
    s.add_argument("--no-export", action="store_true", help="skip writing OUT/artifact (ONNX export)")


def run(args: argparse.Namespace) -> int:
    if args.what == "student":
        return run_student(args)
    from opd.teacher.trainer import TeacherTrainConfig, TeacherTrainer

    cfg = TeacherTrainConfig.from_yaml(args.config or DEFAULT_CONFIG)
    overrides = {"sim": args.sim, "num_envs": args.envs, "total_steps": args.steps, "seed": args.seed}
    cfg = TeacherTrainConfig.from_dict(
        {**cfg.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    )
    teacher = TeacherTrainer(cfg, args.out).run()
    if teacher is None:  # stopped by SIGINT/SIGTERM after a checkpoint
        print(f"interrupted; rerun the same command to resume from {args.out / 'checkpoints'}")
        return 130
    print(f"wrote {teacher}")
    return 0


def run_student(args: argparse.Namespace) -> int:
    from opd.evaluation import project_path
    from opd.student.trainer import StudentTrainConfig, StudentTrainer

    cfg = StudentTrainConfig.from_yaml(args.config or DEFAULT_STUDENT_CONFIG)
    # init_from as the project names it (relative to its root when inside): the saved config is portable
    overrides = {"method": args.method, "num_envs": args.envs, "total_steps": args.steps, "seed": args.seed,
                 "init_from": project_path(args.init_from) if args.init_from else None,
                 "sim_config": f"sim/configs/{args.sim}.yaml" if args.sim else None}  # fmt: skip
    cfg = StudentTrainConfig.from_dict(
        {**cfg.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    )
    trainer = StudentTrainer(cfg, args.out)
    student = trainer.run()
    if student is None:  # stopped by SIGINT/SIGTERM after a checkpoint
        print(f"interrupted; rerun the same command to resume from {args.out / 'checkpoints'}")
        return 130
    print(f"wrote {student}")
    if not args.no_export:
        print(f"wrote {trainer.export_artifact()}")
    return 0
