"""Run reports: one self-contained HTML file, or Markdown that renders in JupyterLab.

A report holds the run's status, duration, tokens and cost; a picture of the
workflow graph (inline SVG in HTML, a Mermaid block in Markdown); a timeline
of node visits; each node's output; every question with its options, answer,
who answered and when (async ones marked); and the events. All agent-written
text is escaped. A run that is still live gets a report of its state so far,
marked as such.
"""

from iterion_nb.report.build import ReportData, ReportError, collect, render, write_report

__all__ = ["ReportData", "ReportError", "collect", "render", "write_report"]
