"""The `agent` command line: one entry point, one module per subcommand under `agent.commands`.

Subcommand modules are imported only when chosen, so `agent bench encoder` never loads rclpy or MuJoCo.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name -> (module under agent.commands, one-line help). Each module has `add_arguments(parser)`
# and `run(args) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("bench", "benchmarks that print their figures (and JSON with --json)"),
    "export": ("export", "export the student and predictor as one deployment artifact"),
    "train": ("train", "train policies headless (teacher: hybrid SAC on privileged state)"),
    "eval": ("eval", "evaluate policies over seeded episodes with confidence intervals"),
    "replay": ("replay", "replay a recorded bag offline through the encoder, predictor, gate and student"),
    "render": ("render", "the same scenes as the sim renders them and through a proxy, side by side (PNG)"),
    "run": ("run", "run the whole ROS 2 graph in one process against a simulator, with live progress"),
    "arm": ("arm", "arm a running stack: activate the opd node, the one that commands the base"),
    "disarm": ("arm", "disarm a running stack: the safe action once, then no motion commands"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(f"agent.commands.{module}")
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args._module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        # User-facing errors (bad config, corrupt artifact, missing backend) end with one clear line.
        print(f"agent {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
