"""Implementations of the Backend port.

``FunctionBackend`` runs LLM nodes with Python functions; the in-process tool
loop with its providers and the Claude Code adapter come next.
"""

from __future__ import annotations

from iterion_nb.backends.function import FunctionBackend

__all__ = ["FunctionBackend"]
