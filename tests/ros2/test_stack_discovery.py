"""`agent arm` acts on the robot it names: stacks on the domain are found with their host and artifact, and
with several visible and none named it refuses, listing them."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from agent.arming import set_armed
from agent.bringup import Bringup
from agent.stack_discovery import Stack, choose, discover
from rclpy.context import Context
from ros_harness import FakeRuntime


def test_the_only_stack_is_chosen_and_none_or_several_are_refused_with_the_domain_named() -> None:
    one = Stack("/robot1", "hostA", "artifacts/a (manifest sha256 0123456789ab)", "inactive")
    two = Stack("/robot2", "hostB", "artifacts/b (manifest sha256 ba9876543210)", "active")
    assert choose([one], None) == one
    assert choose([one, two], "robot2") == choose([one, two], "/robot2/") == two
    assert choose([one], "/") == Stack("/")  # named but not visible: the service call waits for it
    with pytest.raises(
        RuntimeError, match=r"no stack answered: no node named 'opd' is visible on ROS_DOMAIN_ID="
    ):
        choose([], None)
    with pytest.raises(
        RuntimeError, match=r"2 stacks answer on ROS_DOMAIN_ID=\S+, ROS_AUTOMATIC_DISCOVERY_RANGE="
    ) as err:
        choose([one, two], None)
    assert one.describe() in str(err.value) and two.describe() in str(err.value)
    assert "hostB" in two.describe() and "ba9876543210" in two.describe()


def test_two_stacks_on_the_domain_are_found_with_their_host_and_artifact_and_only_the_named_one_arms(
    ros_context: Context, fake_loader: Callable[..., FakeRuntime], contract_artifact: Path
) -> None:
    models = {"encoder": {"runtime_loader": fake_loader}, "policy": {"runtime_loader": fake_loader}}
    args = {"artifact_dir": str(contract_artifact), "drive": "student"}  # sim:=none: they start disarmed
    with (
        Bringup(context=ros_context, node_kwargs=models, namespace="robot1", **args) as one,
        Bringup(context=ros_context, node_kwargs=models, namespace="robot2", **args) as two,
    ):
        for stack in (one, two):
            assert stack.spin(10.0, until=lambda s=stack: s.node("opd").lifecycle_state == "inactive")
        found = {s.namespace: s for s in discover(2.0, context=ros_context)}
        assert {"/robot1", "/robot2"} <= set(found)
        for ns in ("/robot1", "/robot2"):
            assert found[ns].host == socket.gethostname() and found[ns].state == "inactive"
            assert found[ns].artifact.startswith(f"{contract_artifact} (manifest sha256 ")
        with pytest.raises(RuntimeError, match="name one with --namespace"):
            choose(list(found.values()), None)
        robot2 = choose(list(found.values()), "robot2")
        assert set_armed("arm", robot2.namespace, context=ros_context) == "active"
        assert two.node("opd").lifecycle_state == "active" and one.node("opd").lifecycle_state == "inactive"
