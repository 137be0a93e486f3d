"""Test utilities shipped with the package: the loopback model-API server."""

from __future__ import annotations

from iterion_nb.testing.anthropic_server import ScenarioServer

__all__ = ["ScenarioServer"]
