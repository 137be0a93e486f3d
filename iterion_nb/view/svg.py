"""The workflow graph as one SVG picture, each node in its state's colours and words.

Used inline by the HTML report and, as an ``<img>`` data URI, by the
widgets' saved snapshots (sanitizers keep such an image; they strip inline
SVG). A picture has no page around it, so it carries its own background and
fixed colours, each text at least 4.5:1 against what it is drawn on. Every
text is escaped; ids are prefixed, so two pictures on one page never share
an arrowhead.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from iterion_nb.view.states import NodeView

#: fill, border, text for each state (text contrast on the fill: 7:1 or more).
PALETTE = {
    "pending": ("#f3f4f6", "#6b7280", "#1f2937"),
    "running": ("#dbeafe", "#1d4ed8", "#1e3a8a"),
    "waiting": ("#fef3c7", "#b45309", "#78350f"),
    "finished": ("#dcfce7", "#15803d", "#14532d"),
    "failed": ("#fee2e2", "#b91c1c", "#7f1d1d"),
    "skipped": ("#ffffff", "#9ca3af", "#374151"),
}
TERMINAL = ("#e5e7eb", "#4b5563", "#111827")
EDGE, LABEL, BACKGROUND = "#4b5563", "#374151", "#ffffff"
FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif"


def clip(text: str, width: float, char: float) -> str:
    """``text`` cut with an ellipsis to fit ``width`` pixels at ``char`` pixels a character."""
    room = max(1, int((width - 16) / char))
    return text if len(text) <= room else text[: room - 1] + "…"


def edge_path(points: list[list[float]], back: bool) -> str:
    """The SVG path of a routed edge: smooth through its points; a loop runs up its lane."""
    (x0, y0), rest = points[0], points[1:]
    if back and len(points) == 4:
        lane, (x3, y3) = points[1][0], points[3]
        if y0 == y3:  # a node that loops onto itself: a small arc on its right
            return f"M{x0},{y0 - 8} C{lane + 24},{y0 - 30} {lane + 24},{y3 + 30} {x3},{y3 + 8}"
        r = min(10.0, abs(y0 - y3) / 2, max(lane - x0, 1.0))
        up = -1 if y3 < y0 else 1
        return (
            f"M{x0},{y0} L{lane - r},{y0} Q{lane},{y0} {lane},{y0 + up * r} "
            f"L{lane},{y3 - up * r} Q{lane},{y3} {lane - r},{y3} L{x3},{y3}"
        )
    path = [f"M{x0},{y0}"]
    for (ax, ay), (bx, by) in zip(points, rest, strict=False):
        mid = (ay + by) / 2
        path.append(f"C{ax},{mid} {bx},{mid} {bx},{by}")
    return " ".join(path)


def label_at(points: list[list[float]], back: bool) -> tuple[float, float]:
    """Where an edge's label goes: beside a loop's lane, or on the first leg."""
    if back:
        return points[1][0] + 4, (points[1][1] + points[2][1]) / 2
    (ax, ay), (bx, by) = points[0], points[1]
    return (ax + bx) / 2 + 4, (ay + by) / 2


def _node(node: Mapping[str, Any], view: NodeView | None) -> str:
    x, y, w, h = node["x"], node["y"], node["w"], node["h"]
    name = escape(node["id"])
    if node.get("terminal"):
        fill, stroke, ink = TERMINAL
        r = w / 2
        return (
            f'<g class="terminal" data-node="{name}"><circle cx="{x + r}" cy="{y + r}" r="{r}" '
            f'fill="{fill}" stroke="{stroke}"/><text x="{x + r}" y="{y + r + 4}" '
            f'text-anchor="middle" font-size="11" fill="{ink}">{name}</text></g>'
        )
    state = view.state if view is not None else "pending"
    text = view.text if view is not None else "pending"
    fill, stroke, ink = PALETTE.get(state, PALETTE["pending"])
    dash = ' stroke-dasharray="4 3"' if state == "skipped" else ""
    return (
        f'<g class="node" data-node="{name}" data-state="{state}">'
        f"<title>{name} ({escape(node['kind'])}): {escape(text)}</title>"
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="7" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.5"{dash}/>'
        f'<text x="{x + 8}" y="{y + 17}" font-size="12" font-weight="600" fill="{ink}">'
        f"{escape(clip(node['id'], w, 7.4))}</text>"
        f'<text x="{x + 8}" y="{y + 32}" font-size="11" fill="{ink}">'
        f"{escape(clip(node['kind'], w, 6.4))}</text>"
        f'<text class="state" x="{x + 8}" y="{y + 47}" font-size="11" font-weight="600" '
        f'fill="{ink}">{escape(clip(text, w, 6.4))}</text></g>'
    )


def graph_svg(
    layout: Mapping[str, Any],
    views: Mapping[str, NodeView],
    *,
    prefix: str = "iterion",
    standalone: bool = False,
) -> str:
    """The picture: edges (loops dashed, with their labels), then the nodes on top.

    ``standalone`` adds the SVG namespace, which a picture needs outside an
    HTML page (as an image); inside one it is implied.
    """
    marker = f"{prefix}-arrow"
    width, height = layout["width"], layout["height"]
    xmlns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    parts = [
        f'<svg{xmlns} width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="workflow graph" '
        f'font-family="{FONT}">',
        f'<rect width="{width}" height="{height}" fill="{BACKGROUND}"/>',
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        f'fill="{EDGE}"/></marker></defs>',
    ]
    for edge in layout["edges"]:
        dash = ' stroke-dasharray="5 4"' if edge["back"] else ""
        parts.append(
            f'<path class="edge" d="{edge_path(edge["points"], edge["back"])}" fill="none" '
            f'stroke="{EDGE}" stroke-width="1.3"{dash} marker-end="url(#{marker})"/>'
        )
        if edge["label"]:
            lx, ly = label_at(edge["points"], edge["back"])
            parts.append(
                f'<text x="{lx}" y="{ly}" font-size="10" fill="{LABEL}" stroke="{BACKGROUND}" '
                f'stroke-width="3" paint-order="stroke">{escape(edge["label"])}</text>'
            )
    parts += [_node(node, views.get(node["id"])) for node in layout["nodes"]]
    parts.append("</svg>")
    return "".join(parts)
