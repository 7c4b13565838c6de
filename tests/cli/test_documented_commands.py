"""Every `agent` command the README and the part pages show is one the command line takes, with the files it
names; the concrete ones that no other test runs run here at the smallest budget. The README's fine-tune
command once failed on the shipped student: this keeps the pages and the code from drifting apart."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from agent.cli import build_parser

from policies.config import PROJECT_ROOT
from sim.robots import diffbot

PARTS = ("sim", "policies", "opd", "replay", "graph", "deployment", "benchmarks", "reality_gap", "cluster")
PAGES = ["README.md", *(f"docs/{p}.md" for p in PARTS)]
# A placeholder stands for a value of the user's; the parser sees a sample of its type.
PLACEHOLDERS = {"N": "1", "S": "2", "K": "0", "B": "1", "ARTIFACT": diffbot.STUDENT, "PT": diffbot.TEACHER}
INPUTS = ("--config", "--artifact", "--init-from", "--checkpoint", "--teacher", "--proxy-config",
          "--sim-config")  # fmt: skip
# Concrete commands run here, each with what makes it small; the others are run by the tests named, or
# are benchmarks of record (hours).
SMALL = {
    "agent train student --config opd/configs/student_view_memory_obstacles_wide.yaml --init-from "
    "sim/robots/diffbot/student --out DIR": ["--steps", "16", "--envs", "2", "--no-export"],
    "agent train student --quick --out runs/try opd.gate.budget=0.05 log_every=64": ["--steps", "32"],
    "agent train teacher --steps 64 demos.episodes=4 eval_episodes=4": ["--envs", "4"],
    "agent eval teacher --checkpoint sim/robots/diffbot/teacher/teacher.pt --episodes 200":
        ["--episodes", "1", "--envs", "1"],
}  # fmt: skip


def documented() -> list[tuple[str, str, bool]]:
    """(page, command, whole): lines of code blocks are whole commands; inline `agent ...` mentions in prose
    may name only a subcommand and some of its options."""
    found = []
    for page in PAGES:
        path = PROJECT_ROOT / page
        if not path.is_file():
            continue
        block = False
        for line in path.read_text().replace("\\\n", " ").splitlines():  # a shell line continued
            if line.startswith("```"):
                block = not block
            elif block and line.lstrip().startswith("agent "):
                found.append((page, line.strip().split("  #")[0].strip(), True))
            elif not block:
                found += [(page, m.group(1), False) for m in re.finditer(r"`(agent [a-z][^`]*)`", line)]
    return found


def tokens(command: str) -> list[str]:
    """A synopsis as arguments: `[--opt X]` opened (the first of `A | B`), `a|b` its first choice, `...`
    dropped, placeholders a sample value."""
    text = command.replace("\\|", "|")
    text = re.sub(r"\[([^\[\]]*)\]", lambda m: m.group(1).split(" | ")[0], text)
    out = []
    for word in shlex.split(text)[1:]:  # past "agent"
        word = word.removesuffix("...")
        if not word:
            continue
        word = word.split("|")[0] if "|" in word and "=" not in word else word
        out.append(PLACEHOLDERS.get(word, word))
    return out


def subcommand(parser: argparse.ArgumentParser, args: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The deepest subcommand parser `args` name, and what follows its name."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not args or args[0] not in subs[0].choices:
            return parser, args
        parser, args = subs[0].choices[args[0]], args[1:]


COMMANDS = documented()


def test_the_pages_show_commands() -> None:
    whole = [c for _, c, w in COMMANDS if w]
    assert len(COMMANDS) > 60 and len(whole) > 20
    assert set(SMALL) <= {c for _, c, _ in COMMANDS}, "a command run here is no longer on its page"


@pytest.mark.parametrize("page, command, whole", COMMANDS, ids=[f"{p}: {c[:60]}" for p, c, _ in COMMANDS])
def test_a_documented_command_is_one_the_command_line_takes(page: str, command: str, whole: bool) -> None:
    parser = build_parser()
    args = tokens(command)
    sub, rest = subcommand(parser, args)
    assert sub is not parser, f"{page}: {command!r} names no agent subcommand"
    known = {s for a in sub._actions for s in a.option_strings}
    unknown = [w for w in rest if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, f"{page}: {command!r}: {sub.prog} has no option {unknown}"
    if not whole:
        return
    try:
        parser.parse_args(args)
    except SystemExit:
        pytest.fail(f"{page}: {command!r} is refused by the command line (see the usage above)")
    for option, value in zip(args, args[1:], strict=False):
        if option in INPUTS and not value.split(".")[0].isupper():  # a project path, not DIR or C.yaml
            assert (PROJECT_ROOT / value).exists(), f"{page}: {command!r} names {value}, which is not there"


@pytest.mark.slow
@pytest.mark.parametrize("command", list(SMALL))
def test_a_concrete_documented_command_runs_at_the_smallest_budget(command: str, tmp_path: Path) -> None:
    args = [tmp_path / "out" if a in ("DIR", "runs/try") else a for a in tokens(command)]
    if "--out" not in args and args[:2] == ["train", "teacher"]:
        args += ["--out", tmp_path / "out"]
    done = subprocess.run([sys.executable, "-m", "agent.cli", *map(str, args), *SMALL[command]],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
