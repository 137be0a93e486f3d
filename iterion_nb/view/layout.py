"""Where to draw each node: a layered layout, top to bottom, computed once in Python.

The usual recipe for flow graphs (Sugiyama's): loop edges set aside, each
node goes on the layer of its longest path from the entry, so a join sits
below every branch it joins; an edge that spans several layers gets a bend
point on each, so it runs between the nodes rather than through them; the
order within layers is settled by a few barycentre sweeps (fewer
crossings); each node is then pulled towards the centre of its neighbours
(a fan-out spreads under its router, a chain stays straight). Loop edges go
back up on the right, each in its own lane, dashed. ``done`` and ``fail``
are drawn as small terminal circles.

Node boxes are wide enough for their texts at the widget's font sizes, up
to a cap (a longer name is cut with an ellipsis by whoever draws it).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from iterion_nb.ir import model as m
from iterion_nb.ir.mermaid import edge_label

NODE_H = 56
TERMINAL = 40
LAYER_GAP = 52
NODE_GAP = 28
MARGIN = 16
LANE = 16
MIN_W, MAX_W = 132.0, 240.0
#: Average advance of a character: names at 12 px (bold), the other lines at 11 px.
NAME_CHAR, TEXT_CHAR = 7.4, 6.4
#: The longest state line a node may show (see ``iterion_nb.view.states``).
LONGEST_STATE = {"await_answers": "waiting for 99 of 99 answers", "wait": "waiting for event"}
DEFAULT_STATE = "waiting for an answer"
SWEEPS = 4


def node_width(name: str, kind: str) -> float:
    """A box wide enough for the node's name, kind and longest state line."""
    state = LONGEST_STATE.get(kind, DEFAULT_STATE)
    text = max(len(kind), len(state)) * TEXT_CHAR
    return max(MIN_W, min(MAX_W, max(len(name) * NAME_CHAR, text) + 20))


