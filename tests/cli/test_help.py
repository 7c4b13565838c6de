"""`--help` at every depth of `agent`: each subcommand has a description line and shows its defaults."""

import argparse

from agent.cli import build_parser


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from subcommands(sub, (*path, name))


def test_every_subcommand_says_what_it_does():
    found = dict(subcommands(build_parser()))
    assert {("train", "student"), ("eval", "transfer"), ("bench", "graph"), ("arm",)} <= set(found)
    undescribed = [" ".join(path) for path, sub in found.items() if not (sub.description or "").strip()]
    assert not undescribed, f"subcommands without a description line: {undescribed}"


def test_help_shows_the_defaults_that_say_something():
    found = dict(subcommands(build_parser()))
    text = found[("train", "student")].format_help()
    assert "(default: agent)" in text  # --wandb-project
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "train the student online" in text  # its description
