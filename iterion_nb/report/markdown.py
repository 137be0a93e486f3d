"""The Markdown report: renders in JupyterLab (tables, a Mermaid graph); agent text inert.

Every piece of text an agent or a person wrote goes through
:func:`~iterion_nb.report.mdsafe.inline` (table cells, headings) or sits in a
fenced code block (outputs, the graph), so no renderer turns it into a link,
an image or HTML; see :mod:`iterion_nb.report.mdsafe`.
"""

from __future__ import annotations

import json
from typing import Any

from iterion_nb.ir.mermaid import to_mermaid
from iterion_nb.report.build import ReportData, answer_text, seconds, stamp, summary_rows
from iterion_nb.report.mdsafe import fenced, inline

#: Longest event data shown in full in Markdown.
EVENT_DATA_CHARS = 200


def cell(value: Any) -> str:
    """Text inert inside a Markdown table cell or heading (see :func:`mdsafe.inline`)."""
    return inline(value)


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
    out += ["## Summary", "", *_table(["", ""], [list(r) for r in summary_rows(data)]), ""]
    out += ["## Workflow", ""]
    if data.workflow is not None:
        out += [*fenced(to_mermaid(data.workflow).rstrip(), "mermaid"), ""]
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
                 "*pending*" if q.pending else answer_text(q.answers), q.answered_by or "",
                 stamp(q.requested_at), stamp(q.answered_at)]
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
