"""Bring up the agent graph on a robot or against a simulator.

    ros2 launch agent bringup.launch.py artifact_dir:=/path/to/artifact [sim:=mujoco] [autostart:=true]
        [drive:=opd|student|teacher] [backend:=tensorrt] [precision:=fp16] [namespace:=robot1]

Nodes, parameters and launch arguments come from `agent.graph`, the same definition the in-process
bringup (`agent.bringup`, used by `agent run`) reads, so the two cannot drift apart. A parameter bound to a
launch argument (`Param.launch_arg`) is set from it in every node that declares it: `drive`, for one, in
the opd node and the sim bridge. Only the standard launch / launch_ros API is used: this file runs against
a stock ROS 2 install.

Every node is a lifecycle node. The standard event handlers bring them up: each is configured as soon as it
starts, and activated once configured, except the arm switch (the opd node, the one that commands the base),
which is activated only when `autostart` arms the robot: `auto` (default) arms in simulation and leaves a
real robot (sim:=none) disarmed, configured and publishing no motion, until an operator runs
`ros2 lifecycle set <ns>/opd activate` (or `agent arm`).
"""

from agent import graph
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import (
    LaunchConfiguration,
    PathJoinSubstitution,
    PythonExpression,
)
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare
from lifecycle_msgs.msg import Transition


def generate_launch_description() -> LaunchDescription:
    """Launch arguments, then per node of the graph: the node, its configure, its activation."""
    args = [
        DeclareLaunchArgument(
            a.name, default_value=a.default, description=a.description, choices=list(a.choices) or None
        )  # fmt: skip
        for a in graph.LAUNCH_ARGS
    ]
    entities = []
    for spec in graph.NODES:
        entities += _node_and_transitions(spec)
    return LaunchDescription(args + entities)


def _params_file() -> PythonExpression:
    """The `params_file` launch argument, or the package's own parameter file when it is empty."""
    default = PathJoinSubstitution([FindPackageShare(graph.PACKAGE), "config", graph.PARAMS_FILE])
    return PythonExpression(["'", LaunchConfiguration("params_file"), "' or '", default, "'"])


def _armed() -> IfCondition:
    """graph.armed, as a launch condition."""
    autostart, sim = LaunchConfiguration("autostart"), LaunchConfiguration("sim")
    return IfCondition(PythonExpression(
        ["'", autostart, "' == 'true' or ('", autostart, "' == 'auto' and '", sim, "' != 'none')"]
    ))  # fmt: skip


def _started(spec: graph.NodeSpec) -> IfCondition | None:
    """graph.nodes_for, as a launch condition: a simulator for a sim-only node, a drive it is not off with."""
    terms: list = []
    if spec.sim_only:
        terms += ["'", LaunchConfiguration("sim"), "' != 'none'"]
    if spec.off_with:
        terms += [" and " if terms else "", "'", LaunchConfiguration("drive"), f"' not in {spec.off_with!r}"]
    return IfCondition(PythonExpression(terms)) if terms else None


def _node_and_transitions(spec: graph.NodeSpec) -> list:
    # Later entries win: launch-argument values override the parameter file.
    overrides = {"use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)}
    for p in spec.params:
        if p.launch_arg:
            overrides[p.name] = ParameterValue(LaunchConfiguration(p.launch_arg), value_type=p.type)
    condition = _started(spec)
    node = LifecycleNode(
        package=graph.PACKAGE,
        executable=spec.executable,
        name=spec.name,
        namespace=LaunchConfiguration("namespace"),
        output="screen",
        parameters=[_params_file(), overrides],
        condition=condition,
    )
    configure = EmitEvent(
        event=ChangeState(
            lifecycle_node_matcher=matches_action(node), transition_id=Transition.TRANSITION_CONFIGURE
        ),
        condition=condition,
    )
    activate = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state="configuring",  # not a deactivation, which also ends in inactive
            goal_state="inactive",
            entities=[
                EmitEvent(
                    event=ChangeState(
                        lifecycle_node_matcher=matches_action(node),
                        transition_id=Transition.TRANSITION_ACTIVATE,
                    )
                )
            ],
        ),
        condition=_armed() if spec.arms else condition,
    )
    return [node, activate, configure]
