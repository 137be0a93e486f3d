"""iterion_nb: a Jupyter-native engine for AI-agent workflows.

Importing the package is cheap: the compiler loads at once; the session (and
with it the DuckDB store) loads on first use of ``Session``. Jupyter pieces
load lazily when IPython or the Jupyter server asks for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iterion_nb.dsl.diagnostics import Diagnostic, Severity
from iterion_nb.errors import CompileError, IterionError
from iterion_nb.ir import CompileResult, Workflow, analyze, compile_file
from iterion_nb.ir import compile_workflow as compile  # noqa: A004 - the API of SPEC §7

if TYPE_CHECKING:
    from iterion_nb.backends.tools import tool
    from iterion_nb.session import RunHandle, Session

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
    if name in ("Session", "RunHandle"):
        from iterion_nb import session

        return getattr(session, name)
    if name == "tool":
        from iterion_nb.backends.tools import tool

        return tool
    raise AttributeError(f"module 'iterion_nb' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext iterion_nb``: the ``%%iterion`` and ``%iterion`` magics."""
    from iterion_nb.magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext iterion_nb``."""
    from iterion_nb.magics import unload

    unload(ipython)
