"""`agent bench encoder|graph|replay|messages|learner|proxy|ddp|gpu`: figures (a table, or JSON with --json).

- encoder: batch-1 latency of the deployed student per backend;
- graph: the whole ROS 2 graph on the MuJoCo default in real time (`agent run` without the display) for a
  fixed time: image stamp -> published command latency, control rate and jitter, missed cycles, dropped
  messages, and the host's steal time (on a virtual machine: how many missed cycles the host caused);
- replay: offline replay throughput against the encoder's batched throughput (`opd.benchmark.replay_bench`);
- messages: the state embedding's wire size and per-hop cost by message layout (`agent.message_bench`);
- learner: seconds per learner update, the encoder in float32 and in bfloat16 (`opd.benchmark.learner_bench`);
- executors: the transfer benchmark (--quick's by default) by the local executor and by Ray with N CPUs on
  this machine, the wall clock of each (`opd.benchmark.executor_bench`);
- proxy: wall time per camera frame of the bare sim, today's proxy and a gap proxy (`sim.proxy_views`);
- ddp: samples per second of the tiny data-parallel learner job under torchrun, N ranks against 1
  (`opd.benchmark.ddp_bench`);
- gpu: the checks of a CUDA host: learning on CUDA against the CPU, evaluation episodes, the encoder's
  latency on torch CUDA and ONNX Runtime (`opd.benchmark.gpu_check`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.commands import at_least, device_spec, stage_status

if TYPE_CHECKING:  # both load rclpy or numpy, which `agent --help` does without
    from agent.host_steal import StealMonitor
    from agent.sim_session import Progress

# Kept in step with policies.bench.VARIANTS (importing it here would load torch for `agent --help`).
VARIANT_NAMES = ("torch", "onnxruntime", "onnxruntime_int8", "tensorrt")
TARGETS = {"onnxruntime_p99_ms": 12.0, "onnxruntime_speedup_vs_torch": 2.0, "tensorrt_fp16_p99_ms": 2.0}
# The graph on a 2-core CPU, ONNX Runtime at 128x128, over 5 minutes (issue 4).
GRAPH_TARGETS = {"latency_p99_ms": 40.0, "control_rate_hz": 20.0, "missed_cycles": 0}
GRAPH_WARMUP_S = 5.0  # not counted: first inferences, DDS discovery, caches
PROXY_TARGET = 1.3  # a gap proxy's cost per frame against today's proxy's, at most (issue 53)


def image_size(text: str) -> tuple[int, int]:
    """`--image-size`: "N" (square) or "WxH" -> (width, height)."""
    parts = text.lower().split("x")
    try:
        width, height = (int(parts[0]),) * 2 if len(parts) == 1 else (int(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give N (square) or WxH, in pixels") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive")
    return width, height


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    enc = sub.add_parser("encoder", help="batch-1 encoder+policy latency for each available backend")
    enc.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    enc.add_argument("--backend", action="append", choices=list(VARIANT_NAMES),
                     help="backend to time (repeatable); default: all")  # fmt: skip
    enc.add_argument("--image-size", type=image_size, default=(128, 128), metavar="N|WxH",
                     help="input size of the fresh artifact, pixels (multiples of 32): N (square) or WxH, "
                     "e.g. 128x64 for the committed student's wide camera")  # fmt: skip
    enc.add_argument("--iters", type=at_least(1), default=200, help="timed calls per backend")
    enc.add_argument("--warmup", type=at_least(0), default=20, help="untimed calls per backend first")
    enc.add_argument(
        "--threads", type=at_least(1), default=os.cpu_count() or 1, help="CPU threads per backend"
    )
    enc.add_argument(
        "--config", type=Path, help="student config YAML (default policies/configs/student.yaml)"
    )
    enc.add_argument("--artifact", type=Path, help="existing artifact directory; default: export a fresh one")
    from agent.commands.run import add_graph_arguments

    g = sub.add_parser("graph", help="the ROS 2 graph on the MuJoCo default: latency, control rate, drops")
    add_graph_arguments(g, committed_student=True)
    g.add_argument("--duration", type=float, default=60.0, help="wall seconds counted, after a warm-up")
    g.add_argument("--warmup", type=float, default=GRAPH_WARMUP_S, help="wall seconds run first, not counted")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")

    r = sub.add_parser("replay", help="offline replay speed against the encoder's batched throughput")
    r.add_argument("--seconds", type=float, default=30.0, help="length of the generated bag, s")
    r.add_argument(
        "--rounds", type=at_least(1), default=3, help="rounds timed; the figures are the median round"
    )
    r.add_argument("--artifact", type=Path, help="student artifact (default sim/robots/diffbot/student)")
    r.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    m = sub.add_parser("messages", help="state embedding: bytes and cost per hop by message layout")
    m.add_argument("--iters", type=at_least(1), default=2000, help="hops timed per layout")
    m.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    px = sub.add_parser("proxy", help="cost per camera frame: the sim, today's proxy, a gap proxy")
    px.add_argument("--proxy-config", type=Path, default=Path("sim/configs/proxy_gap.yaml"),
                    help="the gap proxy to time against sim/configs/proxy.yaml")  # fmt: skip
    px.add_argument(
        "--sim-config", type=Path, default=Path("sim/configs/mujoco.yaml"), help="sim config YAML"
    )
    px.add_argument(
        "--image-size",
        type=image_size,
        default=(128, 64),
        metavar="N|WxH",
        help="camera size, pixels: N (square) or WxH (default 128x64, the committed student's)",
    )
    px.add_argument("--envs", type=at_least(1), default=4, help="envs stepped together")
    px.add_argument("--steps", type=at_least(1), default=100, help="control steps per round")
    px.add_argument("--rounds", type=at_least(1), default=5, help="rounds timed; the figures are medians")
    px.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    lb = sub.add_parser("learner", help="seconds per learner update, encoder in float32 and in bfloat16")
    lb.add_argument("--config", type=Path, help="student training config whose learner is timed "
                    "(default opd/configs/student_transfer_wide.yaml)")  # fmt: skip
    lb.add_argument(
        "--rounds", type=at_least(1), default=3, help="alternating rounds; the figures are the medians"
    )
    lb.add_argument("--updates", type=at_least(1), default=5, help="updates timed per round and format")
    lb.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    ex = sub.add_parser("executors", help="the transfer benchmark's wall clock: the local executor against "
                        "Ray with N CPUs on this machine")  # fmt: skip
    ex.add_argument("--config", type=Path,
                    help="TransferConfig YAML (default opd/configs/transfer_quick.yaml)")  # fmt: skip
    ex.add_argument("--workers", type=at_least(1), default=2, help="CPUs of the Ray started on this machine")
    ex.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    dp = sub.add_parser("ddp", help="samples/s of the tiny data-parallel learner: N torchrun ranks against 1")
    dp.add_argument("--ranks", type=at_least(2), default=2, help="ranks of the data-parallel run")
    dp.add_argument("--batch", type=at_least(1), default=64, help="rows per rank per update")
    dp.add_argument("--updates", type=at_least(1), default=50, help="timed updates per run")
    dp.add_argument("--device", type=device_spec, default="cpu", help="auto|cpu|cuda[:N] of every rank")
    dp.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    gp = sub.add_parser("gpu", help="a CUDA host's checks: learning against the CPU, evaluation, latency")
    gp.add_argument("--artifact", type=Path, default=Path("sim/robots/diffbot/student"),
                    help="the student evaluated and timed")  # fmt: skip
    gp.add_argument("--episodes", type=at_least(1), default=20, help="evaluation episodes")
    gp.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    fb = sub.add_parser(
        "faults", help="the graph as node processes, one fault at a time: stop, loss, recover"
    )
    fb.add_argument("--artifact", type=Path, default=Path("sim/robots/diffbot/student"), help="the student")
    fb.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    fb.add_argument("--report", type=Path, help="write faults.md and faults.json into this directory")


def run(args: argparse.Namespace) -> int:
    runners = {"graph": run_graph, "encoder": run_encoder, "replay": run_replay, "messages": run_messages,
               "executors": run_executors,
               "learner": run_learner, "proxy": run_proxy, "ddp": run_ddp, "gpu": run_gpu,
               "faults": run_faults}  # fmt: skip
    return runners[args.what](args)


def run_faults(args: argparse.Namespace) -> int:
    """`agent bench faults` (agent.fault_bench); an 8 MiB tmpfs for the full disk where one may mount."""
    import subprocess

    import rclpy

    from agent.fault_bench import FaultBench, as_json, table
    from agent.sim_session import SessionConfig

    params = SessionConfig(args.artifact.resolve(), proxy=True, learn=True).params()
    for section in params.values():  # every report each 0.1 s: the bridge's safe steps are read from it
        section["ros__parameters"]["diagnostics_period_s"] = 0.1
    with tempfile.TemporaryDirectory(prefix="agent-faults-") as tmp:
        tmpfs = Path(tmp) / "tmpfs"
        tmpfs.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(tmpfs)],
                                 capture_output=True, check=False).returncode == 0  # fmt: skip
        try:
            with rclpy.init():
                bench = FaultBench(rclpy.get_default_context(), Path(tmp), args.artifact.resolve(), params,
                                   tmpfs if mounted else None)  # fmt: skip
                rows = bench.run()
        finally:
            if mounted:
                subprocess.run(["umount", str(tmpfs)], check=False)
    text = table(rows)
    cpu = _cpu_model()
    if args.report is not None:
        args.report.mkdir(parents=True, exist_ok=True)
        (args.report / "faults.json").write_text(json.dumps({"cpu": cpu, "rows": as_json(rows)}, indent=2))
        (args.report / "faults.md").write_text(
            f"# Faults on the graph\n\n`agent bench faults --json --report {args.report}` on {cpu}, "
            f"{time.strftime('%Y-%m-%d')}:\n\n{text}\n"
        )
    print(json.dumps({"cpu": cpu, "rows": as_json(rows)}, indent=2) if args.json else text)
    return 0


def run_ddp(args: argparse.Namespace) -> int:
    """The tiny job under torchrun with 1 rank and with N, one after the other, each rank on an equal share
    of the cores; the figure is the ratio of their samples per second (summed over ranks)."""
    import subprocess

    threads = os.cpu_count() or 1
    runs = {}
    for ranks in (1, args.ranks):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "-m", "opd.benchmark.ddp_bench", "--json", "--batch", str(args.batch), "--updates",
               str(args.updates), "--device", args.device,
               "--threads", str(max(1, threads // ranks))]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the {ranks}-rank run failed: {done.stderr.strip()[-2000:]}")
        runs[ranks] = json.loads(done.stdout.strip().splitlines()[-1])
    one, many = runs[1]["samples_per_s"], runs[args.ranks]["samples_per_s"]
    result = {"cpu": _cpu_model(), "cores": threads, "runs": list(runs.values()),
              "ratio": round(many / one, 3)}  # fmt: skip
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['cpu']}, {threads} cores, device {args.device}: batch {args.batch} per rank, "
          f"{args.updates} updates")  # fmt: skip
    for r in runs.values():
        print(f"  {r['ranks']} rank(s) x {r['threads']} threads: {r['samples_per_s']:,.0f} samples/s")
    print(f"{args.ranks} ranks / 1 rank: {result['ratio']:.2f}x samples per second")
    return 0


def run_gpu(args: argparse.Namespace) -> int:
    from opd.benchmark.gpu_check import gpu_check
    from policies.config import from_root

    result = gpu_check(from_root(args.artifact), args.episodes)
    if args.json:
        print(json.dumps(result))
        return 0 if result["ok"] else 1
    t, lat, ev = result["training"], result["encoder_latency"], result["evaluation"]
    print(f"{result['device']}, torch {result['torch']}")
    print(f"training, {t['steps']} float32 steps: max |weight CPU - CUDA| {t['weights_max_abs_diff']:.2e} "
          f"(tolerance {t['weights_atol']:.0e}); encoder in bf16, loss relative difference "
          f"{max(t['encoder_bf16_loss_rel_diff'].values()):.3f} (tolerance {t['bf16_rtol']}): "
          f"{'OK' if t['ok'] else 'FAILED'}")  # fmt: skip
    print(f"  s/update: CPU {t['s_per_update']['cpu']:.4f}, CUDA {t['s_per_update']['cuda']:.4f}")
    for name, v in lat.items():
        print(f"encoder batch-1 {name}: p50 {v['p50_ms']:.2f} ms, p99 {v['p99_ms']:.2f} ms")
    print(f"evaluation: {ev.get('success_rate', float('nan')):.1%} over {args.episodes} episodes in "
          f"{ev['seconds']} s ({', '.join(ev['providers'])})")  # fmt: skip
    return 0 if result["ok"] else 1


def run_learner(args: argparse.Namespace) -> int:
    from opd.benchmark.learner_bench import bench_learner
    from policies.config import from_root

    config = args.config or from_root("opd/configs/student_transfer_wide.yaml")
    with stage_status(f"agent bench learner: {args.rounds} rounds of fp32 and bf16 updates") as stage:
        stage("filling a store, then timing")
        result = bench_learner(config, rounds=args.rounds, updates=args.updates)
    if args.json:
        print(json.dumps(result))
        return 0
    s = result["s_per_update"]
    print(f"{result['config']}: batch {result['batch_size']}, {result['threads']} threads, "
          f"native bfloat16: {'yes' if result['native_bf16'] else 'no (emulated)'}")  # fmt: skip
    print(f"fp32 {s['fp32'] * 1e3:.0f} ms/update, bf16 {s['bf16'] * 1e3:.0f} ms/update: "
          f"bf16 costs {result['bf16_vs_fp32']:.2f} of fp32 (median of {args.rounds} rounds)")  # fmt: skip
    return 0


def run_executors(args: argparse.Namespace) -> int:
    import contextlib

    from opd.benchmark.executor_bench import bench_executors
    from opd.benchmark.transfer import TransferConfig
    from policies.config import from_root

    cfg = TransferConfig.from_yaml(args.config or from_root("opd/configs/transfer_quick.yaml"))
    with tempfile.TemporaryDirectory(prefix="agent-executors-") as work:
        with contextlib.redirect_stdout(sys.stderr):  # training's progress bars; stdout carries the figures
            figures = bench_executors(cfg, Path(work), args.workers)
    result = {"cpu": _cpu_model(), "cores": os.cpu_count(), **figures}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['cpu']} ({result['cores']} cores), {result['jobs']} jobs: local executor "
          f"{result['local_s']:.0f} s, Ray with {result['workers']} CPUs {result['ray_s']:.0f} s (its start "
          f"counted): local/Ray {result['local_over_ray']:.2f}; same results: "
          f"{'yes' if result['same_results'] else 'NO'}")  # fmt: skip
    return 0


def run_proxy(args: argparse.Namespace) -> int:
    import platform

    from agent.host_steal import read_steal_s
    from policies.config import from_root
    from sim.config import SimConfig
    from sim.proxy_views import frame_cost
    from sim.real_robot_proxy import ProxyConfig

    sim_cfg = SimConfig.from_yaml(from_root(args.sim_config))
    width, height = args.image_size
    camera = sim_cfg.camera.model_copy(update={"width": width, "height": height})
    sim_cfg = sim_cfg.model_copy(update={"num_envs": args.envs, "camera": camera})
    if not sim_cfg.camera.enabled:
        raise ValueError(f"--sim-config {args.sim_config}: the camera is off; there is no frame to time")
    proxies = {"proxy": ProxyConfig.from_yaml(from_root("sim/configs/proxy.yaml")),
               "gap": ProxyConfig.from_yaml(from_root(args.proxy_config)), "sim": None}  # fmt: skip
    steal0, t0 = read_steal_s(), time.monotonic()
    figures = frame_cost(sim_cfg, proxies, args.steps, args.rounds)
    steal1 = read_steal_s()
    result = {
        "cpu": _cpu_model() or platform.processor(), "envs": args.envs,
        "image_hw": [sim_cfg.camera.height, sim_cfg.camera.width], "gap_config": str(args.proxy_config),
        "frames": figures, "gap_vs_proxy": figures["gap"]["vs_proxy"],
        "steal_share": None if steal0 is None else round((steal1 - steal0) / (time.monotonic() - t0), 4),
        "target_gap_vs_proxy": PROXY_TARGET,
    }  # fmt: skip
    if args.json:
        print(json.dumps(result))
        return 0
    size = f"{sim_cfg.camera.width}x{sim_cfg.camera.height} px"
    print(f"{result['cpu']}, {args.envs} envs at {size}, medians of {args.rounds} rounds of {args.steps} "
          f"steps; host steal {result['steal_share']} of a core")  # fmt: skip
    for name, f in figures.items():
        print(f"{name:6s} {f['ms_per_frame']:7.2f} ms/frame  x{f['vs_proxy']:.2f} of today's proxy")
    verdict = "met" if result["gap_vs_proxy"] <= PROXY_TARGET else "missed"
    ratio = result["gap_vs_proxy"]
    print(f"gap proxy: x{ratio:.2f} of today's proxy per frame (target <= {PROXY_TARGET}): {verdict}")
    return 0


def _cpu_model() -> str | None:
    """The CPU's model name (Linux), which every timing figure is reported with."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def run_messages(args: argparse.Namespace) -> int:
    from agent.message_bench import bench_messages

    result = bench_messages(iters=args.iters)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"state embedding, E = {result['embed_dim']}: serialise + deserialise + decode, {args.iters} hops")
    for name, r in result["layouts"].items():
        ratio = r["vs_state_embedding"]
        print(f"{name:38s} {r['bytes']:6d} bytes  {r['us_per_hop']:7.1f} us/hop  x{ratio:.2f}")
    return 0


