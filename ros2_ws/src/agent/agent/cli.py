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
    "play": ("play", "watch a policy drive a few episodes: in a window, or an MP4 without a display"),
    "render": ("render", "the same scenes as the sim renders them and through a proxy, side by side (PNG)"),
    "run": ("run", "run the whole ROS 2 graph in one process against a simulator, with live progress"),
    "arm": ("arm", "arm a running stack: activate the opd node, the one that commands the base"),
    "disarm": ("arm", "disarm a running stack: the safe action once, then no motion commands"),
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, less the defaults that say nothing: None and False (an option left
    out, a switch off), and help that names its default itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False) or "default" in text:
            return action.help
        return super()._get_help_string(action)


class SubcommandParsers(argparse._SubParsersAction):
    """A subcommand's one-line help is its description too (`agent train student --help` says what it
    does)."""

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        return super().add_parser(name, **kwargs)


class Parser(argparse.ArgumentParser):
    """The parser of `agent` and, through argparse's `parser_class` (the parent's type), of every
    subcommand at every depth: the defaults formatter and described subcommands."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", SubcommandParsers)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="agent", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
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
