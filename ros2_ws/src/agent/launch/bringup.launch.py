"""Bring up the agent graph on a robot or against a simulator.

    ros2 launch agent bringup.launch.py artifact_dir:=/path/to/artifact [sim:=mujoco] [autostart:=true]
        [drive:=opd|student|teacher] [backend:=tensorrt] [precision:=fp16] [namespace:=robot1] [respawn:=true]

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

With `respawn:=true` launch restarts a node whose process exits (`respawn`, after `RESPAWN_DELAY_S`). Its
handlers fire for every process of a node: `OnProcessStart` on each start, `OnStateTransition` on each
transition event of the node's name. So the handlers here count the starts of each node. The first process
is configured at once; a respawned one `RESPAWN_CONFIGURE_S` after it started, when the killed process's
lifecycle services have left DDS discovery (a request sent while they are the only ones discovered goes to
the dead process alone and is never answered). Every node is activated once configured, except the arm
switch: only its first process follows `autostart`, and a respawned one stays configured and disarmed
until a person arms it.
"""

from agent import graph
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler, TimerAction
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessStart
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

# With respawn:=true, a node's process is started again this long after it exited, in seconds.
RESPAWN_DELAY_S = 1.0
# ... and configured this long after that start, in seconds: Fast DDS (the default middleware) drops a
# participant that stopped announcing itself after its lease, 20 s (a SIGKILLed node's service was listed
# for 19.98 s here), and until then launch_ros's change_state client may send the configure to the dead
# process alone: never answered, it holds one of launch's threads until shutdown. 1 s + 21 s outlasts it.
RESPAWN_CONFIGURE_S = 21.0


def generate_launch_description() -> LaunchDescription:
    """Launch arguments, then per node of the graph: its lifecycle handlers and the node."""
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
    """The node, then its handlers: configure on each process start, activate once configured."""
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
        respawn=LaunchConfiguration("respawn"),
        respawn_delay=RESPAWN_DELAY_S,
        condition=condition,
    )
    starts = [0]  # processes of this node started so far: the first, then each respawn

    def change(transition: int) -> EmitEvent:
        return EmitEvent(
            event=ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition)
        )

    def configure_if_current(start: int) -> OpaqueFunction:
        """The configure, unless another process started since `start` (whose own timer configures it)."""
        return OpaqueFunction(
            function=lambda _: [change(Transition.TRANSITION_CONFIGURE)] if starts[0] == start else []
        )

    def on_start(_event: object, _context: LaunchContext) -> list:
        starts[0] += 1
        if starts[0] == 1:
            return [change(Transition.TRANSITION_CONFIGURE)]
        return [TimerAction(period=RESPAWN_CONFIGURE_S, actions=[configure_if_current(starts[0])])]

    # The arm switch's first process follows `autostart` (`_armed`); a respawned one is never armed here.
    activate = (
        OpaqueFunction(function=lambda _: [change(Transition.TRANSITION_ACTIVATE)] if starts[0] == 1 else [])
        if spec.arms
        else change(Transition.TRANSITION_ACTIVATE)
    )
    activation = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state="configuring",  # not a deactivation, which also ends in inactive
            goal_state="inactive",
            entities=[activate],
        ),
        condition=_armed() if spec.arms else condition,
    )
    configuration = RegisterEventHandler(
        OnProcessStart(target_action=node, on_start=on_start), condition=condition
    )
    return [activation, configuration, node]