def run_replay(args: argparse.Namespace) -> int:
    from agent.host_steal import read_steal_s
    from opd.benchmark.replay_bench import bench_replay
    from policies.config import from_root

    steal0, t0 = read_steal_s(), time.monotonic()
    result = bench_replay(
        args.artifact or from_root("sim/robots/diffbot/student"), args.seconds, rounds=args.rounds
    )
    steal1, wall = read_steal_s(), time.monotonic() - t0
    steal = None if steal0 is None or steal1 is None else steal1 - steal0
    result["host"] = {"wall_s": round(wall, 1), "steal_s": None if steal is None else round(steal, 2),
                      "cpus": os.cpu_count()}  # fmt: skip
    if args.json:
        print(json.dumps(result))
        return 0
    enc, re, ru = result["encoder_frames_per_s"], result["reencode"], result["reuse_state"]
    print(f"bag: {args.seconds:g} s, 20 Hz camera + 200 Hz IMU; {result['gates']} gates per decision")
    rounds = ", ".join(f"{r['reencode_vs_encoder']:.3f}" for r in result["rounds"])
    print(f"median of {len(result['rounds'])} rounds (re-encoding vs encoder by round: {rounds})")
    print(f"encoder alone (batches of {result['batch_size']}): {enc:.1f} frames/s")
    for name, r in (("replay, re-encoding", re), ("replay, --reuse-state", ru)):
        shares = ", ".join(f"{k} {v:.0%}" for k, v in r["shares"].items())
        print(f"{name}: {r['frames_per_s']:.1f} frames/s, {r['messages_per_s']:.0f} messages/s, "
              f"{r['realtime_x']:.1f}x real time ({shares})")  # fmt: skip
    for key, t in result["targets"].items():
        print(f"{'PASS' if t['pass'] else 'FAIL'}  {key}: {t['value']} (goal {t['goal']})")
    host = result["host"]
    print(f"host: {host['cpus']} CPUs, steal {host['steal_s']} s over {host['wall_s']} s")
    return 0


