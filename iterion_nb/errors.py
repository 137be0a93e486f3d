"""The exception tree of iterion_nb.

User mistakes are :class:`IterionError` subclasses carrying what a surface
needs to show them (the CLI, the magics and the REST API translate them once,
at the edge). Control-flow signals of the runtime will derive from
:class:`ControlSignal`, a ``BaseException``, so that agent or tool code that
catches ``Exception`` cannot swallow a pause or a cancellation.
"""

from __future__ import annotations

from collections.abc import Sequence

from iterion_nb.dsl.diagnostics import Diagnostic, Severity, render_all
from iterion_nb.dsl.source import Source


class IterionError(Exception):
    """Base of every error iterion_nb raises on purpose."""


class CompileError(IterionError):
    """A workflow source has errors. ``diagnostics`` holds all of them.

    ``str(err)`` is the rendered report: ``file:line:col``, the line, a caret.
    """

    def __init__(self, diagnostics: Sequence[Diagnostic], source: Source) -> None:
        self.diagnostics = tuple(diagnostics)
        self.source = source
        errors = [d for d in self.diagnostics if d.severity is Severity.ERROR]
        count = f"{len(errors)} error{'s' if len(errors) != 1 else ''}"
        super().__init__(f"{source.name}: {count}\n{render_all(self.diagnostics, source)}")


class ControlSignal(BaseException):
    """Base of the runtime's control flow (pause, cancel, budget exhausted)."""
