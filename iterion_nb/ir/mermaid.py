"""Render a compiled workflow as a Mermaid flowchart."""

from __future__ import annotations

from typing import Any

from iterion_nb.ir import model as m

_SHAPES = {
    "router": ("{{", "}}"),
    "human": ("[/", "/]"),
    "tool": ("[[", "]]"),
    "compute": ("[[", "]]"),
    "emit": (">", "]"),
    "wait": ("[(", ")]"),
    "await_answers": ("[(", ")]"),
}


def _id(name: str) -> str:
    return f"n_{name}"


#: Mermaid entity codes for what a label must not contain as such: ``#`` first
#: (Mermaid reads ``#…;`` as an entity), the quote that ends the label, and
#: HTML, which Mermaid would render inside the node.
_ENTITIES = {"#": "#35;", '"': "#quot;", "<": "#60;", ">": "#62;", "&": "#38;"}


def _text(text: str) -> str:
    """Text from the source (a condition, an event name) shown as text in a label."""
    return "".join(_ENTITIES.get(ch, ch) for ch in text)


def _label(markup: str) -> str:
    return f'"{markup}"'


def _node_label(node: m.Node) -> str:
    detail: str = node.kind
    if isinstance(node, m.RouterNode):
        detail = f"router: {node.mode}"
    elif isinstance(node, m.AgentNode) and node.interaction != "none":
        detail = f"{node.kind}, interaction: {node.interaction}"
    elif isinstance(node, m.AwaitAnswersNode):
        origin = _text(node.from_node or "whole run")
        detail = f"await_answers from {origin}, timeout {node.timeout_seconds:g}s"
    elif isinstance(node, m.WaitNode | m.EmitNode):
        detail = f"{node.kind} {_text(node.event)}"
    if node.await_mode:
        detail += f", await {node.await_mode}"
    return f"{_text(node.name)}<br/><small>{detail}</small>"


def edge_label(edge: m.Edge, loops: dict[str, m.Loop]) -> str:
    """The label of an edge: its condition and the loop it belongs to."""
    bits: list[str] = []
    if isinstance(edge.condition, m.FieldCondition):
        bits.append(("not " if edge.condition.negated else "") + edge.condition.field)
    elif isinstance(edge.condition, m.ExprCondition):
        bits.append(edge.condition.source)
    elif edge.otherwise:
        bits.append("else")
    if edge.loop:
        loop = loops[edge.loop]
        cap = "n read at run time" if loop.bound is not None else loop.max_iterations
        bits.append(f"loop {edge.loop} ≤{cap}")
    return " · ".join(bits)


def graph_json(wf: m.Workflow) -> dict[str, Any]:
    """The workflow as data: its entry, nodes (name, kind) and edges (with their labels).

    ``iterion-nb graph --json`` prints it, with the Mermaid text under ``mermaid``.
    """
    edges = []
    for edge in wf.edges:
        item: dict[str, Any] = {"from": edge.src, "to": edge.dst}
        label = edge_label(edge, wf.loops)
        if label:
            item["label"] = label
        if edge.loop:
            item["loop"] = edge.loop
        edges.append(item)
    return {
        "workflow": wf.name,
        "entry": wf.entry,
        "nodes": [{"name": node.name, "kind": node.kind} for node in wf.nodes.values()],
        "edges": edges,
        "mermaid": to_mermaid(wf),
    }


def to_mermaid(wf: m.Workflow) -> str:
    """A ``flowchart TD`` of the workflow: nodes, terminals, edges with conditions."""
    lines = ["flowchart TD", f"  start((start)) --> {_id(wf.entry)}"]
    for node in wf.nodes.values():
        left, right = _SHAPES.get(node.kind, ("[", "]"))
        lines.append(f"  {_id(node.name)}{left}{_label(_node_label(node))}{right}")
    ends = (*m.TERMINALS, *wf.fails)  # done, fail, and the typed ends (fail NAME:)
    used = {e.dst for e in wf.edges} & set(ends)
    for terminal in ends:
        if terminal in used:
            label = terminal if terminal in m.TERMINALS else _label(_text(terminal))
            lines.append(f"  {_id(terminal)}(({label}))")
    for edge in wf.edges:
        arrow = "-.->" if edge.loop else "-->"
        label = edge_label(edge, wf.loops)
        text = f"|{_label(_text(label))}|" if label else ""
        lines.append(f"  {_id(edge.src)} {arrow}{text} {_id(edge.dst)}")
    return "\n".join(lines) + "\n"