def run_encoder(args: argparse.Namespace) -> int:
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
    from sim.marker_task import robot_privileged_fields

    cfg = StudentConfig.from_yaml(args.config or DEFAULT_STUDENT_CONFIG)
    cfg.encoder.image.width, cfg.encoder.image.height = args.image_size
    return export_artifact(out, student_cfg=cfg, privileged_fields=robot_privileged_fields(), int8=int8)


def _print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    height, width = result["image_hw"]
    size = f"{width}x{height}"
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


# --learn: the longest the warm-up waits for the learner's first update (its process imports torch and
# needs learning_starts samples; on a loaded 2-core host that took longer than a 2 s warm-up)
LEARNER_START_S = 120.0


def wait_for_learning(session: Any, timeout_s: float) -> None:
    """With a learner, spin on until its first update: figures "beside learning" taken while it was still
    starting would be a loop without learning. A learner that stopped meanwhile fails at once, with why."""
    if session.learner_updates() is None:
        return
    end = time.monotonic() + timeout_s
    while session.learner_updates() == 0:
        if (error := session.learner_error()) is not None:
            raise RuntimeError(f"the opd node's learner process stopped before its first update: {error}")
        if time.monotonic() > end:
            raise RuntimeError(f"the opd node's learner made no update in {timeout_s:g} s of warm-up")
        session.spin(0.5)


