"""A backend whose agents are Python functions: for tests, notebooks and glue.

Give one function per node name (and optionally a default). A function takes
the :class:`~iterion_nb.runtime.ports.BackendRequest` and returns the output
(or a :class:`~iterion_nb.runtime.ports.BackendResult` to report usage); it may
be a coroutine function.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from iterion_nb.runtime.ports import BackendRequest, BackendResult

AgentFunction = Callable[[BackendRequest], Any]


class FunctionBackend:
    """Runs each LLM node by calling the Python function registered for it."""

    def __init__(
        self,
        functions: Mapping[str, AgentFunction] | None = None,
        *,
        default: AgentFunction | None = None,
    ) -> None:
        self.functions = dict(functions or {})
        self.default = default
        self.calls: list[str] = []

    async def call(self, request: BackendRequest) -> BackendResult:
        """Call the node's function and wrap what it returns."""
        fn = self.functions.get(request.node.name, self.default)
        if fn is None:
            known = ", ".join(self.functions) or "none"
            raise LookupError(f"no function for node '{request.node.name}' (have: {known})")
        self.calls.append(request.node.name)
        result = fn(request)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, BackendResult):
            return result
        return BackendResult(output=result)
