"""`agent bench encoder`: latency of the deployed student per backend (figures, or JSON with --json)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

# Kept in step with policies.bench.VARIANTS (importing it here would load torch for `agent --help`).
VARIANT_NAMES = ("torch", "onnxruntime", "onnxruntime_int8", "tensorrt")
TARGETS = {"onnxruntime_p99_ms": 12.0, "onnxruntime_speedup_vs_torch": 2.0, "tensorrt_fp16_p99_ms": 2.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    enc = sub.add_parser("encoder", help="batch-1 encoder+policy latency for each available backend")
    enc.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    enc.add_argument("--backend", action="append", choices=list(VARIANT_NAMES),
                     help="backend to time (repeatable); default: all")  # fmt: skip
    enc.add_argument("--image-size", type=int, default=128, help="square input size, pixels (multiple of 32)")
    enc.add_argument("--iters", type=int, default=200, help="timed calls per backend")
    enc.add_argument("--warmup", type=int, default=20, help="untimed calls per backend first")
    enc.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads per backend")
    enc.add_argument(
        "--config", type=Path, help="student config YAML (default policies/configs/student.yaml)"
    )
    enc.add_argument("--artifact", type=Path, help="existing artifact directory; default: export a fresh one")


def run(args: argparse.Namespace) -> int:
    from policies.bench import benchmark_student

    variants = args.backend or list(VARIANT_NAMES)
    with tempfile.TemporaryDirectory() as tmp:
        artifact = args.artifact or _fresh_artifact(
            Path(tmp) / "artifact", args, "onnxruntime_int8" in variants
        )
        result = benchmark_student(
            artifact, variants, iters=args.iters, warmup=args.warmup, threads=args.threads
        )
    result["targets"] = TARGETS
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0


def _fresh_artifact(out: Path, args: argparse.Namespace, int8: bool) -> Path:
    from policies.export import DEFAULT_STUDENT_CONFIG, export_artifact
    from policies.student_policy import StudentConfig

    cfg = StudentConfig.from_yaml(args.config or DEFAULT_STUDENT_CONFIG)
    cfg.encoder.image.height = cfg.encoder.image.width = args.image_size
    return export_artifact(out, student_cfg=cfg, int8=int8)


def _print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    size = f"{result['image_size']}x{result['image_size']}"
    table = Table(
        title=f"student latency, batch 1, {result['backbone']} {size}, "
        f"{result['threads']} threads, {result['iters']} iters"
    )
    for col in (
        "backend",
        "precision",
        "p50 ms",
        "p99 ms",
        "speed-up vs torch",
        "max |d emb|",
        "skill agree",
    ):
        table.add_column(col)
    unavailable = []
    for name, r in result["backends"].items():
        if not r["available"]:
            unavailable.append(f"{name}: unavailable: {r['reason']}")
            continue
        table.add_row(
            name, r["precision"], f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['speedup_vs_torch']:.2f}x",
            f"{r.get('max_abs_diff_embedding', float('nan')):.1e}",
            f"{r.get('skill_agreement', float('nan')):.0%}",
        )  # fmt: skip
    console = Console()
    console.print(table)
    for line in unavailable:
        console.print(line)
