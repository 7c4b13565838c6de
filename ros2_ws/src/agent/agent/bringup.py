"""In-process bringup: the launch file's node set in one process, each node on an executor of its own.

This is composition with isolated executors (what rclcpp's component_container_isolated does): every node gets
its own executor, spun by a thread of its own, so nodes run beside each other. The executor is a
SingleThreadedExecutor by default (`executor="single"`); `"multi"` gives each node a MultiThreadedExecutor
(`agent.executors`': rclpy's, without its busy loop while a handler waits for the pool) that also runs its
callback groups (intake vs inference) in parallel. Measured on the 2-core machine (`agent bench graph
--executor single|multi`, default int8 student, back-to-back 45 s runs): single-threaded executors held image
-> command p99 at 12.6-13.8 ms, multi-threaded ones 18.0-18.3 ms, no missed cycle either way (before that fix,
in an earlier setup, 60 s runs: 32-34 ms with 0-2 missed against 37-60 ms with 1-79). The multi-threaded
executor can run a node's intake callbacks (a watchdog, the skill topic) while its inference holds no GIL, but
it hands every callback from its wait thread to a pool thread: two thread switches and GIL hand-offs per
message, which cost more here than that overlap gains. The nodes keep their callback groups, so they are
correct under either executor (their tests spin them multi-threaded). One executor for all nodes cannot carry
the graph: it rebuilds its wait set over every entity of every node (about 30 per lifecycle node: services,
timers, subscriptions) on each wake-up and takes one message per wake-up. Each executor `spin`s (a
spin_once(timeout) loop would create a timeout timer per message). `fused=True` (drive opd, single-threaded
executors; what `agent run` and `agent bench graph` use) puts the encoder and the opd node on one executor,
the encoder's callback handing each embedding straight to the OPD decision (`EncoderNode.hand_over`,
`OpdNode.take_state`): no /agent/state hop and one thread fewer on the frame's path; measured p50 -6% and p99
29-31 ms against 31-42 outside host steal (docs/graph.md, Latency). The bringup reads the same definition as
launch/bringup.launch.py (`agent.graph`), takes the same launch arguments with the same meaning, and brings
the nodes up as the launch file's event handlers do: each configures on its executor's thread, then activates,
except the arm switch (the opd node, which commands the base), which activates only when `autostart` arms the
robot (`graph.armed`: by default in simulation, not with sim:=none). A disarmed stack is armed over the
lifecycle service, as an operator would (`agent arm`, `ros2 lifecycle set <ns>/opd activate`):

    with Bringup(artifact_dir="artifacts/student", sim="none") as stack:
        stack.spin(duration_s=10.0)

Launch-argument values are strings, as on the `ros2 launch` command line ("true", "onnxruntime").
`respawn` is accepted and has no effect here: the nodes share this process, so there is no node process for
launch to restart.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from agent import graph
from agent.executors import MultiThreadedExecutor, stop_executor

# `fused`: the encoder's executor also spins the opd node; the encoder hands each embedding to its decision
FUSED = ("encoder", "opd")


def launch_arguments(**values: str) -> dict[str, str]:
    """Launch arguments with defaults filled in; unknown names or values outside `choices` are errors."""
    known = {a.name: a for a in graph.LAUNCH_ARGS}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown launch arguments {unknown}; the graph has {sorted(known)}")
    args = {name: str(values.get(name, a.default)) for name, a in known.items()}
    for name, value in args.items():
        if known[name].choices and value not in known[name].choices:
            raise ValueError(f"launch argument {name} = {value!r}: choose one of {known[name].choices}")
    return args


def bring_up(n: Node, spec: graph.NodeSpec, armed: bool) -> None:
    """Configure, then activate unless `n` is the arm switch and the robot starts disarmed.

    A failed configure leaves the node unconfigured with the reason on /diagnostics (AgentNode).
    """
    if n.trigger_configure() == TransitionCallbackReturn.SUCCESS and (armed or not spec.arms):
        n.trigger_activate()


def node_overrides(spec: graph.NodeSpec, args: dict[str, str]) -> list[Parameter]:
    """Parameters a node gets from launch arguments, typed as the launch file's ParameterValue does."""
    params = [Parameter("use_sim_time", value=_typed(args["use_sim_time"], bool))]
    params += [
        Parameter(p.name, value=_typed(args[p.launch_arg], p.type)) for p in spec.params if p.launch_arg
    ]
    return params


def create_nodes(
    args: dict[str, str],
    context: Context | None = None,
    node_kwargs: dict[str, dict[str, Any]] | None = None,
) -> list[Node]:
    """One node per graph node started for `args["sim"]` and `args["drive"]`, with the parameter file and
    launch overrides.

    `node_kwargs` adds constructor arguments per node name (tests pass model doubles this way).
    """
    ros_args = ["--ros-args", "--params-file", args["params_file"]] if args["params_file"] else None
    nodes: list[Node] = []
    try:
        for spec in graph.nodes_for(args["sim"], args["drive"]):
            cls = _node_class(spec)
            extra = (node_kwargs or {}).get(spec.name, {})
            nodes.append(
                cls(
                    namespace=args["namespace"],
                    context=context,
                    cli_args=ros_args,
                    parameter_overrides=node_overrides(spec, args),
                    **extra,
                )
            )
    except BaseException:
        for n in nodes:
            n.destroy_node()
        raise
    return nodes


