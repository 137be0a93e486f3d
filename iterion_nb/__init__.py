"""iterion_nb: a Jupyter-native engine for AI-agent workflows.

Importing the package is cheap: it loads the compiler only. Jupyter pieces
load lazily when IPython or the Jupyter server asks for them.
"""

from __future__ import annotations

from iterion_nb.dsl.diagnostics import Diagnostic, Severity
from iterion_nb.errors import CompileError, IterionError
from iterion_nb.ir import CompileResult, Workflow, analyze, compile_file
from iterion_nb.ir import compile_workflow as compile  # noqa: A004 - the API of SPEC §7

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "CompileResult",
    "Diagnostic",
    "IterionError",
    "Severity",
    "Workflow",
    "__version__",
    "analyze",
    "compile",
    "compile_file",
]
