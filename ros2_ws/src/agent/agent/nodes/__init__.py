"""The agent's ROS 2 nodes: one module per node, each with its class and `main(args=None)`."""

from collections.abc import Callable

from policies.runtime import StudentRuntime

# How a node opens its model: `load_student(artifact_dir, backend=..., threads=...)` or a test double.
RuntimeLoader = Callable[..., StudentRuntime]