class Bringup:
    """The graph's nodes, each on its own executor and thread; finalized on exit.

    Executors spin from the first `spin` call until `close`; `spin` itself only waits.
    """

    def __init__(
        self,
        context: Context | None = None,
        executor: str = "single",
        num_threads: int | None = None,
        node_kwargs: dict[str, dict[str, Any]] | None = None,
        fused: bool = False,
        **launch_args: str,
    ) -> None:
        if executor not in graph.EXECUTORS:
            raise ValueError(f"executor {executor!r}: choose one of {graph.EXECUTORS}")
        self.args = launch_arguments(**launch_args)
        if fused and (executor != "single" or self.args["drive"] != "opd"):
            raise ValueError("fused (the encoder handing its embeddings to the opd node's decision) needs "
                             f"drive opd and single-threaded executors, not drive {self.args['drive']} "
                             f"with {executor}")  # fmt: skip
        self.context = context
        self.executor_kind = executor
        self.num_threads = num_threads  # per multi-threaded executor; None = one per CPU
        self.nodes = create_nodes(self.args, context, node_kwargs)
        self.armed = graph.armed(self.args)
        self.executors: list[Executor] = []
        self._members: list[list[int]] = []  # per executor: the indices of the graph nodes it brings up
        self._threads: list[threading.Thread] = []
        # of self.nodes, in order; none for extras
        self._specs = list(graph.nodes_for(self.args["sim"], self.args["drive"]))
        names = [n.get_name() for n in self.nodes]
        for i, n in enumerate(self.nodes):
            if fused and names[i] == FUSED[1]:
                self._fuse(names.index(FUSED[0]), i)
            else:
                self._add_executor(n)
                self._members[-1].append(i)

    def __enter__(self) -> Bringup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.get_name() == name:
                return n
        raise KeyError(f"no running node {name!r}; running: {[n.get_name() for n in self.nodes]}")

    def add_node(self, extra: Node) -> None:
        """Spin another node (a tool or a test probe) beside the graph, on an executor of its own."""
        self._add_executor(extra)
        if self._threads:
            self._start(len(self.executors) - 1)

    def spin(self, duration_s: float | None = None, until: Callable[[], bool] | None = None) -> bool:
        """Spin until `duration_s` passed, `until()` holds or the context shuts down; True if `until` held."""
        if not self._threads:
            for i in range(len(self.executors)):
                self._start(i)
        deadline = None if duration_s is None else time.monotonic() + duration_s
        while rclpy.ok(context=self.context) and (deadline is None or time.monotonic() < deadline):
            if until is not None and until():
                return True
            time.sleep(0.01)
        return until is not None and until()

    def close(self) -> None:
        """Stop the executors, finalize every node (the policy sends its safe action), destroy them."""
        for executor in self.executors:
            stop_executor(executor)  # first: no callback may run on an entity that finalize destroys
        for thread in self._threads:
            thread.join()
        for n in self.nodes:
            finalize = getattr(n, "finalize", None)
            if finalize is not None:
                finalize()
        for n in self.nodes:
            n.destroy_node()
        self.nodes, self.executors, self._members, self._threads = [], [], [], []

    def _fuse(self, encoder: int, opd: int) -> None:
        """The opd node on the encoder's executor (it was added first: graph order), and each embedding
        handed to it in the encoder's callback: one thread, no /agent/state hop (still published)."""
        host = next(k for k, members in enumerate(self._members) if encoder in members)
        self.executors[host].add_node(self.nodes[opd])
        self._members[host].append(opd)
        self.nodes[opd].states_in_process = True
        self.nodes[encoder].hand_over = self.nodes[opd].take_state

    def _add_executor(self, n: Node) -> None:
        if self.executor_kind == "multi":
            executor: Executor = MultiThreadedExecutor(num_threads=self.num_threads, context=self.context)
        else:
            executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(n)
        self.executors.append(executor)
        self._members.append([])

    def _start(self, i: int) -> None:
        executor = self.executors[i]

        def run() -> None:
            # graph nodes, each executor's on its own thread: models load in parallel
            for k in self._members[i]:
                bring_up(self.nodes[k], self._specs[k], self.armed)
            executor.spin()

        # named after its nodes: its CPU time is theirs (`agent.thread_cpu`)
        name = f"executor-{executor_name(executor)}"
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)


def executor_name(executor: Executor) -> str:
    """The names of the nodes `executor` spins, in graph order, joined by "+" ("encoder+opd" where fused)."""
    order = {spec.name: i for i, spec in enumerate(graph.NODES)}
    names = sorted(n.get_name() for n in executor.get_nodes())  # a set: sorted for a stable name
    return "+".join(sorted(names, key=lambda name: order.get(name, len(order))))


def _node_class(spec: graph.NodeSpec) -> type[Node]:
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as err:
        raise RuntimeError(f"node {spec.name}: its module {spec.module} is not available ({err})") from err
    return getattr(module, spec.class_name)


def _typed(value: str, kind: type) -> bool | int | float | str:
    """A launch-argument string as the parameter's type (bool accepts true/false in any case)."""
    if kind is bool:
        if value.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {value!r}")
        return value.lower() == "true"
    return kind(value)
