"""`colcon build` of ros2_ws (colcon from PyPI) into a temporary tree, and the install tree it leaves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from agent import graph
from agent.graph.render import params_yaml

REPO = Path(__file__).resolve().parents[2]
PACKAGE_XML = REPO / "ros2_ws" / "src" / "agent" / "package.xml"
COLCON = Path(sys.executable).with_name("colcon")
MESSAGES = ("StateEmbedding", "HybridAction", "GateState")  # agent_interfaces


def test_package_xml_is_format_3_with_its_dependencies() -> None:
    root = ET.parse(PACKAGE_XML).getroot()
    assert root.get("format") == "3" and root.findtext("name") == "agent"
    exec_deps = {e.text for e in root.iter("exec_depend")}
    messages = {"sensor_msgs", "std_msgs", "geometry_msgs", "diagnostic_msgs", "nav_msgs", "rosgraph_msgs"}
    assert {
        "rclpy",
        "agent_interfaces",
        "launch",
        "launch_ros",
        "lifecycle_msgs",
        "python3-numpy",
        "python3-yaml",
    } | messages <= exec_deps
    assert "message_filters" not in exec_deps  # never imported
    assert {"ament_copyright", "ament_flake8", "ament_pep257"} <= {e.text for e in root.iter("test_depend")}
    assert root.find("export/build_type").text == "ament_python"


@pytest.mark.skipif(not COLCON.exists(), reason="colcon is not installed in this environment (the dev extra)")
def test_colcon_build_installs_nodes_launch_config_and_ament_index(tmp_path: Path) -> None:
    """From a copy of the two packages, as another workspace would hold them: each is self-contained, and
    the messages build with the ROS wheels' ament_cmake and rosidl generators."""
    source = tmp_path / "src" / "agent"
    for pkg in ("agent", "agent_interfaces"):
        shutil.copytree(REPO / "ros2_ws" / "src" / pkg, tmp_path / "src" / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    before = sorted(p.name for p in source.iterdir())
    cmd = [
        str(COLCON), "--log-base", str(tmp_path / "log"), "build",
        "--base-paths", str(tmp_path / "src"),
        "--build-base", str(tmp_path / "build"),
        "--install-base", str(tmp_path / "install"),
    ]  # fmt: skip
    env = {**os.environ, "AMENT_PREFIX_PATH": sys.prefix, "CMAKE_PREFIX_PATH": sys.prefix}
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    interfaces = tmp_path / "install" / "agent_interfaces"
    for msg in MESSAGES:
        assert (interfaces / "share" / "agent_interfaces" / "msg" / f"{msg}.msg").is_file()
    (generated,) = (interfaces / "lib").glob("python3*/site-packages/agent_interfaces/msg/__init__.py")
    assert all(f"import {msg}" in generated.read_text() for msg in MESSAGES)
    assert (interfaces / "lib" / "libagent_interfaces__rosidl_typesupport_fastrtps_c.so").is_file()
    prefix = tmp_path / "install" / "agent"
    share = prefix / "share" / "agent"
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / "agent").is_file()
    assert (share / "package.xml").is_file()
    launch_file = share / "launch" / "bringup.launch.py"
    assert (
        launch_file.read_text() == (REPO / "launch" / "bringup.launch.py").read_text()
    )  # the top-level link
    assert (share / "config" / graph.PARAMS_FILE).read_text() == params_yaml()
    for spec in graph.NODES:
        exe = prefix / "lib" / "agent" / spec.executable
        assert exe.is_file() and os.access(exe, os.X_OK), spec.executable
    (site,) = (prefix / "lib").glob("python3*/site-packages")
    assert (site / "agent" / "graph" / "__init__.py").is_file(), "the launch file imports agent.graph"
    (entry_points,) = site.glob("agent-*.egg-info/entry_points.txt")
    scripts = {line.replace(" ", "") for line in entry_points.read_text().splitlines()}
    assert {s.entry_point.replace(" ", "") for s in graph.NODES} <= scripts  # each runs its graph module
    # The source tree is left as it was (no egg-info, build or install folders next to setup.py).
    assert sorted(p.name for p in source.iterdir()) == before
    assert not any(p.name.endswith(".egg-info") for p in source.iterdir())
    shutil.rmtree(tmp_path / "build", ignore_errors=True)