def run_graph(args: argparse.Namespace) -> int:

    from agent.commands.run import session_config
    from agent.graph_breakdown import GraphBreakdown
    from agent.host_steal import StealMonitor
    from agent.sim_session import SimSession, ros_interruptible

    if args.duration <= 0 or args.warmup < 0:
        raise ValueError("--duration must be > 0 and --warmup >= 0")
    cfg = session_config(args, committed_student=True)
    steal = StealMonitor()
    with ros_interruptible() as signals:
        session = SimSession(cfg)
        try:
            not_running = session.start()
            breakdown = GraphBreakdown(session)
            session.spin(args.warmup)
            wait_for_learning(session, LEARNER_START_S)
            session.restart_counting()
            breakdown.start()
            updates0 = session.learner_updates()
            steal.start()
            end = time.monotonic() + args.duration
            while time.monotonic() < end:
                session.spin(min(10.0, end - time.monotonic()))
                p = session.progress()
                line = f"{p.cycles} cycles, {p.missed_cycles} missed, p99 {p.latency_percentile(99):.1f} ms"
                if steal.available:
                    line += f", host steal {steal.total_s() * 1e3:.0f} ms"
                print(f"bench graph: {p.wall_s:.0f}/{args.duration:g} s, {line}", file=sys.stderr)
            progress = session.progress()
            where = breakdown.figures(progress)  # before the graph stops: its threads' CPU time
            updates = None if updates0 is None else session.learner_updates() - updates0
            runtime = session.bringup.node("encoder").runtime
            # Wall time of a control period; lockstep (speed 0) has none.
            period_s = session.bridge.loop.period_s / cfg.speed if cfg.speed > 0 else None
        finally:
            signals.stopping = True  # as in `agent run`: no later signal may cut the stop short
            steal.stop()
            session.close()
    result = graph_figures(progress, cfg.backend, cfg.drive)
    result.update(precision=runtime.precision, image_hw=list(runtime.image_hw), threads=cfg.threads,
                  not_running=not_running, host=host_figures(steal, progress, period_s),
                  targets=GRAPH_TARGETS, **where)  # fmt: skip
    if updates is not None:  # --learn: the learning the control loop ran beside
        result["learner"] = {"updates": updates, "updates_per_s": round(updates / progress.wall_s, 2)}
    if args.json:
        print(json.dumps(result))
    else:
        _print_graph(result)
    return 0


