"""ament_python build of the `agent` ROS 2 package: nodes, launch file, parameter files.

Console scripts come from `agent/graph/__init__.py`, the one definition of the node graph. It imports only the
standard library, so it is loaded here by path, without installing anything first.
"""

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "agent"
HERE = Path(__file__).resolve().parent
# The package is self-contained: a copy of ros2_ws/src/agent builds with its launch file. The repository's
# top-level launch/ links to it.
LAUNCH_DIR = HERE / "launch"


def _graph():
    spec = importlib.util.spec_from_file_location("agent_graph", HERE / PACKAGE / "graph" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is created
    spec.loader.exec_module(module)
    return module


def _files(folder: Path, pattern: str) -> list[str]:
    """Data files relative to this directory, as setuptools wants them."""
    return sorted(os.path.relpath(p, HERE) for p in folder.glob(pattern))


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", _files(LAUNCH_DIR, "*.launch.py")),
        (f"share/{PACKAGE}/config", _files(HERE / "config", "*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="agent-stack maintainers",
    maintainer_email="maintainers@agent-stack.invalid",
    description="Thin ROS 2 nodes over the ROS-free agent stack, and their bringup.",
    license="Apache-2.0",
    entry_points={"console_scripts": _graph().console_scripts()},
)
