"""``backend: claw``, the default: our own tool-use loop over a Provider."""

from __future__ import annotations

import json
from collections.abc import Callable

from iterion_nb.backends.claw.loop import AgentLoop, reported_turn
from iterion_nb.backends.providers import Provider, ProviderRequest, ProviderResolver
from iterion_nb.runtime.ports import BackendRequest, BackendResult

__all__ = ["AgentLoop", "ClawBackend"]


class ClawBackend:
    """Runs agent, judge, llm-router and llm-human nodes with a provider.

    Args:
        providers: Maps a node's ``model:`` to a provider (default: a
            :class:`ProviderResolver` without scenario), or one provider for
            every node.
        retries: How often a transient provider error is retried (with
            exponential backoff from ``retry_delay`` seconds).
    """

    reports_steps = True

    def __init__(
        self,
        providers: Callable[[str | None], Provider] | Provider | None = None,
        *,
        retries: int = 3,
        retry_delay: float = 0.5,
    ) -> None:
        if providers is None:
            providers = ProviderResolver()
        self._providers = providers
        if callable(providers) and not hasattr(providers, "complete"):
            self._resolve: Callable[[str | None], Provider] = providers
        else:
            fixed: Provider = providers
            self._resolve = lambda model: fixed
        self.retries = retries
        self.retry_delay = retry_delay

    async def close(self) -> None:
        """Close the providers' network clients."""
        closer = getattr(self._providers, "close", None)
        if closer is not None:
            await closer()

    async def call(self, request: BackendRequest) -> BackendResult:
        """Run one node call."""
        provider = self._resolve(request.model)
        if request.purpose == "agent":
            loop = AgentLoop(request, provider, retries=self.retries, retry_delay=self.retry_delay)
            return await loop.run()
        return await self._one_turn(request, provider)

    async def _one_turn(self, request: BackendRequest, provider: Provider) -> BackendResult:
        """A routing choice or an answer on a person's behalf: one turn, no tools."""
        assert request.context is not None
        if request.purpose == "route":
            system = (request.system + "\n\n" if request.system else "") + (
                "Choose the next step. Reply with only its name, one of: "
                + ", ".join(request.choices)
            )
        else:
            system = request.system
        turn = ProviderRequest(
            model=request.model or "scripted", system=system,
            messages=[{"role": "user", "content": [{"type": "text",
                                                    "text": request.user or "Decide."}]}],
            tools=[], node=request.node.name, visit=request.visit,
            reasoning_effort=request.reasoning_effort,
        )  # fmt: skip
        response = await reported_turn(request.context, turn, provider.complete)
        text = response.text.strip()
        if request.purpose == "human":
            return BackendResult(text or None)
        try:
            picked = json.loads(text)
        except json.JSONDecodeError:
            picked = [c for c in request.choices if c in text][:1] or text
        return BackendResult(picked)