def _percentiles(ms: Any) -> dict[str, float | None]:
    """p50, p99 and max of the figures `ms` (N,), ms, rounded; None each when there are none."""
    import numpy as np

    if not ms.size:
        return {"p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(ms, [50, 99])
    return {"p50": round(float(p50), 2), "p99": round(float(p99), 2), "max": round(float(ms.max()), 2)}


def graph_figures(p: Progress, backend: str, drive: str) -> dict:
    """The figures of `agent bench graph` from a session's Progress (see the module doc)."""
    import numpy as np

    return {
        "duration_s": round(p.wall_s, 2),
        # image stamp (state stamp when the teacher drives) -> command
        "latency_ms": _percentiles(p.latency_ms),
        "control_rate_hz": round(p.control_rate_hz, 3),
        "jitter_ms": _percentiles(np.abs(p.lateness_ms)),  # each release's wall time - its due time
        "cycles": p.cycles,
        "missed_cycles": p.missed_cycles,
        "dropped_messages": sum(p.dropped.values()),
        "dropped_by_stream": dict(p.dropped.most_common()),
        "episodes": p.episodes,
        "successes": p.successes,
        "backend": backend,
        "drive": drive,
    }


def host_figures(steal: StealMonitor, p: Progress, period_s: float | None) -> dict | None:
    """The host's steal time over the counted run, the share of control periods (`period_s` wall seconds;
    None in lockstep) that had some, how many missed cycles had some in theirs, and the latency figures of
    the answers whose wait (image due -> command) had none (see `agent.host_steal`); None where the host
    does not report steal. Misses that had steal far more often than periods do were caused by the host."""
    total = steal.total_s()
    if total is None:
        return None
    timed = period_s is not None
    calm = None
    if timed:
        stolen = steal.had_steal(p.latency_at_s - p.latency_ms / 1e3, p.latency_at_s)  # (answers,)
        calm = {**_percentiles(p.latency_ms[~stolen]), "answers": int((~stolen).sum())}
    return {
        "steal_ms": round(total * 1e3, 1),
        "steal_share": round(total / (p.wall_s * (os.cpu_count() or 1)), 4),  # of all CPU time
        "periods_with_steal": round(steal.share_with_steal(period_s), 4) if timed else None,
        "missed_during_steal": steal.count_during_steal(p.missed_at_s, period_s) if timed else None,
        "latency_outside_steal_ms": calm,  # the raw figure, less the answers whose wait had steal
    }


def _print_graph(r: dict) -> None:
    from agent.graph_breakdown import print_breakdown

    lat, jit = r["latency_ms"], r["jitter_ms"]
    height, width = r["image_hw"]
    print(f"graph on MuJoCo, {r['backend']} {r['precision']} {width}x{height}, driven by "
          f"{r['drive']}, {r['duration_s']:g} s counted")  # fmt: skip
    print(f"  release tick -> command: p50 {lat['p50']} ms, p99 {lat['p99']} ms, max {lat['max']} ms "
          f"(target p99 <= {GRAPH_TARGETS['latency_p99_ms']:g} ms)")  # fmt: skip
    print(f"  control loop: {r['control_rate_hz']:.2f} Hz, jitter p50 {jit['p50']} ms, p99 {jit['p99']} ms; "
          f"{r['missed_cycles']} missed of {r['cycles']} cycles")  # fmt: skip
    print(f"  dropped messages: {r['dropped_messages']} {r['dropped_by_stream'] or ''}")
    if (learner := r.get("learner")) is not None:
        print(f"  learning beside it: {learner['updates']} updates ({learner['updates_per_s']:g}/s)")
    if (host := r["host"]) is not None:
        line = f"  host: hypervisor steal {host['steal_ms']:g} ms ({host['steal_share']:.2%} of CPU time)"
        if host["periods_with_steal"] is not None:
            line += (f", in {host['periods_with_steal']:.1%} of control periods and in "
                     f"{host['missed_during_steal']} of the {r['missed_cycles']} missed ones")  # fmt: skip
        print(line)
        if (calm := host["latency_outside_steal_ms"]) is not None:
            print(f"  outside steal ({calm['answers']} answers): release tick -> command "
                  f"p50 {calm['p50']} ms, p99 {calm['p99']} ms, max {calm['max']} ms")  # fmt: skip
    print_breakdown(r)
    for name, why in r["not_running"].items():
        print(f"  {name} not running: {why}")
