"""Text to syntax tree: sources, tokens, the indentation pass, the parser, diagnostics.

This layer uses the standard library only and never raises for bad input:
every problem becomes a :class:`~iterion_nb.dsl.diagnostics.Diagnostic`.
"""

from __future__ import annotations

from iterion_nb.dsl.ast import Module
from iterion_nb.dsl.diagnostics import Diagnostic, Diagnostics, Severity, render, render_all
from iterion_nb.dsl.lexer import tokenize
from iterion_nb.dsl.parser import parse
from iterion_nb.dsl.source import Source, Span

__all__ = [
    "Diagnostic",
    "Diagnostics",
    "Module",
    "Severity",
    "Source",
    "Span",
    "parse_source",
    "render",
    "render_all",
]


def parse_source(source: Source, diags: Diagnostics) -> Module:
    """Lex and parse ``source``, adding every problem to ``diags``."""
    return parse(tokenize(source, diags), source, diags)
