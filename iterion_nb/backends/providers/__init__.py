"""Model providers for the in-process loop: scripted, anthropic/<model>, openai/<model>."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iterion_nb.backends.providers.base import (
    Provider,
    ProviderRequest,
    ProviderResponse,
    ToolSpec,
    TransientProviderError,
)
from iterion_nb.backends.providers.scripted import ScenarioError, ScriptedProvider, load_scenario

__all__ = [
    "Provider",
    "ProviderRequest",
    "ProviderResolver",
    "ProviderResponse",
    "ScenarioError",
    "ScriptedProvider",
    "ToolSpec",
    "TransientProviderError",
    "load_scenario",
]


class ProviderResolver:
    """Picks the provider a node's ``model:`` names, creating each one once.

    ``scripted`` (or no model) answers from the scenario; ``anthropic/<model>``
    and ``openai/<model>`` use the official SDKs.
    """

    def __init__(self, scenario: Mapping[str, Any] | str | Path | None = None) -> None:
        self.scripted = ScriptedProvider(scenario or {"nodes": {}})
        self._made: dict[str, Provider] = {}

    def __call__(self, model: str | None) -> Provider:
        """The provider for a node's ``model:``."""
        name = (model or "scripted").strip()
        if name == "scripted" or name.startswith("scripted/"):
            return self.scripted
        if name not in self._made:
            family, _, model_id = name.partition("/")
            if family == "anthropic" and model_id:
                from iterion_nb.backends.providers.anthropic import AnthropicProvider

                self._made[name] = AnthropicProvider(model_id)
            elif family == "openai" and model_id:
                from iterion_nb.backends.providers.openai import OpenAIProvider

                self._made[name] = OpenAIProvider(model_id)
            else:
                raise ValueError(
                    f"unknown model '{name}': use scripted, anthropic/<model> or openai/<model>"
                )
        return self._made[name]

    async def close(self) -> None:
        """Close the SDK clients this resolver made."""
        for provider in self._made.values():
            closer = getattr(provider, "close", None)
            if closer is not None:
                await closer()
