"""Where to draw each node of a workflow: a layered layout, computed once in Python.

Nodes go in columns by their distance from the entry along forward edges
(edges that close a loop are drawn back), rows within a column in source
order. The widget draws the result as SVG; nothing is fetched.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from iterion_nb.ir import model as m
from iterion_nb.ir.mermaid import edge_label

COLUMN = 170
ROW = 70


def graph_layout(wf: m.Workflow) -> dict[str, Any]:
    """``{"nodes": [{id, kind, x, y}], "edges": [{src, dst, label, back}], "width", "height"}``."""
    order = list(wf.nodes)
    depth: dict[str, int] = {wf.entry: 0}
    back: set[tuple[str, str]] = set()
    # breadth-first from the entry; an edge to a node already placed at or before
    # its source is a loop's way back
    queue = deque([wf.entry])
    while queue:
        src = queue.popleft()
        for edge in wf.outgoing(src):  # not every edge for every node: that was quadratic
            if edge.dst in depth:
                if depth[edge.dst] <= depth[src]:
                    back.add((edge.src, edge.dst))
                continue
            depth[edge.dst] = depth[src] + 1
            queue.append(edge.dst)
    last = max(depth.values(), default=0)
    for name in order:  # unreachable nodes (a warning) go in a last column
        depth.setdefault(name, last + 1)
    rows: dict[int, int] = {}
    nodes = []
    for name in order:
        column = depth[name]
        row = rows.get(column, 0)
        rows[column] = row + 1
        kind = getattr(wf.nodes[name], "kind", "node")
        nodes.append({"id": name, "kind": kind, "x": 20 + column * COLUMN, "y": 20 + row * ROW})
    edges = [
        {
            "src": e.src,
            "dst": e.dst,
            "label": edge_label(e, wf.loops),
            "back": (e.src, e.dst) in back,
        }
        for e in wf.edges
    ]
    width = 20 + (max(depth.values(), default=0) + 1) * COLUMN
    height = 20 + max(rows.values(), default=1) * ROW
    return {"nodes": nodes, "edges": edges, "width": width, "height": height}
