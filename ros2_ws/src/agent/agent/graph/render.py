"""The graph rendered as text: the node parameter file (ROS YAML) and the README's graph section (a mermaid
diagram, a node table and a topic table). `python -m agent.graph` writes them."""

from __future__ import annotations

import json

from agent.graph import NODES, TOPICS, Param, Qos

README_BEGIN, README_END = "<!-- graph:begin -->", "<!-- graph:end -->"  # the README's generated section


def params_yaml() -> str:
    """The parameter file (ROS `node: ros__parameters:` layout) with every file-settable default.

    Parameters bound to a launch argument are left out: the launch argument always sets them.
    """
    lines = ["# Generated from agent.graph by `python -m agent.graph`; a test keeps them equal.", ""]
    for spec in NODES:
        lines += [f"{spec.name}:  # {spec.description}", "  ros__parameters:"]
        for p in spec.params:
            if p.launch_arg:
                continue
            lines.append(f"    {p.name}: {json.dumps(p.default)}  # {_comment(p)}")
        lines.append("")
    return "\n".join(lines)


def _comment(p: Param) -> str:
    text = p.description
    if p.low is not None:
        text += f"; [{p.low}, {p.high}]"
    if p.unit:
        text += f" {p.unit}"
    return text


def markdown() -> str:
    """The README's graph section: a mermaid diagram, then a node table and a topic table."""
    return "\n".join([
        "```mermaid", *_mermaid(), "```", "",
        "| node | runs | subscribes | publishes |", "|---|---|---|---|",
        *(f"| `{n.name}`{' (sim only)' if n.sim_only else ''} | {n.description} | {_code(n.subscribes)} | "
          f"{_code(n.publishes)} |" for n in NODES),
        "",
        "| topic | type | QoS | rate | publishers | subscribers | meaning |", "|---|---|---|---|---|---|---|",
        *(f"| `{t.name}` | `{t.msg_type}` | {_qos_text(t.qos)} | {_rate_text(t.rate_hz)} | "
          f"{_code(_endpoints(t.name, 'publishes'))} | {_code(_endpoints(t.name, 'subscribes')) or '-'} | "
          f"{t.description} |" for t in TOPICS.values()),
    ])  # fmt: skip


def with_graph_section(readme: str) -> str:
    """`readme` with the text between its graph markers replaced by `markdown()`."""
    if readme.count(README_BEGIN) != 1 or readme.count(README_END) != 1:
        raise ValueError(f"the README needs one {README_BEGIN} and one {README_END} line")
    head, rest = readme.split(README_BEGIN)
    _, tail = rest.split(README_END)
    return f"{head}{README_BEGIN}\n{markdown()}\n{README_END}{tail}"


def _mermaid() -> list[str]:
    """flowchart lines: node -> node per topic; topics read by no node end in a topic box.

    /diagnostics (published by every node, read by tools) is left to the table.
    """
    sim = [f"    {n.name}" for n in NODES if n.sim_only]
    lines = ["flowchart LR", '  subgraph sim ["sim only (launch argument sim != none)"]', *sim, "  end"]
    for t in TOPICS.values():
        if t.name == "/diagnostics":
            continue
        label = f'"{t.name}<br/>{_rate_text(t.rate_hz)}"'
        readers = _endpoints(t.name, "subscribes")
        for writer in _endpoints(t.name, "publishes"):
            for reader in readers:
                lines.append(f"  {writer} -->|{label}| {reader}")
            if not readers:
                box = "t" + t.name.replace("/", "_")
                lines.append(f'  {writer} -->|{label}| {box}(["{t.name}"])')
    return lines


def _endpoints(topic: str, side: str) -> tuple[str, ...]:
    return tuple(n.name for n in NODES if topic in getattr(n, side))


def _code(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _qos_text(qos: Qos) -> str:
    details = f"{qos.reliability}, {qos.durability}, depth {qos.depth}".replace("_", " ")
    return f"{qos.label} ({details})"


def _rate_text(rate_hz: float) -> str:
    return f"{rate_hz:g} Hz" if rate_hz else "on change"
