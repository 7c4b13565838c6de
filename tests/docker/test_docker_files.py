"""docker/: the images and the compose file, checked without Docker (not available on these machines).

Every Dockerfile passes hadolint (its ignored rules and their reasons: docker/.hadolint.yaml), the compose
file validates against the compose-spec schema, every file the images copy or run exists, and what the
entrypoints run (package, executables, launch arguments, parameters, training commands) matches the graph
and the CLI.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from agent import graph
from agent.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (the dev extra: pip install -e '.[dev]')")
    return str(path)


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_images_are_the_ones_the_readme_names() -> None:
    assert [p.name for p in DOCKERFILES] == ["robot.Dockerfile", "train-cpu.Dockerfile", "train.Dockerfile"]
    bases = {p.name: " ".join(a for w, a in instructions(p) if w in ("ARG", "FROM")) for p in DOCKERFILES}
    assert "ros:kilted-ros-base" in bases["robot.Dockerfile"]
    assert "nvcr.io/nvidia/isaac-sim:5" in bases["train.Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    result = subprocess.run([tool("hadolint"), "--config", str(DOCKER / ".hadolint.yaml"), str(dockerfile)],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_ignored_hadolint_rule_has_its_reason() -> None:
    text = (DOCKER / ".hadolint.yaml").read_text()
    ignored = yaml.safe_load(text)["ignored"]
    for rule in ignored:
        assert re.search(rf"#.*{rule}.*\S", text), f"{rule} is ignored without a reason"


def test_the_compose_file_validates_against_the_compose_spec() -> None:
    result = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                             str(DOCKER / "compose.yaml")], capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_sim_renders_the_mounted_students_input_size() -> None:
    """The robot service's artifact resizes whatever the sim sends; a frame of another aspect would reach
    the student squashed, so the sim bridge renders the artifact's own height and width."""
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    command = " ".join(services["sim"]["command"])
    size = {k: int(v) for k, v in re.findall(r"camera_(width|height):=(\d+)", command)}
    mount = next(v.split(":")[0] for v in services["robot"]["volumes"] if v.endswith(":/artifact:ro"))
    manifest = json.loads((DOCKER / mount / "manifest.json").read_text())
    image = manifest["preprocessing"]["image"]
    assert size == {"width": image["width"], "height": image["height"]}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_file_an_image_copies_exists(dockerfile: Path) -> None:
    copies = [args for word, args in instructions(dockerfile) if word == "COPY"]
    assert copies
    for args in copies:
        *sources, _ = [a for a in shlex.split(args) if not a.startswith("--")]
        for source in sources:
            assert (REPO / source).exists(), (
                f"{dockerfile.name}: COPY {source}: no such file in the repository"
            )


def test_the_robot_entrypoint_launches_the_graph_with_its_arguments() -> None:
    script = DOCKER / "robot-entrypoint.sh"
    assert script.stat().st_mode & 0o111, "the entrypoint must be executable"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = "\n".join(line for line in script.read_text().splitlines() if not line.lstrip().startswith("#"))
    launch = re.search(r"ros2 launch (\S+) (\S+)", text)
    assert launch and launch.group(1) == graph.PACKAGE
    assert (REPO / "ros2_ws" / "src" / graph.PACKAGE / "launch" / launch.group(2)).is_file()
    args = {a.name for a in graph.LAUNCH_ARGS}
    assert set(re.findall(r"(\w+):=", text)) <= args
    robot = dict(instructions(DOCKER / "robot.Dockerfile"))
    assert robot["ENTRYPOINT"] == '["/opt/agent/entrypoint.sh"]'
    ET.parse(DOCKER / "fastdds.xml")  # the DDS profile the image points Fast DDS at is well-formed
    assert "FASTDDS_DEFAULT_PROFILES_FILE=/opt/agent/fastdds.xml" in robot["ENV"]


def test_the_compose_services_run_graph_executables_with_graph_parameters_and_arguments() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    args = {a.name: a for a in graph.LAUNCH_ARGS}
    executables = {n.executable: n for n in graph.NODES}
    for name, service in compose["services"].items():
        command = service["command"]
        if command[:2] == ["ros2", "run"]:  # a single node: its executable and parameters are the graph's
            assert command[2] == graph.PACKAGE and command[3] in executables, name
            spec = executables[command[3]]
            params = [command[i + 1] for i, c in enumerate(command) if c == "-p"]
            for p in params:
                key, value = p.split(":=")
                spec.param(key).check(yaml.safe_load(value))  # raises for an unknown or bad value
        else:  # launch arguments for the entrypoint's ros2 launch
            for a in command:
                key, value = a.split(":=")
                assert key in args, f"{name}: unknown launch argument {key}"
                assert not args[key].choices or value in args[key].choices


@pytest.mark.parametrize("dockerfile", ["train.Dockerfile", "train-cpu.Dockerfile"])
def test_the_training_images_run_agent_train_commands_the_cli_accepts(dockerfile: str) -> None:
    steps = dict(instructions(DOCKER / dockerfile))
    entry, cmd = json.loads(steps["ENTRYPOINT"]), json.loads(steps["CMD"])
    assert entry[-1] == "train"
    parsed = build_parser().parse_args(["train", *cmd])  # exits (fails the test) on an unknown option
    assert parsed.command == "train"
    header = (DOCKER / dockerfile).read_text()
    for example in re.findall(r"agent-train(?:-cpu)? (teacher|student)([^\n\\]*)", header):
        build_parser().parse_args(["train", example[0], *shlex.split(example[1])])
