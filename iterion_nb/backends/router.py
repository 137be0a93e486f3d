"""One backend per name: each node runs on its ``backend:`` (or the workflow's default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iterion_nb.errors import NodeError
from iterion_nb.runtime.ports import Backend, BackendRequest, BackendResult


class BackendRouter:
    """Sends each node call to the backend its node names, else to ``default``."""

    reports_steps = True

    def __init__(self, backends: Mapping[str, Backend], default: str = "claw") -> None:
        self.backends = dict(backends)
        self.default = default

    def with_default(self, default: str) -> BackendRouter:
        """The same backends, another default (a workflow's ``default_backend``)."""
        routed = BackendRouter(self.backends, default)
        return routed

    async def call(self, request: BackendRequest) -> BackendResult:
        """Run the call on the node's backend."""
        name = getattr(request.node, "backend", None) or self.default
        backend = self.backends.get(name)
        if backend is None:
            known = ", ".join(sorted(self.backends))
            raise NodeError(request.node.name, f"no backend '{name}' here (known: {known})")
        return await backend.call(request)

    async def close(self) -> None:
        """Close every backend that holds resources."""
        for backend in self.backends.values():
            closer: Any = getattr(backend, "close", None)
            if closer is not None:
                await closer()
