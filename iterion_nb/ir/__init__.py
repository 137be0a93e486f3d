"""Syntax tree to a validated, compiled workflow (the IR).

Holds the graph checks, template parsing and our own small expression
interpreter. Like ``dsl`` it depends on the standard library only.
"""

from __future__ import annotations

from iterion_nb.ir.compile import (
    CompileResult,
    analyze,
    compile_file,
    compile_stored,
    compile_workflow,
)
from iterion_nb.ir.model import Workflow

__all__ = [
    "CompileResult",
    "Workflow",
    "analyze",
    "compile_file",
    "compile_stored",
    "compile_workflow",
]
