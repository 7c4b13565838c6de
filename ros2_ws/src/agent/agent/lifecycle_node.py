"""Base of the agent's nodes: parameters from the graph, a lifecycle template, diagnostics, bad-input counts.

Lifecycle (rclpy managed node), so a robot can start safely:
- configure: read parameters, load the model, create publishers (silent until activate);
- activate: create subscriptions and timers; deactivate: remove them (the policy and the opd node send
  their safe action first); cleanup: drop the model. A failed configure leaves the node unconfigured with
  the error on /diagnostics instead of killing the process, so a lifecycle manager can retry.
A node starts unconfigured, as lifecycle nodes do. The launch file's event handlers and the in-process
bringup drive the transitions (and keep the robot disarmed on start, see `agent.graph.armed`); the
`autostart` parameter lets a node started alone (`ros2 run agent policy --ros-args -p autostart:=true`)
configure and activate itself once it spins.

Parameters are declared from the graph with descriptors (description, unit, range, choices) and read at
configure; changing one while active is refused, because half the node would still use the old value.

Threads: `io_group` runs short callbacks (intake that inference does not wait for, diagnostics, watchdogs);
`work_group` runs inference and the intake that feeds it, so under a multi-threaded executor a slow model
never delays the rest. State shared by the two, and with threads outside the executor, is guarded by
`self.lock`. The agent's own executors are single-threaded (see `agent.bringup`); the groups keep the
nodes correct in a multi-threaded one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from threading import Lock
from typing import TYPE_CHECKING, Any

import rclpy
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
from rclpy.lifecycle import LifecycleNode, LifecyclePublisher, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.subscription import Subscription
from rclpy.timer import Timer

from agent.graph import TOPICS, NodeSpec, Topic
from agent.messages import MessageError
from agent.ros_io import diagnostic_array, diagnostic_status, msg_class, param_descriptor, qos_profile
from policies.stream_stats import Level, Status, StreamStats

if TYPE_CHECKING:
    from agent.stage_marks import StageMarks

WARN_PERIOD_S = 5.0  # one warning per (stream, reason) per this many seconds; counters keep the full count
# rclpy gives every publisher and subscription default event handlers (they log an incompatible QoS or
# type). Each is a waitable that the executor visits on every wake-up, i.e. on every message: with them
# a lifecycle node took ~40% more interpreter time per message. The graph's QoS is declared once and
# tested endpoint by endpoint (tests/ros2/test_bringup.py); a foreign tool that mismatches it still logs
# the incompatibility on its side.
NO_PUBLISHER_EVENTS = PublisherEventCallbacks(use_default_callbacks=False)
NO_SUBSCRIPTION_EVENTS = SubscriptionEventCallbacks(use_default_callbacks=False)


class PolledGroup(CallbackGroup):
    """A callback group no executor runs: rclpy's executors leave an entity whose group cannot execute out
    of their wait set, so a message on a subscription of this group wakes no thread. The node takes the
    messages itself, when the callback they feed runs (`agent.ros_io.drain`)."""

    def can_execute(self, entity: Any) -> bool:
        return False

    def beginning_execution(self, entity: Any) -> bool:
        return False

    def ending_execution(self, entity: Any) -> None:
        pass


def _taken_by_the_node(msg: Any) -> None:
    """The callback of a polled subscription, which no executor calls (rclpy requires one)."""


class AgentNode(LifecycleNode):
    """Lifecycle node whose topics and parameters come from its graph `NodeSpec`.

    Subclasses implement `configure` / `activate` / `deactivate` / `cleanup` (raise to fail a transition)
    and `health(now)`; they create entities with `publisher`, `subscribe` and `timer`.
    """

    def __init__(self, spec: NodeSpec, **kwargs: Any) -> None:
        super().__init__(spec.name, **kwargs)
        self.spec = spec
        self.lock = Lock()
        self.io_group: CallbackGroup = MutuallyExclusiveCallbackGroup()
        self.work_group: CallbackGroup = MutuallyExclusiveCallbackGroup()
        self.polled_group: CallbackGroup = PolledGroup()  # subscriptions the node takes from (`poll`)
        self.lifecycle_state = "unconfigured"  # lifecycle state label, kept here for diagnostics
        self.fault = ""  # why the last transition failed
        # Called with each lifecycle state entered, from the thread that drove the transition (an in-process
        # session tells the robot whether its controller is armed: `agent.sim_session`).
        self.state_listeners: list[Callable[[str], None]] = []
        # Where each frame's time goes, marked by an in-process benchmark's nodes (`agent.stage_marks`).
        self.stage_marks: StageMarks | None = None
        self._params = {p.name: p for p in spec.params}
        self._widen_integer_overrides()
        for p in spec.params:
            self.declare_parameter(p.name, p.default, param_descriptor(p))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._publishers_made: list[LifecyclePublisher] = []
        self._active_entities: list[Subscription | Timer] = []
        self._warned: dict[str, float] = {}
        # Diagnostics keep flowing in every lifecycle state, on a steady clock: a paused simulation must
        # not silence the health report.
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        diag = TOPICS["/diagnostics"]
        self._diag_pub = self.create_publisher(msg_class(diag.msg_type), diag.ros_name, qos_profile(diag.qos),
                                               event_callbacks=NO_PUBLISHER_EVENTS)  # fmt: skip
        period = self.get_parameter("diagnostics_period_s").value
        self.create_timer(period, self._publish_diagnostics, self.io_group, clock=steady)
        if self.get_parameter("autostart").value:
            self._autostart_timer = self.create_timer(0.0, self._autostart, self.io_group, clock=steady)

    # ---- subclass hooks -------------------------------------------------------------------------------
    def configure(self) -> None:
        """Load models and create publishers. Raise to fail the transition."""

    def activate(self) -> None:
        """Create subscriptions and timers."""

    def deactivate(self) -> None:
        """Last words before subscriptions, timers and publishers go quiet."""

    def cleanup(self) -> None:
        """Drop what configure loaded."""

    def health(self, now: float) -> list[tuple[str, Status]]:
        """Named statuses for /diagnostics; called under `self.lock`."""
        return []

    def summary(self) -> dict[str, str]:
        """Key/values for the node's own diagnostic entry (backend, counts); called under `self.lock`."""
        return {}

    # ---- helpers for subclasses -----------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """Every graph parameter's current value, checked (ranges, choices); ValueError names the bad one."""
        values = {name: self.get_parameter(name).value for name in self._params}
        for name, value in values.items():
            self._params[name].check(value)
        return values

    def now_s(self) -> float:
        """ROS time in seconds (simulation time with use_sim_time)."""
        return self.get_clock().now().nanoseconds * 1e-9

    def publisher(self, topic: str, msg_type: str | None = None) -> LifecyclePublisher:
        """Lifecycle publisher on a graph topic this node publishes, with the graph's type (or `msg_type`,
        where a parameter picks another) and QoS.

        Without rclpy's default event handlers (see NO_PUBLISHER_EVENTS).
        """
        t = self._topic(topic, self.spec.publishes)
        cls = msg_class(msg_type or t.msg_type)
        pub = self.create_lifecycle_publisher(cls, t.ros_name, qos_profile(t.qos),
                                              event_callbacks=NO_PUBLISHER_EVENTS)  # fmt: skip
        self._publishers_made.append(pub)
        return pub

    def subscribe(self, topic: str, callback: Callable[[Any], None], group: CallbackGroup) -> Subscription:
        """Subscription (alive while active) on a graph topic this node subscribes to.

        A callback taking two arguments also gets rclpy's MessageInfo (source and reception timestamps,
        publication sequence number).
        """
        t = self._topic(topic, self.spec.subscribes)
        sub = self.create_subscription(
            msg_class(t.msg_type), t.ros_name, callback, qos_profile(t.qos),
            callback_group=group, event_callbacks=NO_SUBSCRIPTION_EVENTS,
        )  # fmt: skip
        self._active_entities.append(sub)
        return sub

    def poll(self, topic: str) -> Subscription:
        """Subscription (alive while active) on a graph topic that wakes no executor: its messages wait in
        the subscription's history (its QoS depth) until the node takes them with `agent.ros_io.drain`,
        from one thread at a time (a callback of one mutually exclusive group)."""
        return self.subscribe(topic, _taken_by_the_node, self.polled_group)

    def timer(
        self, period_s: float, callback: Callable[[], None], group: CallbackGroup, steady: bool = False
    ) -> Timer:
        """ROS-clock timer (follows use_sim_time), or a steady-clock one, alive while active."""
        clock = Clock(clock_type=ClockType.STEADY_TIME) if steady else None
        timer = self.create_timer(period_s, callback, group, clock=clock)
        self._active_entities.append(timer)
        return timer

    def reject(self, stream: StreamStats, err: MessageError, now: float) -> None:
        """Count a malformed message and warn, throttled per (stream, reason)."""
        with self.lock:
            stream.reject(err.reason, now)
        self.warn_throttled(
            f"{stream.name}.{err.reason}", f"{stream.name}: rejected message ({err.reason}): {err}"
        )

    def drop(self, stream: StreamStats, reason: str, detail: str, now: float) -> None:
        """Count a valid message that could not be used and warn, throttled per (stream, reason)."""
        with self.lock:
            stream.drop(reason, now)
        self.warn_throttled(f"{stream.name}.{reason}", f"{stream.name}: dropped message ({reason}): {detail}")

    def losses(self) -> Counter[str]:
        """Messages rejected or dropped on every stream the node keeps, by "stream.reason"."""
        out: Counter[str] = Counter()
        with self.lock:
            for s in vars(self).values():
                if isinstance(s, StreamStats):
                    out.update({f"{s.name}.{k}": n for k, n in (s.rejected + s.dropped).items()})
        return out

    def warn_throttled(self, key: str, text: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(key, -WARN_PERIOD_S) >= WARN_PERIOD_S:
            self._warned[key] = now
            self.get_logger().warning(text)

    def halt(self) -> None:
        """Stop sending what moves the robot, at once: called from a signal handler on the main thread, so
        it only sets flags (no lock, which that thread may hold, no I/O). The shutdown that follows sends
        the safe action."""

    def finalize(self) -> None:
        """Shut the lifecycle down while the context is still valid (the safe actions go out)."""
        if self.lifecycle_state in ("inactive", "active") and rclpy.ok(context=self.context):
            self.trigger_shutdown()

    # ---- lifecycle plumbing ---------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.configure()
        except Exception as err:  # any load error must leave the node up and say why, not kill it
            return self._failed("configure", err)
        return self._entered("inactive", super().on_configure(state))

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.activate()
        except Exception as err:  # as in on_configure
            self._release_active()
            return self._failed("activate", err)
        return self._entered("active", super().on_activate(state))

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.deactivate()
        self._release_active()
        return self._entered("inactive", super().on_deactivate(state))

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_publishers()
        self.cleanup()
        return self._entered("unconfigured", super().on_cleanup(state))

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.lifecycle_state == "active":
            self.deactivate()
            self._release_active()
        self._release_publishers()
        self.cleanup()
        return self._entered("finalized", super().on_shutdown(state))

    def _entered(self, label: str, result: TransitionCallbackReturn) -> TransitionCallbackReturn:
        if result == TransitionCallbackReturn.SUCCESS:
            self.lifecycle_state, self.fault = label, ""
            for listener in self.state_listeners:
                listener(label)
        return result

    def _failed(self, transition: str, err: Exception) -> TransitionCallbackReturn:
        self.fault = f"{transition} failed: {err}"
        self.get_logger().error(self.fault)
        return TransitionCallbackReturn.FAILURE

    def _release_active(self) -> None:
        for entity in self._active_entities:
            if isinstance(entity, Subscription):
                self.destroy_subscription(entity)
            else:
                self.destroy_timer(entity)
        self._active_entities.clear()

    def _release_publishers(self) -> None:
        for pub in self._publishers_made:
            self.destroy_lifecycle_publisher(pub)
        self._publishers_made.clear()

    def _autostart(self) -> None:
        self._autostart_timer.cancel()
        self.destroy_timer(self._autostart_timer)
        if self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            self.trigger_activate()

    def _widen_integer_overrides(self) -> None:
        """`-p teacher_timeout_s:=2` (or `2` in a parameter file) is an integer to ROS, and declaring a float
        parameter with it raises. Take it as the float it means, as `Param.check` does.

        rclpy keeps the start-up values (command line, parameter files, `parameter_overrides`) in
        `_parameter_overrides` until each parameter is declared; there is no public hook before that.
        """
        overrides = self._parameter_overrides
        for p in self._params.values():
            given = overrides.get(p.name)
            if p.type is float and given is not None and given.type_ == Parameter.Type.INTEGER:
                overrides[p.name] = Parameter(p.name, Parameter.Type.DOUBLE, float(given.value))

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        for p in params:
            if p.name not in self._params:
                continue
            if self.lifecycle_state == "active":
                return SetParametersResult(
                    successful=False,
                    reason=f"{p.name}: deactivate first; parameters take effect at configure",
                )
            try:
                self._params[p.name].check(p.value)
            except ValueError as err:
                return SetParametersResult(successful=False, reason=str(err))
        return SetParametersResult(successful=True)

    def _topic(self, name: str, allowed: tuple[str, ...]) -> Topic:
        if name not in allowed:
            raise ValueError(f"node {self.spec.name}: {name} is not among its graph topics {allowed}")
        return TOPICS[name]

    def _publish_diagnostics(self) -> None:
        now = self.now_s()
        # "policy", or "robot1/policy" in a namespace: /diagnostics is global, so robots side by side differ.
        name = self.get_fully_qualified_name().lstrip("/")
        with self.lock:
            entries = self.health(now) if self.lifecycle_state == "active" else []
            values = {"state": self.lifecycle_state, **self.summary()}
        if self.fault:
            node = Status(Level.ERROR, self.fault, values)
        elif self.lifecycle_state != "active":
            node = Status(Level.WARN, f"{self.lifecycle_state}: not processing", values)
        else:
            worst = max((s.level for _, s in entries), default=Level.OK)
            node = Status(worst, "active" if worst == Level.OK else "active, see the entries below", values)
        statuses = [diagnostic_status(f"{name}: node", node)]
        statuses += [diagnostic_status(f"{name}: {key}", status) for key, status in entries]
        self._diag_pub.publish(diagnostic_array(self.get_clock().now().to_msg(), statuses))
