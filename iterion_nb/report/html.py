"""The HTML report: one file, no external fetches, every piece of text escaped."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from iterion_nb.report.build import ReportData, answer_shown, seconds, stamp, summary_rows
from iterion_nb.view import graph_layout, graph_svg

#: Longest event data shown in full; longer data is cut (the store has it all).
EVENT_DATA_CHARS = 400

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.live { background: #fff3cd; border: 1px solid #e0c36c; padding: 8px; margin: 1em 0; }
.async { color: #186; font-weight: bold; } .pending { color: #a60; }
pre { background: #f7f7f7; padding: 8px; overflow-x: auto; white-space: pre-wrap; font-size: 12px; }
.data { font-family: monospace; font-size: 12px; white-space: pre-wrap; word-break: break-all; }
"""


def _cell(value: Any) -> str:
    return f"<td>{escape(str(value))}</td>"


def _table(header: list[str], rows: list[list[Any]], klass: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<table class="{klass}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _wrap(klass: str, head: str, rows: list[str]) -> str:
    body = "".join(rows)
    return f'<table class="{klass}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _graph(data: ReportData) -> str:
    if data.workflow is None:
        return "<p>(the workflow's source is not available)</p>"
    return graph_svg(graph_layout(data.workflow), data.states(), prefix="report")


def _questions(data: ReportData) -> str:
    if not data.interactions:
        return "<p>No questions were asked.</p>"
    rows = []
    for q in data.interactions:
        kind = (
            f'<span class="async">{escape(q.kind)}</span>' if q.kind == "async" else escape(q.kind)
        )
        options = ", ".join(f"{o.label or o.id} ({o.id})" for o in q.options)
        answer = '<span class="pending">pending</span>' if q.pending else escape(answer_shown(q))
        rows.append(
            f'<tr class="question" data-interaction="{escape(q.id)}"><td>{kind}</td>'
            f"<td>{escape(q.node_id)}</td><td>{escape(' / '.join(q.questions))}</td>"
            f"<td>{escape(options)}</td><td>{answer}</td><td>{escape(q.answered_by or '')}</td>"
            f"<td>{escape(stamp(q.requested_at))}</td>"
            f"<td>{escape(stamp(q.answered_at or q.ended_at))}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "kind",
            "node",
            "question",
            "options",
            "answer",
            "answered by",
            "asked",
            "answered",
        )
    )
    return _wrap("questions", head, rows)


def _events(data: ReportData) -> str:
    rows = []
    for e in data.events:
        text = json.dumps(e.data, ensure_ascii=False, default=str) if e.data else ""
        if len(text) > EVENT_DATA_CHARS:
            text = text[:EVENT_DATA_CHARS] + f"… ({len(text)} characters)"
        rows.append(
            f"<tr><td>{e.seq}</td><td>{escape(stamp(e.at))}</td><td>{escape(e.type)}</td>"
            f'<td>{escape(e.node_id or "")}</td><td class="data">{escape(text)}</td></tr>'
        )
    head = "".join(f"<th>{h}</th>" for h in ("seq", "time", "type", "node", "data"))
    return _wrap("events", head, rows)


def to_html(data: ReportData) -> str:
    """The whole report as one HTML document."""
    run = data.run
    live = (
        f'<div class="live" id="live">This run is still {escape(run.status)}: the report shows '
        f"its state as of {escape(stamp(data.generated_at))}.</div>"
        if data.live
        else ""
    )
    timeline = _table(
        ["node", "state", "started", "ended", "took"],
        [
            [v.node, v.state, stamp(v.started), stamp(v.ended),
             seconds((v.ended - v.started).total_seconds()) if v.ended else ""]
            for v in data.timeline()
        ],
        "timeline",
    )  # fmt: skip
    outputs = (
        "".join(
            f'<h3>{escape(name)}</h3><pre class="output" data-node="{escape(name)}">'
            f"{escape(json.dumps(value, indent=2, ensure_ascii=False, default=str))}</pre>"
            for name, value in data.outputs.items()
        )
        or "<p>No node has produced an output yet.</p>"
    )
    sections = [
        ("summary", "Summary", _table(["", ""], [list(r) for r in summary_rows(data)], "summary")),
        ("graph", "Workflow", _graph(data)),
        ("timeline", "Timeline", timeline),
        ("outputs", "Outputs", outputs),
        ("questions", "Questions", _questions(data)),
        ("events", f"Events ({len(data.events)})", _events(data)),
    ]
    body = "".join(
        f'<section id="{sid}"><h2>{title}</h2>{html}</section>' for sid, title, html in sections
    )
    title = escape(f"Run {run.id} · {run.workflow} · {run.status}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{title}</title><style>{STYLE}</style></head><body>"
        f"<h1>{title}</h1>{live}{body}</body></html>\n"
    )
