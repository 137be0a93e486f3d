"""Gathering a run's report data from a store, and rendering it."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from iterion_nb.errors import CompileError, IterionError, withdrawn_by
from iterion_nb.ir import compile_stored
from iterion_nb.ir import model as m
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Event, Interaction, Run
from iterion_nb.runtime.wire import event_json, interaction_json, run_json
from iterion_nb.view.states import NodeView, Visit, node_views
from iterion_nb.view.usage import usage

Format = Literal["html", "md", "json"]
FORMATS: tuple[Format, ...] = ("html", "md", "json")
#: Statuses of a run that may still change (its report is "so far").
LIVE = ("running",)


class ReportError(IterionError):
    """A report that cannot be made or written (the message says why)."""


@dataclass
class ReportData:
    """Everything a report shows."""

    run: Run
    workflow: m.Workflow | None
    events: list[Event]
    interactions: list[Interaction]
    generated_at: datetime
    outputs: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    _views: tuple[dict[str, NodeView], list[Visit]] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def live(self) -> bool:
        """Whether the run may still change (the report is of its state so far)."""
        return self.run.status in LIVE

    @property
    def duration_seconds(self) -> float:
        """From creation to the last event (or the last update)."""
        end = self.events[-1].at if self.events else self.run.updated_at
        return max(0.0, (max(end, self.run.updated_at) - self.run.created_at).total_seconds())

    def views(self) -> tuple[dict[str, NodeView], list[Visit]]:
        """Each node's state (as the run widget shows it) and every node visit."""
        if self._views is None:
            self._views = node_views(self.workflow, self.events, self.interactions, self.run.status)
        return self._views

    def timeline(self) -> list[Visit]:
        """Node visits in order (loops and retries visit again), with how each ended."""
        return self.views()[1]

    def states(self) -> dict[str, NodeView]:
        """Each node's state: pending, running, waiting, finished, failed or skipped."""
        return self.views()[0]


async def collect(store: Store, run_id: str) -> ReportData:
    """Read what a report needs (raises NotFoundError for an unknown run)."""
    run = await store.get_run(run_id)
    events = await store.events(run_id)
    interactions = await store.interactions(run_id)
    workflow = None
    if run.source:
        try:
            workflow = compile_stored(run.source, f"<run {run_id}>")
        except CompileError:
            workflow = None  # a source that no longer compiles: no picture
    checkpoint = run.checkpoint or {}
    return ReportData(
        run=run,
        workflow=workflow,
        events=events,
        interactions=interactions,
        generated_at=datetime.now(UTC),
        outputs=dict(checkpoint.get("outputs", {})),
        usage=dict(checkpoint.get("usage", {})),
    )


async def render(store: Store, run_id: str, fmt: str = "md") -> str:
    """The report of ``run_id`` as HTML, Markdown or JSON text."""
    if fmt not in FORMATS:
        raise ReportError(f"unknown report format '{fmt}' (one of: {', '.join(FORMATS)})")
    data = await collect(store, run_id)
    if fmt == "json":
        return json.dumps(report_json(data), indent=2, ensure_ascii=False, default=str) + "\n"
    if fmt == "html":
        from iterion_nb.report.html import to_html

        return to_html(data)
    from iterion_nb.report.markdown import to_markdown

    return to_markdown(data)


#: File name suffixes a Markdown report is written to when no format is given.
MARKDOWN_SUFFIXES = ("", ".md", ".markdown", ".txt")


def format_for(path: str | os.PathLike[str] | None, fmt: str | None) -> str:
    """The format asked for, else the one the file name says (``.html``/``.htm``), else md.

    Raises:
        ReportError: No format given, and a file name that says another one
            (``report.pdf`` once got Markdown).
    """
    if fmt:
        return fmt
    suffix = Path(path).suffix.lower() if path is not None else ""
    if suffix in (".html", ".htm"):
        return "html"
    if suffix == ".json":
        return "json"
    if suffix not in MARKDOWN_SUFFIXES:
        raise ReportError(
            f"a report is HTML, Markdown or JSON, and '{Path(path or '').name}' says none of"
            " them: name the file .html, .md or .json, or give the format (html, md or json)"
        )
    return "md"


