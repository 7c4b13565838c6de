"""The single graph definition: consistent, ROS-free, and the parameter file rendered from it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from agent import graph
from agent.graph import render

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "ros2_ws" / "src" / "agent" / "config" / graph.PARAMS_FILE
README = REPO / "README.md"


def test_parameter_file_is_rendered_from_the_graph() -> None:
    assert CONFIG.read_text() == render.params_yaml(), (
        "config/agent.yaml is out of date: python -m agent.graph > ros2_ws/src/agent/config/agent.yaml"
    )


def test_python_m_agent_graph_prints_the_parameter_file() -> None:
    out = subprocess.run([sys.executable, "-m", "agent.graph"], check=True, capture_output=True, text=True)
    assert out.stdout == CONFIG.read_text()


def test_readme_graph_section_is_generated_from_the_graph() -> None:
    text = README.read_text()
    assert text == render.with_graph_section(text), (
        "README.md's graph section is out of date: python -m agent.graph --readme README.md"
    )
    section = text.split(render.README_BEGIN)[1].split(render.README_END)[0]
    assert all(f"`{t}`" in section for t in graph.TOPICS) and all(
        f"`{n.name}`" in section for n in graph.NODES
    )


def test_graph_is_consistent() -> None:
    names = [n.name for n in graph.NODES]
    assert names == ["encoder", "policy", "opd", "sim_bridge", "teacher"]
    assert len({n.executable for n in graph.NODES}) == len(graph.NODES)
    launch_args = {a.name: a for a in graph.LAUNCH_ARGS}
    assert set(launch_args) == {"use_sim_time", "params_file", "namespace", "autostart", "artifact_dir",
                                "backend", "precision", "sim", "drive", "respawn"}  # fmt: skip
    # One arm switch, and it is the node that commands the base.
    assert [n.name for n in graph.NODES if n.arms] == ["opd"]
    for spec in graph.NODES:
        for p in spec.params:
            p.check(p.default)
            if p.launch_arg:
                arg = launch_args[p.launch_arg]
                assert set(p.choices) <= set(arg.choices) or not p.choices, (spec.name, p.name)
    published = {t for n in graph.NODES for t in n.publishes}
    subscribed = {t for n in graph.NODES for t in n.subscribes}
    # Every topic has a publisher in the graph; all but the outputs for the robot and for tools are read.
    assert published == set(graph.TOPICS)
    assert set(graph.TOPICS) - subscribed == {"/cmd_vel", "/odom", "/clock", "/diagnostics", "/opd/gate"}
    # One robot command: the opd node's executed action and its Twist, whatever `drive` picks; the robot
    # (sim bridge) follows it, and `drive` is one launch argument for both nodes.
    assert [n.name for n in graph.NODES if {"/opd/action", "/cmd_vel"} & set(n.publishes)] == ["opd"]
    assert graph.node("opd").publishes[:2] == ("/opd/action", "/cmd_vel")
    assert graph.node("sim_bridge").subscribes == ("/opd/action",)
    assert set(graph.DRIVE_SOURCES.values()) <= set(graph.node("opd").subscribes)
    for name in ("opd", "sim_bridge"):
        drive = graph.node(name).param("drive")
        assert drive.launch_arg == "drive" and drive.choices == graph.DRIVES == launch_args["drive"].choices
    assert [n.name for n in graph.nodes_for("none", "student")] == ["encoder", "policy", "opd"]
    assert [n.name for n in graph.nodes_for("mujoco", "teacher")] == names
    # drive opd: the OPD core computes the head and the teacher's action; no second copy runs beside it
    assert [n.name for n in graph.nodes_for("mujoco", "opd")] == ["encoder", "opd", "sim_bridge"]
    assert graph.nodes_for("none") == graph.nodes_for("none", "opd")
    with pytest.raises(ValueError, match="choose one of"):
        graph.nodes_for("mujoco", "nobody")
    with pytest.raises(ValueError, match="choose one of"):
        graph.nodes_for("gazebo")


def test_param_check_names_the_parameter() -> None:
    timeout = graph.node("policy").param("input_timeout_s")
    with pytest.raises(ValueError, match="input_timeout_s = 99.0 outside"):
        timeout.check(99.0)
    with pytest.raises(ValueError, match="choose one of"):
        graph.node("encoder").param("backend").check("tflite")


@pytest.mark.parametrize("spec", graph.NODES, ids=[s.name for s in graph.NODES])
def test_every_node_has_its_class_and_main(spec: graph.NodeSpec) -> None:
    module = importlib.import_module(spec.module)
    assert callable(module.main) and isinstance(getattr(module, spec.class_name), type)


def test_graph_imports_no_ros() -> None:
    """setup.py and the launch file load it without rclpy or the models."""
    code = "import sys, agent.graph; bad = {'rclpy', 'numpy', 'torch'} & set(sys.modules); assert not bad"
    subprocess.run([sys.executable, "-c", code], check=True)
