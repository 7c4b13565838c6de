"""`agent bench messages`: the state embedding's wire size and per-hop cost in agent_interfaces/StateEmbedding
against the standard layouts it replaced (sensor_msgs/JointState with names e0..e{E-1}, as before) and
std_msgs/Float32MultiArray (no header, no encoder: shown as the floor).

A hop is what a publisher and a subscriber do for one message: build and serialise, deserialise, decode
with the checks the nodes run. All variants are timed interleaved in one run, so the ratios hold on a noisy
machine.
"""

from __future__ import annotations

import array
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from agent_interfaces.msg import StateEmbedding
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray

from agent.messages import embedding_to_msg, msg_to_embedding

HASH = "0" * 64  # an encoder hash


def _variants(emb: np.ndarray) -> dict[str, tuple[type, Callable[[], Any], Callable[[Any], np.ndarray]]]:
    dim = emb.size
    names = [f"e{i}" for i in range(dim)]

    def joint() -> JointState:
        return JointState(name=list(names), position=array.array("d", emb.astype(np.float64).tobytes()))

    def from_joint(m: JointState) -> np.ndarray:  # the old layout's checks: names, size, finite float32
        if list(m.name) != names:
            raise ValueError("layout")
        return _finite(np.asarray(m.position, dtype=np.float64).astype(np.float32))

    def multi() -> Float32MultiArray:
        return Float32MultiArray(data=array.array("f", emb.tobytes()))

    return {
        "agent_interfaces/StateEmbedding": (
            StateEmbedding, lambda: embedding_to_msg(emb, 1.0, "camera", HASH, (0, 0.0, 0)),
            lambda m: msg_to_embedding(m, dim, HASH)),
        "sensor_msgs/JointState (e0..e{E-1})": (JointState, joint, from_joint),
        "std_msgs/Float32MultiArray": (
            Float32MultiArray, multi, lambda m: _finite(np.asarray(m.data, np.float32))),
    }  # fmt: skip


def _finite(x: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(x)):
        raise ValueError("nonfinite")
    return x


def bench_messages(dim: int = 256, iters: int = 2000) -> dict[str, Any]:
    """Bytes on the wire and microseconds per hop for each layout; `vs_state_embedding` = time ratio."""
    emb = np.random.default_rng(0).normal(size=dim).astype(np.float32)  # (E,)
    variants = _variants(emb)
    spent = dict.fromkeys(variants, 0.0)
    for _ in range(iters):
        for name, (cls, build, decode) in variants.items():
            t0 = time.perf_counter()
            out = decode(deserialize_message(serialize_message(build()), cls))
            spent[name] += time.perf_counter() - t0
            assert np.array_equal(out, emb), name  # every layout carries the embedding exactly
    base = spent["agent_interfaces/StateEmbedding"]
    return {
        "embed_dim": dim, "iters": iters,
        "layouts": {name: {"bytes": len(serialize_message(build())), "us_per_hop": spent[name] / iters * 1e6,
                           "vs_state_embedding": spent[name] / base}
                    for name, (_, build, _) in variants.items()},
    }  # fmt: skip
