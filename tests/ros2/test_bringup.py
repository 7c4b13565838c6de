"""In-process bringup: the launch file's node set in one process, every endpoint as the graph declares."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from agent import graph
from agent.arming import set_armed
from agent.base_command import TwistMapping, velocity_of
from agent.bringup import Bringup, executor_name, launch_arguments
from agent.messages import ActionCodec, stamp_to_sec
from rclpy.context import Context
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from ros_harness import FakeRuntime, Probe, SensorFeed

CONFIG = Path(__file__).resolve().parents[2] / "ros2_ws" / "src" / "agent" / "config" / graph.PARAMS_FILE
# Endpoints every (lifecycle) node has besides its graph topics.
INFRASTRUCTURE = {"/rosout", "/parameter_events"}


def models(loader: Callable[..., FakeRuntime]) -> dict[str, dict]:
    return {"encoder": {"runtime_loader": loader}, "policy": {"runtime_loader": loader}}


def all_active(bringup: Bringup) -> bool:
    return all(n.lifecycle_state == "active" for n in bringup.nodes)


@pytest.mark.parametrize("sim", ["none", "mujoco"])
def test_nodes_topics_types_and_qos_match_the_graph(
    sim: str,
    ros_context: Context,
    fake_loader: Callable[..., FakeRuntime],
    contract_artifact: Path,
    tiny_teacher: Path,
    tmp_path: Path,
) -> None:
    params = yaml.safe_load(CONFIG.read_text())
    params["policy"]["ros__parameters"]["input_timeout_s"] = 0.7
    params["teacher"]["ros__parameters"]["checkpoint"] = str(tiny_teacher)
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(params))
    args = {"artifact_dir": str(contract_artifact), "params_file": str(params_file), "backend": "torch",
            "drive": "student", "autostart": "true"}  # fmt: skip
    with Bringup(context=ros_context, node_kwargs=models(fake_loader), sim=sim, **args) as bringup:
        assert [n.get_name() for n in bringup.nodes] == [s.name for s in graph.nodes_for(sim, "student")]
        assert bringup.spin(60.0, until=lambda: all_active(bringup)), [n.fault for n in bringup.nodes]
        probe = bringup.nodes[0]
        specs = graph.nodes_for(sim, "student")
        graph_nodes = {n.name for n in specs}
        want = {(t, n.name, side) for n in specs for side in ("pub", "sub")
                for t in (n.publishes if side == "pub" else n.subscribes)}  # fmt: skip

        def endpoints() -> dict[tuple[str, str, str], object]:
            """Live endpoints by (topic, node, side). Queried by topic: a node-name query can answer for
            a same-named node of an earlier test whose discovery entry has not expired yet."""
            found = {}
            for topic, _ in probe.get_topic_names_and_types():
                for side, infos in (("pub", probe.get_publishers_info_by_topic(topic)),
                                    ("sub", probe.get_subscriptions_info_by_topic(topic))):  # fmt: skip
                    found.update({(topic, i.node_name, side): i for i in infos if i.node_name in graph_nodes})
            return {
                k: v
                for k, v in found.items()
                if k[0] not in INFRASTRUCTURE and "transition_event" not in k[0]
            }

        # Discovery is asynchronous, also within one process: wait until the graph shows every endpoint.
        assert bringup.spin(10.0, until=lambda: set(endpoints()) == want), set(endpoints()) ^ want
        for (topic, node_name, side), info in endpoints().items():
            assert info.topic_type == graph.TOPICS[topic].msg_type, (node_name, topic)
            assert_qos(info.qos_profile, graph.TOPICS[topic].qos, f"{node_name} {side} {topic}")
        # The parameter file and the launch arguments reached the nodes, as in the launch file.
        assert bringup.node("policy").get_parameter("input_timeout_s").value == 0.7
        assert bringup.node("encoder").get_parameter("backend").value == "torch"
        for node in ("opd", "sim_bridge") if sim != "none" else ("opd",):  # one `drive` for both
            assert bringup.node(node).get_parameter("drive").value == "student"
        assert fake_loader.calls[0][:2] == (str(contract_artifact), "torch")
        timeout = bringup.node("encoder").describe_parameter("input_timeout_s")
        assert timeout.floating_point_range[0].to_value == graph.node("encoder").param("input_timeout_s").high


def assert_qos(actual: object, expected: graph.Qos, where: str) -> None:
    reliability = {"reliable": ReliabilityPolicy.RELIABLE, "best_effort": ReliabilityPolicy.BEST_EFFORT}
    durability = {"volatile": DurabilityPolicy.VOLATILE, "transient_local": DurabilityPolicy.TRANSIENT_LOCAL}
    assert actual.reliability == reliability[expected.reliability], where
    assert actual.durability == durability[expected.durability], where


@pytest.mark.parametrize("executor", graph.EXECUTORS)
def test_camera_and_imu_in_actions_out_through_the_whole_graph(
    executor: str, ros_context: Context, fake_loader: Callable[..., FakeRuntime], contract_artifact: Path
) -> None:
    probe = Probe(ros_context)
    probe.record("/agent/action", "/cmd_vel", "/opd/action")
    with Bringup(
        context=ros_context,
        executor=executor,
        node_kwargs=models(fake_loader),
        artifact_dir=str(contract_artifact),
        drive="student",  # the policy's proposals executed as they are (OPD's gate: test_opd_node.py)
        autostart="true",
    ) as bringup:
        bringup.add_node(probe.node)
        assert bringup.spin(5.0, until=lambda: all_active(bringup))
        probe.advertise("/camera/image_raw", "/imu/data")
        assert bringup.spin(5.0, until=lambda: probe.matched("/camera/image_raw", "/imu/data"))
        codec = ActionCodec(fake_loader.runtime.contract)
        drive = codec.contract.skill_id("drive")
        feed, stamps = SensorFeed(probe, time.time()), []

        def acted(topic: str) -> list:
            return [m for m in probe.received[topic] if codec.from_msg(m)[0] == drive]

        # Feed frames until four actions came back: a loaded machine may drop late frames on the way.
        for _ in range(100):
            stamps.append(time.time())
            feed.step(stamps[-1])
            if bringup.spin(0.05, until=lambda: len(acted("/agent/action")) >= 4):
                break
        assert len(acted("/agent/action")) >= 4
        for msg in acted("/agent/action"):  # stamped with the camera image it came from
            assert min(abs(stamp_to_sec(msg.header.stamp) - s) for s in stamps) < 1e-6
        n = len(acted("/agent/action"))
        assert bringup.spin(2.0, until=lambda: len(acted("/opd/action")) >= n)
        stamps_out = [m.header.stamp for m in acted("/opd/action")[:n]]
        assert stamps_out == [m.header.stamp for m in acted("/agent/action")[:n]]  # drive student
        # The base command is the executed action's Twist: one per executed drive action, nothing else moves.
        mapping = TwistMapping(codec.contract)
        go = mapping.velocity(*codec.from_msg(acted("/opd/action")[0]))
        moving = lambda: [t for t in probe.received["/cmd_vel"] if velocity_of(t) != (0.0, 0.0)]  # noqa: E731
        assert bringup.spin(2.0, until=lambda: len(moving()) == len(acted("/opd/action")))
        assert all(velocity_of(t) == go for t in moving()) and go != (0.0, 0.0)
    probe.node.destroy_node()


def test_a_real_robot_starts_disarmed_until_an_operator_arms_it(
    ros_context: Context, fake_loader: Callable[..., FakeRuntime], contract_artifact: Path
) -> None:
    """sim:=none, autostart by default: every node configured, the inputs processed, but the opd node (the
    only publisher of motion commands) inactive and silent; arming over the lifecycle service starts the
    commands, disarming sends one safe action and stops them."""
    probe = Probe(ros_context)
    probe.record("/agent/action", "/cmd_vel", "/opd/action")
    with Bringup(context=ros_context, node_kwargs=models(fake_loader), artifact_dir=str(contract_artifact),
                 drive="student") as bringup:  # fmt: skip
        bringup.add_node(probe.node)
        states = lambda: {n.get_name(): n.lifecycle_state for n in bringup.nodes}  # noqa: E731
        want = {"encoder": "active", "policy": "active", "opd": "inactive"}
        assert bringup.spin(10.0, until=lambda: states() == want), states()
        probe.advertise("/camera/image_raw", "/imu/data")
        assert bringup.spin(5.0, until=lambda: probe.matched("/camera/image_raw", "/imu/data"))
        feed = SensorFeed(probe, time.time())

        def feed_until(condition: Callable[[], bool], seconds: float) -> bool:
            for _ in range(int(seconds / 0.05)):
                feed.step(time.time())
                if bringup.spin(0.05, until=condition):
                    return True
            return False

        assert feed_until(lambda: len(probe.received["/agent/action"]) >= 5, 5.0)  # the stack runs
        assert probe.received["/cmd_vel"] == [] and probe.received["/opd/action"] == []  # disarmed

        codec = ActionCodec(fake_loader.runtime.contract)
        assert set_armed("arm", context=ros_context) == "active"
        drive = codec.contract.skill_id("drive")
        executed = lambda: [codec.from_msg(m)[0] for m in probe.received["/opd/action"]]  # noqa: E731
        assert feed_until(lambda: drive in executed(), 5.0)
        assert probe.received["/cmd_vel"]
        assert set_armed("disarm", context=ros_context) == "inactive"

        # The stop on both topics: each /opd/action has its /cmd_vel, which may arrive a moment later.
        def stopped() -> bool:
            last_stop = executed()[-1:] == [codec.contract.safe_skill_id]
            return last_stop and len(probe.received["/cmd_vel"]) == len(probe.received["/opd/action"])

        assert bringup.spin(2.0, until=stopped)
        n = len(probe.received["/cmd_vel"])
        assert not feed_until(lambda: len(probe.received["/cmd_vel"]) > n, 1.0)  # silent again
    probe.node.destroy_node()


def test_two_robots_run_side_by_side_in_their_namespaces(
    ros_context: Context, fake_loader: Callable[..., FakeRuntime], contract_artifact: Path
) -> None:
    """Topic names are relative: with `namespace`, each stack reads its own sensors and commands its own base;
    /diagnostics stays global."""
    probes = {ns: Probe(ros_context, name=f"probe_{ns}", namespace=ns) for ns in ("robot1", "robot2")}
    for probe in probes.values():
        probe.record("/cmd_vel", "/opd/action", "/diagnostics")
    args = {"artifact_dir": str(contract_artifact), "drive": "student", "autostart": "true"}
    with (
        Bringup(context=ros_context, node_kwargs=models(fake_loader), namespace="robot1", **args) as one,
        Bringup(context=ros_context, node_kwargs=models(fake_loader), namespace="robot2", **args) as two,
    ):
        for probe in probes.values():
            one.add_node(probe.node)
        one.spin(0.01)  # starts its executors; `two.spin` starts the other's
        assert two.spin(10.0, until=lambda: all_active(one) and all_active(two))
        names = {(n.get_namespace(), n.get_name()) for n in one.nodes + two.nodes}
        assert names == {(f"/{ns}", s.name) for ns in probes for s in graph.nodes_for("none", "student")}
        probe = probes["robot1"]
        probe.advertise("/camera/image_raw", "/imu/data")
        assert one.spin(5.0, until=lambda: probe.matched("/camera/image_raw", "/imu/data"))
        feed = SensorFeed(probe, time.time())
        for _ in range(100):  # robot1's sensors only
            feed.step(time.time())
            if one.spin(0.05, until=lambda: len(probe.received["/opd/action"]) >= 5):
                break
        assert len(probe.received["/opd/action"]) >= 5 and probe.received["/cmd_vel"]
        drive = fake_loader.runtime.contract.skill_id("drive")
        codec = ActionCodec(fake_loader.runtime.contract)
        assert drive in [codec.from_msg(m)[0] for m in probe.received["/opd/action"]]
        # robot2 saw no sensor data: it only holds its base on the safe action.
        other = [codec.from_msg(m)[0] for m in probes["robot2"].received["/opd/action"]]
        assert drive not in other and set(other) <= {codec.contract.safe_skill_id}
        # One global /diagnostics, each node named with its namespace.
        sources = lambda: {s.name.split(":")[0] for m in probe.received["/diagnostics"] for s in m.status}  # noqa: E731
        assert one.spin(3.0, until=lambda: {"robot1/opd", "robot2/opd"} <= sources()), sources()
    for probe in probes.values():
        probe.node.destroy_node()


def test_launch_arguments_are_checked_like_the_launch_file() -> None:
    assert launch_arguments()["sim"] == "none" and launch_arguments()["backend"] == "onnxruntime"
    assert launch_arguments()["drive"] == "opd"
    with pytest.raises(ValueError, match="drive = 'policy'"):
        launch_arguments(drive="policy")
    with pytest.raises(ValueError, match="backend = 'tflite'"):
        launch_arguments(backend="tflite")
    with pytest.raises(ValueError, match="unknown launch arguments"):
        launch_arguments(simulator="mujoco")
    # autostart: on in simulation, off (disarmed) on a real robot unless asked for.
    assert graph.armed(launch_arguments(sim="mujoco")) and not graph.armed(launch_arguments())
    assert graph.armed(launch_arguments(autostart="true"))
    assert not graph.armed(launch_arguments(sim="mujoco", autostart="false"))
    with pytest.raises(ValueError, match="autostart = 'yes'"):
        launch_arguments(autostart="yes")


def test_an_unknown_executor_is_refused_before_any_node_starts(ros_context: Context) -> None:
    with pytest.raises(ValueError, match="executor 'events': choose one of"):
        Bringup(context=ros_context, executor="events")


def test_fused_the_encoders_callback_hands_each_embedding_to_the_opd_decision(
    ros_context: Context, tiny_artifact: Path
) -> None:
    """fused: the encoder and the opd node on one executor, and each embedding goes from the encoder's
    callback straight to the OPD decision: one gate decision per embedding, stamped with it. /agent/state
    is still published (bags, `agent replay`); the opd node does not subscribe to it."""
    probe = Probe(ros_context)
    probe.record("/agent/state", "/opd/gate", "/opd/action")
    with Bringup(context=ros_context, fused=True, artifact_dir=str(tiny_artifact), drive="opd",
                 autostart="true") as bringup:  # fmt: skip
        assert [executor_name(e) for e in bringup.executors] == ["encoder+opd"]
        bringup.add_node(probe.node)
        assert bringup.spin(60.0, until=lambda: all_active(bringup)), [n.fault for n in bringup.nodes]
        opd = bringup.node("opd")
        assert "state" not in {s.topic_name.split("/")[-1] for s in opd.subscriptions}
        probe.advertise("/camera/image_raw", "/imu/data")
        assert bringup.spin(5.0, until=lambda: probe.matched("/camera/image_raw", "/imu/data"))
        feed = SensorFeed(probe, time.time())
        for _ in range(100):
            feed.step(time.time())
            if bringup.spin(0.05, until=lambda: len(probe.received["/opd/gate"]) >= 5):
                break
        gates = [m.header.stamp for m in probe.received["/opd/gate"]]
        assert len(gates) >= 5
        assert bringup.spin(2.0, until=lambda: len(probe.received["/agent/state"]) >= len(gates))
        assert gates == [m.header.stamp for m in probe.received["/agent/state"]][: len(gates)]
        acted = {(m.header.stamp.sec, m.header.stamp.nanosec) for m in probe.received["/opd/action"]}
        assert all((g.sec, g.nanosec) in acted for g in gates)  # each decision executed with its stamp
    probe.node.destroy_node()


@pytest.mark.parametrize("args", [{"drive": "student"}, {"executor": "multi"}])
def test_fused_needs_drive_opd_and_single_threaded_executors(ros_context: Context, args: dict) -> None:
    with pytest.raises(ValueError, match="fused .* needs drive opd and single-threaded executors"):
        Bringup(context=ros_context, fused=True, **args)
