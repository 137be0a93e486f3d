"""The Markdown report: renders in JupyterLab (tables, a Mermaid graph); agent text inert.

Every piece of text an agent or a person wrote goes through
:func:`~iterion_nb.report.mdsafe.inline` (table cells, headings) or sits in a
fenced code block (outputs, the graph), so no renderer turns it into a link,
an image or HTML; see :mod:`iterion_nb.report.mdsafe`.
"""

from __future__ import annotations

import json
from typing import Any

from iterion_nb.ir import model as m
from iterion_nb.ir.mermaid import to_mermaid
from iterion_nb.report.build import ReportData, answer_shown, seconds, stamp, summary_rows
from iterion_nb.report.mdsafe import fenced, inline
from iterion_nb.view.states import NodeView
from iterion_nb.view.svg import PALETTE

#: Longest event data shown in full in Markdown.
EVENT_DATA_CHARS = 200


def cell(value: Any) -> str:
    """Text inert inside a Markdown table cell or heading (see :func:`mdsafe.inline`)."""
    return inline(value)


def mermaid_with_states(wf: m.Workflow, views: dict[str, NodeView]) -> str:
    """The workflow's Mermaid flowchart, each node in its state's colours, its state in words.

    The same states and colours as the run widget and the HTML report. A
    state's words are ours (``waiting for 1 of 2 answers``): letters, digits
    and spaces, nothing Mermaid or HTML would read.
    """
    lines = to_mermaid(wf).rstrip().split("\n")
    named = {f"n_{name}": name for name in views}
    for i, line in enumerate(lines):
        ident = line.strip().split("[", 1)[0].split("{", 1)[0].split(">", 1)[0]
        name = named.get(ident.split("(", 1)[0])
        if name is not None and "</small>" in line and " --" not in line:
            head, tail = line.rsplit("</small>", 1)
            lines[i] = f"{head} · {views[name].text}</small>{tail}"
    for state, (fill, stroke, ink) in PALETTE.items():
        dash = ",stroke-dasharray:4 3" if state == "skipped" else ""
        lines.append(f"  classDef {state} fill:{fill},stroke:{stroke},color:{ink}{dash}")
    by_state: dict[str, list[str]] = {}
    for name, view in views.items():
        if name in wf.nodes:
            by_state.setdefault(view.state, []).append(f"n_{name}")
    lines += [f"  class {','.join(ids)} {state}" for state, ids in by_state.items()]
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def to_markdown(data: ReportData) -> str:
    """The whole report as Markdown."""
    run = data.run
    out = [f"# Run {cell(run.id)} · {cell(run.workflow)} · {cell(run.status)}", ""]
    if data.live:
        out += [
            f"> **Live run.** This run is still {cell(run.status)}: the report shows its state"
            f" as of {stamp(data.generated_at)}.",
            "",
        ]
    (label, value), *rest = summary_rows(data)
    out += ["## Summary", "", *_table([cell(label), cell(value)], [list(r) for r in rest]), ""]
    out += ["## Workflow", ""]
    if data.workflow is not None:
        out += [*fenced(mermaid_with_states(data.workflow, data.states()), "mermaid"), ""]
    else:
        out += ["(the workflow's source is not available)", ""]
    out += ["## Timeline", ""]
    out += [*_table(
        ["node", "state", "started", "ended", "took"],
        [
            [v.node, v.state, stamp(v.started), stamp(v.ended),
             seconds((v.ended - v.started).total_seconds()) if v.ended else ""]
            for v in data.timeline()
        ],
    ), ""]  # fmt: skip
    out += ["## Outputs", ""]
    if not data.outputs:
        out += ["No node has produced an output yet.", ""]
    for name, value in data.outputs.items():
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
        out += [f"### {cell(name)}", "", *fenced(text, "json"), ""]
    out += ["## Questions", ""]
    if data.interactions:
        out += [*_table(
            ["kind", "node", "question", "options", "answer", "answered by", "asked", "answered"],
            [
                ["**async**" if q.kind == "async" else q.kind, q.node_id, " / ".join(q.questions),
                 ", ".join(f"{o.label or o.id} ({o.id})" for o in q.options),
                 "*pending*" if q.pending else answer_shown(q), q.answered_by or "",
                 stamp(q.requested_at), stamp(q.answered_at or q.ended_at)]
                for q in data.interactions
            ],
        ), ""]  # fmt: skip
    else:
        out += ["No questions were asked.", ""]
    out += [f"## Events ({len(data.events)})", ""]
    rows = []
    for e in data.events:
        text = json.dumps(e.data, ensure_ascii=False, default=str) if e.data else ""
        if len(text) > EVENT_DATA_CHARS:
            text = text[:EVENT_DATA_CHARS] + "…"
        rows.append([e.seq, stamp(e.at), e.type, e.node_id or "", text])
    out += [*_table(["seq", "time", "type", "node", "data"], rows), ""]
    return "\n".join(out)
