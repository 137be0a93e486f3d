"""Run reports: a run exported to self-contained HTML and to Markdown."""