def _forward_and_back(wf: m.Workflow, names: list[str]) -> tuple[list[m.Edge], set[int]]:
    """Edges in source order, and the indexes of those drawn back up (loops)."""
    edges = [e for e in wf.edges if e.src in names and e.dst in names]
    back = {i for i, e in enumerate(edges) if e.loop is not None or e.src == e.dst}
    # any cycle left (an invalid graph still gets drawn): depth-first back edges
    out: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(edges):
        if i not in back:
            out[e.src].append(i)
    state: dict[str, int] = {}
    for root in [wf.entry, *names]:
        if root in state or root not in names:
            continue
        stack = [(root, iter(out[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            step = next(it, None)
            if step is None:
                state[node] = 2
                stack.pop()
                continue
            dst = edges[step].dst
            if state.get(dst) == 1:
                back.add(step)
            elif dst not in state:
                state[dst] = 1
                stack.append((dst, iter(out[dst])))
    return edges, back


def _layers(names: list[str], edges: list[m.Edge], back: set[int], entry: str) -> dict[str, int]:
    """Longest-path layering over the forward edges (Kahn's order)."""
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for i, e in enumerate(edges):
        if i not in back:
            preds[e.dst].append(e.src)
            succs[e.src].append(e.dst)
    indegree = {n: len(preds[n]) for n in names}
    ready = [n for n in names if indegree[n] == 0]
    ready.sort(key=lambda n: n != entry)  # the entry first
    layer = dict.fromkeys(names, 0)
    while ready:
        node = ready.pop(0)
        for dst in succs[node]:
            layer[dst] = max(layer[dst], layer[node] + 1)
            indegree[dst] -= 1
            if indegree[dst] == 0:
                ready.append(dst)
    return layer


def _order(
    rows: list[list[str]], ups: dict[str, list[str]], downs: dict[str, list[str]]
) -> list[list[str]]:
    """Barycentre sweeps: each node moves towards the mean position of its neighbours."""
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        sequence = range(1, len(rows)) if down else range(len(rows) - 2, -1, -1)
        for r in sequence:
            near = rows[r - 1] if down else rows[r + 1]
            at = {n: i for i, n in enumerate(near)}
            links = ups if down else downs

            def centre(node: str, i: int, at: dict[str, int] = at, links: Any = links) -> float:
                seen = [at[n] for n in links[node] if n in at]
                return sum(seen) / len(seen) if seen else float(i)

            rows[r] = [n for _, _, n in sorted(
                (centre(n, i), i, n) for i, n in enumerate(rows[r])
            )]  # fmt: skip
    return rows


def _place(
    rows: list[list[str]], width: dict[str, float], ups: dict[str, list[str]],
    downs: dict[str, list[str]],
) -> dict[str, float]:  # fmt: skip
    """Centre x of every node: packed, then pulled towards its neighbours, order kept."""
    cx: dict[str, float] = {}
    for row in rows:
        x = 0.0
        for n in row:
            cx[n] = x + width[n] / 2
            x += width[n] + NODE_GAP
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        sequence = rows[1:] if down else rows[-2::-1]
        for row in sequence:
            links = ups if down else downs
            wanted = []
            for n in row:
                seen = [cx[p] for p in links[n] if p in cx]
                wanted.append(sum(seen) / len(seen) if seen else cx[n])
            placed = _resolve(row, wanted, width)
            cx.update(zip(row, placed, strict=True))
    left = min((cx[n] - width[n] / 2 for row in rows for n in row), default=0.0)
    return {n: x - left + MARGIN for n, x in cx.items()}


def _resolve(row: list[str], wanted: list[float], width: dict[str, float]) -> list[float]:
    """Positions as close to ``wanted`` as the order and the gaps allow (both ways, averaged)."""
    gap = [(width[a] + width[b]) / 2 + NODE_GAP for a, b in itertools.pairwise(row)]
    right = list(wanted)
    for i in range(1, len(row)):
        right[i] = max(right[i], right[i - 1] + gap[i - 1])
    left = list(wanted)
    for i in range(len(row) - 2, -1, -1):
        left[i] = min(left[i], left[i + 1] - gap[i])
    placed = [(a + b) / 2 for a, b in zip(right, left, strict=True)]
    for i in range(1, len(row)):  # the average may still overlap: push right
        placed[i] = max(placed[i], placed[i - 1] + gap[i - 1])
    return placed


def graph_layout(wf: m.Workflow) -> dict[str, Any]:
    """Boxes and edge routes.

    ``{"nodes": [{id, kind, x, y, w, h, terminal}], "edges": [{src, dst,
    label, back, loop, points}], "width", "height"}``: ``x``/``y`` is a box's
    top-left corner, ``points`` the route of an edge (forward edges go from
    the bottom of their source through a bend point per layer they cross to
    the top of their target; loop edges from the right side of their source
    up a lane to the right side of their target).
    """
    names = list(wf.nodes)
    terminals = [t for t in (*m.TERMINALS, *wf.fails) if any(e.dst == t for e in wf.edges)]
    names += terminals
    kinds = {n: getattr(wf.nodes[n], "kind", "node") for n in wf.nodes}
    kinds.update(dict.fromkeys(terminals, "terminal"))
    edges, back = _forward_and_back(wf, names)
    layer = _layers(names, edges, back, wf.entry)
    width = {n: TERMINAL if kinds[n] == "terminal" else node_width(n, kinds[n]) for n in names}
    # an edge that spans layers gets a bend point (a dummy node) on each one in between
    ups: dict[str, list[str]] = defaultdict(list)
    downs: dict[str, list[str]] = defaultdict(list)
    chains: dict[int, list[str]] = {}
    layer_of = dict(layer)
    for i, e in enumerate(edges):
        if i in back:
            continue
        chain = [e.src]
        for depth in range(layer[e.src] + 1, layer[e.dst]):
            dummy = f"\0{i}:{depth}"
            layer_of[dummy], width[dummy] = depth, 8.0
            chain.append(dummy)
        chain.append(e.dst)
        for upper, lower in itertools.pairwise(chain):
            ups[lower].append(upper)
            downs[upper].append(lower)
        chains[i] = chain
    rows: list[list[str]] = [[] for _ in range(max(layer_of.values(), default=0) + 1)]
    for n in _discovery(wf, names, layer_of, downs):
        rows[layer_of[n]].append(n)
    rows = _order(rows, ups, downs)
    cx = _place(rows, width, ups, downs)
    top = {r: MARGIN + r * (NODE_H + LAYER_GAP) for r in range(len(rows))}
    boxes = {n: _box(n, kinds[n], cx[n], top[layer[n]], width[n]) for n in names}
    nodes = [box.as_json() for box in boxes.values()]
    right = max((b.x + b.w for b in boxes.values()), default=0.0)
    routed: list[dict[str, Any]] = []
    for i, e in enumerate(edges):
        a, b = boxes[e.src], boxes[e.dst]
        if i in back:
            lo, hi = sorted((layer[e.src], layer[e.dst]))
            beside = max(c.x + c.w for n, c in boxes.items() if lo <= layer[n] <= hi)
            lane = beside + LANE * (1 + sum(r["back"] for r in routed))
            points = [[a.x + a.w, a.cy], [lane, a.cy], [lane, b.cy], [b.x + b.w, b.cy]]
            right = max(right, lane)
        else:
            bends = [[round(cx[d], 1), top[layer_of[d]] + NODE_H / 2] for d in chains[i][1:-1]]
            points = [[a.x + a.w / 2, a.y + a.h], *bends, [b.x + b.w / 2, b.y]]
        routed.append({"src": e.src, "dst": e.dst, "label": edge_label(e, wf.loops),
                       "back": i in back, "loop": e.loop, "points": points})  # fmt: skip
    label_room = max((len(r["label"]) * TEXT_CHAR for r in routed if r["back"]), default=0.0)
    return {
        "nodes": nodes,
        "edges": routed,
        "width": round(right + MARGIN + label_room, 1),
        "height": MARGIN * 2 + len(rows) * (NODE_H + LAYER_GAP) - LAYER_GAP,
    }


@dataclass(frozen=True)
class _Box:
    id: str
    kind: str
    x: float
    y: float
    w: float
    h: float

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "x": self.x, "y": self.y, "w": self.w,
                "h": self.h, "terminal": self.kind == "terminal"}  # fmt: skip


def _box(name: str, kind: str, centre: float, top: float, width: float) -> _Box:
    height = TERMINAL if kind == "terminal" else NODE_H
    return _Box(
        name, kind, round(centre - width / 2, 1), top + (NODE_H - height) / 2, width, height
    )


def _discovery(
    wf: m.Workflow, names: list[str], layer_of: dict[str, int], downs: dict[str, list[str]]
) -> list[str]:
    """Every node and bend point, depth-first from the entry (source order), then the rest."""
    seen: dict[str, None] = {}
    for root in [wf.entry, *names, *layer_of]:
        if root in seen or root not in layer_of:
            continue
        stack = [root]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen[node] = None
            stack.extend(reversed(downs[node]))
    return list(seen)
