"""The recorder stores with each topic the QoS the nodes use, so `ros2 bag play` republishes with it."""

from __future__ import annotations

from agent import graph
from agent.recorder import _bag_qos
from agent.ros_io import qos_profile


def test_each_topics_bag_qos_is_the_profile_the_nodes_use() -> None:
    for topic in graph.TOPICS.values():
        bag, live = _bag_qos(topic.qos), qos_profile(topic.qos)
        assert (bag.history.name, bag.reliability.name, bag.durability.name, bag.depth) == (
            live.history.name, live.reliability.name, live.durability.name, live.depth,
        ), topic.name  # fmt: skip
