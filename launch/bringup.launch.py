"""Bring up the agent graph on a robot or against a simulator.

    ros2 launch agent bringup.launch.py artifact_dir:=/path/to/artifact [backend:=tensorrt] [sim:=mujoco]
        [drive:=opd|student|teacher]

Nodes, parameters and launch arguments come from `agent.graph`, the same definition the in-process
bringup (`agent.bringup`, used by `agent run`) reads, so the two cannot drift apart. A parameter bound to a
launch argument (`Param.launch_arg`) is set from it in every node that declares it: `drive`, for one, in
the opd node and the sim bridge. Only the standard launch / launch_ros API is used: this file runs against
a stock ROS 2 install.
"""

from agent import graph
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, NotEqualsSubstitution, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


def generate_launch_description() -> LaunchDescription:
    """Launch arguments, then one Node action per node of the graph."""
    default_params = PathJoinSubstitution([FindPackageShare(graph.PACKAGE), "config", graph.PARAMS_FILE])
    args = [
        DeclareLaunchArgument(
            a.name,
            default_value=default_params if a.name == "params_file" else a.default,
            description=a.description,
            choices=list(a.choices) or None,
        )
        for a in graph.LAUNCH_ARGS
    ]
    return LaunchDescription(args + [_node(spec) for spec in graph.NODES])


def _node(spec: graph.NodeSpec) -> Node:
    # Later entries win: launch-argument values override the parameter file.
    overrides = {"use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)}
    for p in spec.params:
        if p.launch_arg:
            overrides[p.name] = ParameterValue(LaunchConfiguration(p.launch_arg), value_type=p.type)
    with_sim = IfCondition(NotEqualsSubstitution(LaunchConfiguration("sim"), "none"))
    return Node(
        package=graph.PACKAGE,
        executable=spec.executable,
        name=spec.name,
        output="screen",
        parameters=[LaunchConfiguration("params_file"), overrides],
        condition=with_sim if spec.sim_only else None,
    )