def report_json(data: ReportData) -> dict[str, Any]:
    """What a report shows, as data: the run, its summary, node states, visits, questions, events.

    The same facts as the HTML and Markdown reports (``report --json``), for a
    program: times in ISO 8601, questions and events as the REST API gives them.
    """
    states = {
        name: {"state": v.state, "note": v.note, "visits": v.visits, "error": v.error}
        for name, v in data.states().items()
    }
    timeline = [
        {"node": v.node, "branch": v.branch, "started": v.started.isoformat(),
         "ended": v.ended.isoformat() if v.ended else None, "state": v.state, "error": v.error}
        for v in data.timeline()
    ]  # fmt: skip
    return {
        "run": run_json(data.run, full=True),
        "live": data.live,
        "generated_at": data.generated_at.isoformat(),
        "duration_seconds": data.duration_seconds,
        "summary": dict(summary_rows(data)),
        "nodes": states,
        "timeline": timeline,
        "outputs": data.outputs,
        "usage": data.usage,
        "questions": [interaction_json(q) for q in data.interactions],
        "events": [event_json(e) for e in data.events],
    }


def write_report(text: str, path: str | os.PathLike[str], *, make_dirs: bool = True) -> Path:
    """Write a report, creating the directories missing on the way unless ``make_dirs`` is false.

    The CLI, the notebook and Python all make them.

    An unwritable place is a ReportError naming it and why.
    """
    target = Path(path)
    if target.is_dir():
        raise ReportError(f"cannot write the report to {target}: it is a directory")
    try:
        if make_dirs:
            target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ReportError(
            f"cannot write the report to {target}: a part of its directory is a file"
        ) from None
    except OSError as err:
        raise ReportError(f"cannot write the report to {target}: {err.strerror or err}") from None
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ReportError(f"cannot write the report to {target}: {err.strerror or err}") from None
    return target


def seconds(value: float) -> str:
    """A duration for people: 0.42 s, 12.3 s, 4 min 05 s, 2 h 03 min."""
    if value < 60:
        return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def stamp(moment: datetime | None) -> str:
    """A time in reports (UTC, to the second)."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def answer_text(value: Any) -> str:
    """An answer as text (JSON for anything but a string)."""
    import json

    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _of(used: str, limit: str | None) -> str:
    return f"{used} of {limit} (budget)" if limit is not None else used


def summary_rows(data: ReportData) -> list[tuple[str, str]]:
    """The summary: status, times, duration, tokens and cost (against the budget), error."""
    run = data.run
    used = usage(data.events, run.status, data.usage)
    budget = data.workflow.budget if data.workflow is not None else None
    executing = used.seconds
    if used.since is not None:
        executing += (data.generated_at - used.since).total_seconds()
    max_s = budget.max_duration_seconds if budget else None
    max_t = budget.max_tokens if budget else None
    max_c = budget.max_cost_usd if budget else None
    rows = [
        ("Run", run.id),
        ("Workflow", run.workflow),
        ("Status", run.status + (" (live: report of its state so far)" if data.live else "")),
        ("Started", stamp(run.created_at)),
        ("Last update", stamp(run.updated_at)),
        ("Duration", seconds(data.duration_seconds)),
        ("Executing", _of(seconds(executing), seconds(max_s) if max_s is not None else None)),
        ("Tokens", _of(str(used.tokens), str(max_t) if max_t is not None else None)),
        ("Cost", _of(f"${used.cost_usd:.4f}", f"${max_c:.2f}" if max_c is not None else None)),
        ("Questions", _question_counts(data.interactions)),
        ("Events", str(len(data.events))),
        ("Report made", stamp(data.generated_at)),
    ]
    if run.error:
        rows.append(("Error", run.error))
    return rows


def _question_counts(questions: Sequence[Interaction]) -> str:
    """``3 (1 pending)``, with the ones that expired or were withdrawn when there are some."""
    parts = [f"{sum(q.pending for q in questions)} pending"]
    for ended, word in (("expired", "expired"), ("retracted", "withdrawn")):
        count = sum(q.ended == ended for q in questions)
        if count:
            parts.append(f"{count} {word}")
    return f"{len(questions)} ({', '.join(parts)})"


def answer_shown(q: Interaction) -> str:
    """An answer as people read it: an option's label with its id, else the text.

    A question that ended unanswered says how: expired, or withdrawn (and why).
    """
    if q.ended == "retracted":
        if withdrawn_by(q.end_reason) == "its run":
            return f"withdrawn: {q.end_reason}"
        return "withdrawn by its agent" + (f": {q.end_reason}" if q.end_reason else "")
    if q.ended == "expired":
        return "expired unanswered"
    labels = {o.id: o.label for o in q.options}
    if isinstance(q.answers, str) and labels.get(q.answers) not in (None, "", q.answers):
        return f"{labels[q.answers]} ({q.answers})"
    return answer_text(q.answers)
