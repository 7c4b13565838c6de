"""`agent train teacher|student`: headless teacher (hybrid SAC) and student (OPD or a baseline) training.

Both train on a GPU (`--device`) and on N ranks unchanged: `torchrun --nproc-per-node N -m agent.cli train
teacher|student ...` (or `srun`), data-parallel (`opd.distributed`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import opd
from agent.commands import at_least, device_spec
from agent.commands.run_dirs import add_run_arguments, run_dir, wandb_run

CONFIGS = Path(opd.__file__).parent / "configs"
DEFAULT_CONFIG = CONFIGS / "teacher.yaml"
DEFAULT_STUDENT_CONFIG = CONFIGS / "student.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    t = sub.add_parser(
        "teacher", help="train the teacher with hybrid SAC (resumes from --out if it has a checkpoint)"
    )
    t.add_argument("--sim", choices=["mujoco", "isaacsim"], help="simulator backend (default: the config's)")
    t.add_argument("--envs", type=at_least(1), help="parallel envs (one backend object)")
    t.add_argument("--steps", type=at_least(1), help="RL env steps (decisions), summed over envs")
    t.add_argument("--seed", type=at_least(0), help="seed")
    add_run_arguments(t, "train_teacher")
    recipe = t.add_mutually_exclusive_group()
    recipe.add_argument("--config", type=Path, help="training config YAML (default opd/configs/teacher.yaml)")
    recipe.add_argument("--quick", action="store_true", help="a smoke test's size, about a minute on a CPU "
                        "(opd/configs/teacher_quick.yaml)")  # fmt: skip
    add_overrides(t)
    t.add_argument("--device", type=device_spec, help="auto|cpu|cuda[:N]: where the actor and critics learn "
                   "and act (auto, cuda: this rank's GPU, cuda:LOCAL_RANK, if any; default: the config's); "
                   "the envs step on the CPU")  # fmt: skip
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
    add_run_arguments(s, "train_student")
    recipe = s.add_mutually_exclusive_group()
    recipe.add_argument("--config", type=Path, help="training config YAML (default opd/configs/student.yaml)")
    recipe.add_argument("--quick", action="store_true", help="a smoke test's size: the tiny student, 640 "
                        "decisions, about a minute on a CPU (opd/configs/student_quick.yaml)")  # fmt: skip
    s.add_argument("--init-from", type=Path, metavar="ARTIFACT",
                   help="start from this artifact's student and predictor weights (fine-tuning a shipped "
                   "student; a fresh --out only)")  # fmt: skip
    s.add_argument("--no-export", action="store_true", help="skip writing OUT/artifact (ONNX export)")
    s.add_argument("--device", type=device_spec, help="auto|cpu|cuda[:N]: where the student learns (auto, "
                   "cuda: this rank's GPU, cuda:LOCAL_RANK, if any; default: the config's)")  # fmt: skip
    add_overrides(s)


def add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides of the config's fields, read as YAML and validated "
                        "(e.g. opd.gate.budget=0.05 demos.episodes=8); the run's config.yaml holds "
                        "them")  # fmt: skip


def recipe(args: argparse.Namespace, default: Path, quick: str) -> Path:
    return args.config or (CONFIGS / quick if args.quick else default)


def given(**flags: object) -> dict[str, object]:
    """The flags a command was given, by config key (those left out are the config's)."""
    return {k: v for k, v in flags.items() if v is not None}


def run(args: argparse.Namespace) -> int:
    if args.what == "student":
        return run_student(args)
    from opd.distributed import process_group
    from opd.teacher.trainer import TeacherTrainConfig, TeacherTrainer
    from opd.world import World, torch_device

    world = World.from_env()  # a ValueError naming the variable for an inconsistent launch
    flags = given(
        sim=args.sim, num_envs=args.envs, total_steps=args.steps, seed=args.seed, device=args.device
    )
    path = recipe(args, DEFAULT_CONFIG, "teacher_quick.yaml")
    cfg = TeacherTrainConfig.from_yaml(path, args.overrides, flags)
    device = torch_device(cfg.device, world)
    out = run_dir(args, "train_teacher", path.stem, world.size)
    if world.is_main:
        print(f"run directory: {out}", file=sys.stderr)
    with process_group(world, device), wandb_run(args, out, cfg.model_dump(mode="json"), world.is_main):
        teacher = TeacherTrainer(cfg, out, world).run()
    if not world.is_main:
        return 0 if teacher is not None else 130
    if teacher is None:  # stopped by SIGINT/SIGTERM after a checkpoint
        print(f"interrupted; resume with the same command and --out {out}")
        return 130
    print(f"wrote {teacher}")
    return 0


def run_student(args: argparse.Namespace) -> int:
    import os

    from opd.distributed import process_group
    from opd.evaluation import project_path
    from opd.student.trainer import StudentTrainConfig, StudentTrainer
    from opd.world import World, torch_device

    world = World.from_env()  # a ValueError naming the variable for an inconsistent launch

    # init_from as the project names it (relative to its root when inside): the saved config is portable
    flags = given(method=args.method, num_envs=args.envs, total_steps=args.steps, seed=args.seed,
                  init_from=project_path(args.init_from) if args.init_from else None,
                  sim_config=f"sim/configs/{args.sim}.yaml" if args.sim else None,
                  device=args.device)  # fmt: skip
    path = recipe(args, DEFAULT_STUDENT_CONFIG, "student_quick.yaml")
    cfg = StudentTrainConfig.from_yaml(path, args.overrides, flags)
    device = torch_device(cfg.device, world)
    if device.type == "cuda":  # MuJoCo renders headless on this rank's GPU (before the sim loads it)
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("MUJOCO_EGL_DEVICE_ID", str(device.index))
    out = run_dir(args, "train_student", f"{path.stem}-{cfg.method}", world.size)
    if world.is_main:
        print(f"run directory: {out}", file=sys.stderr)
    with process_group(world, device), wandb_run(args, out, cfg.model_dump(mode="json"), world.is_main):
        trainer = StudentTrainer(cfg, out, world)
        student = trainer.run()
    if not world.is_main:
        return 0 if student is not None else 130
    if student is None:  # stopped by SIGINT/SIGTERM after a checkpoint
        print(f"interrupted; resume with the same command and --out {out}")
        return 130
    print(f"wrote {student}")
    if not args.no_export:
        print(f"wrote {trainer.export_artifact()}")
    return 0
