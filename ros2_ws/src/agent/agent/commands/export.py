"""`agent export`: write the deployment artifact (ONNX graphs, weights, manifest with hashes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.commands import at_least, stage_status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, default=Path("artifacts/student"), help="artifact directory to write"
    )
    parser.add_argument(
        "--config", type=Path, help="student config YAML (default policies/configs/student.yaml)"
    )
    parser.add_argument("--predictor-config", type=Path, help="predictor config YAML")
    parser.add_argument(
        "--sim-config", type=Path,
        help="backend sim config (sim/configs/mujoco.yaml, isaacsim.yaml) of the robot whose privileged "
        "state the predictor predicts; default: sim/configs/mujoco.yaml",
    )  # fmt: skip
    parser.add_argument(
        "--proxy-config", type=Path,
        help="real-robot proxy config the student was trained behind: its lens's distortion goes into the "
        "manifest's camera model (preprocessing.camera); default: the robot's camera without distortion",
    )  # fmt: skip
    parser.add_argument("--contract", type=Path, help="skill contract YAML (default: the MuJoCo diffbot's)")
    parser.add_argument("--student-weights", type=Path, help="student state_dict (.pt); default: random init")
    parser.add_argument(
        "--predictor-weights", type=Path, help="predictor state_dict (.pt); default: random init"
    )
    parser.add_argument(
        "--int8", action="store_true", help="also write an INT8 encoder for ONNX Runtime on CPUs"
    )
    parser.add_argument("--calibration", type=Path, help="INT8 calibration inputs (.npz); default: synthetic")
    parser.add_argument("--seed", type=at_least(0), default=0, help="seed of the random initialisation")
    parser.add_argument(
        "--from-run", type=Path, metavar="RUN",
        help="export a student training run's checkpoint (agent train student --out RUN), e.g. to evaluate "
        "it while it trains; its configs come from the checkpoint",
    )  # fmt: skip
    parser.add_argument(
        "--step", type=at_least(0), help="with --from-run: the checkpoint at this step (default: the newest)"
    )


def run(args: argparse.Namespace) -> int:
    if args.from_run is not None:
        return _from_run(args)
    if args.step is not None:
        print("agent export: --step needs --from-run", file=sys.stderr)
        return 2
    from policies.export import DEFAULT_STUDENT_CONFIG, export_artifact
    from policies.predictor_config import PredictorConfig
    from policies.skill_contract import SkillContract
    from policies.student_policy import StudentConfig
    from sim.marker_task import robot_privileged_fields
    from sim.real_robot_proxy import ProxyConfig, robot_camera

    student_cfg = StudentConfig.from_yaml(args.config or DEFAULT_STUDENT_CONFIG)
    image = student_cfg.encoder.image
    proxy = ProxyConfig.from_yaml(args.proxy_config) if args.proxy_config else None
    with stage_status(f"agent export {args.out}") as stage:
        out = export_artifact(
            args.out,
            student_cfg=student_cfg,
            contract=SkillContract.load(args.contract) if args.contract else None,
            predictor_cfg=PredictorConfig.from_yaml(args.predictor_config) if args.predictor_config else None,
            privileged_fields=robot_privileged_fields(args.sim_config),
            student_weights=args.student_weights,
            predictor_weights=args.predictor_weights,
            int8=args.int8,
            calibration=args.calibration,
            seed=args.seed,
            camera=robot_camera(image.height, image.width, proxy),
            on_stage=stage,
        )
    print(f"wrote {out}")
    return 0


def _from_run(args: argparse.Namespace) -> int:
    from opd.student.trainer import export_checkpoint

    own = ("config", "predictor_config", "sim_config", "proxy_config", "contract", "student_weights",
           "predictor_weights")  # fmt: skip
    if given := [f"--{k.replace('_', '-')}" for k in own if getattr(args, k) is not None]:
        print(f"agent export: --from-run takes its configs and weights from the run, not {' '.join(given)}",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        options = {"int8": args.int8, "calibration": args.calibration}
        with stage_status(f"agent export --from-run {args.from_run}") as stage:
            out = export_checkpoint(args.from_run, args.out, args.step, on_stage=stage, **options)
    except ValueError as err:
        print(f"agent export: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
