"""iterion_nb: a Jupyter-native engine for AI-agent workflows.

Importing the package is cheap: everything it names loads on first use — the
compiler on the first ``compile``, the session (and with it the DuckDB store)
on first use of ``Session``. (So ``iterion-nb`` stopped with Ctrl-C as it
starts has little to be caught in that is not its own code.) Jupyter pieces
load lazily when IPython or the Jupyter server asks for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iterion_nb.backends.tools import tool
    from iterion_nb.dsl.diagnostics import Diagnostic, Severity
    from iterion_nb.errors import CompileError, IterionError
    from iterion_nb.ir import CompileResult, Workflow, analyze, compile_file
    from iterion_nb.ir import compile_workflow as compile  # noqa: A004 - the API of SPEC §7
    from iterion_nb.session import RunHandle, Session

#: Where each name of the package lives: (module, name there).
_LAZY = {
    "CompileError": ("iterion_nb.errors", "CompileError"),
    "CompileResult": ("iterion_nb.ir", "CompileResult"),
    "Diagnostic": ("iterion_nb.dsl.diagnostics", "Diagnostic"),
    "IterionError": ("iterion_nb.errors", "IterionError"),
    "RunHandle": ("iterion_nb.session", "RunHandle"),
    "Session": ("iterion_nb.session", "Session"),
    "Severity": ("iterion_nb.dsl.diagnostics", "Severity"),
    "Workflow": ("iterion_nb.ir", "Workflow"),
    "analyze": ("iterion_nb.ir", "analyze"),
    "compile": ("iterion_nb.ir", "compile_workflow"),
    "compile_file": ("iterion_nb.ir", "compile_file"),
    "tool": ("iterion_nb.backends.tools", "tool"),
}

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "CompileResult",
    "Diagnostic",
    "IterionError",
    "RunHandle",
    "Session",
    "Severity",
    "Workflow",
    "__version__",
    "analyze",
    "compile",
    "compile_file",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value  # once loaded, an attribute like any other
        return value
    raise AttributeError(f"module 'iterion_nb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext iterion_nb``: the ``%%iterion`` and ``%iterion`` magics."""
    from iterion_nb.magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext iterion_nb``."""
    from iterion_nb.magics import unload

    unload(ipython)
