"""Run one scenario through several providers: scripted directly, and the real
SDKs against the loopback server that serves the same scenario."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.backends.claude_code import ClaudeCodeBackend
from iterion_nb.backends.claw import ClawBackend
from iterion_nb.backends.providers import Provider, ProviderResolver, ScriptedProvider
from iterion_nb.runtime.ports import Store
from iterion_nb.session import RunHandle, Session
from iterion_nb.store import MemoryStore, open_duckdb_store
from iterion_nb.testing import ScenarioServer

PROVIDERS = ["scripted", "anthropic", "anthropic-stream", "openai", "claude_code"]


@dataclass
class Harness:
    """A session whose agents answer from ``scenario`` through one provider."""

    kind: str
    session: Session
    provider: Provider | None
    server: ScenarioServer | None

    def turns(self, node: str) -> list[list[dict[str, Any]]]:
        """The conversation the model was shown at each of the node's turns."""
        if isinstance(self.provider, ScriptedProvider):
            return [r.messages for r in self.provider.requests if r.node == node]
        assert self.server is not None
        bodies = [r["body"] for r in self.server.requests if r["node"] == node]
        if self.kind == "claude_code":
            # the CLI adds a description of its environment as a system-role entry,
            # rendered differently from one of its runs to the next: not ours to compare
            return [[m for m in b["messages"] if not _environment(m)] for b in bodies]
        return [b["messages"] for b in bodies]

    def last_user_text(self, node: str, turn: int) -> str:
        """Everything the model was told after its previous reply, as text.

        (One user message on the Anthropic API; tool messages and a user
        message on OpenAI's.)
        """
        messages = self.turns(node)[turn]
        tail: list[dict[str, Any]] = []
        for message in reversed(messages):
            if message["role"] == "assistant":
                break
            tail.insert(0, message)
        texts = []
        for message in tail:
            content = message["content"]
            if isinstance(content, str):
                texts.append(content)
                continue
            texts += [str(b.get("text") or b.get("content") or "") for b in content]
        return " ".join(texts)

    async def start(self, source: str, **kwargs: Any) -> RunHandle:
        return await self.session.start(it.compile(source), **kwargs)


def _environment(message: dict[str, Any]) -> bool:
    content = message.get("content")
    text = (
        content
        if isinstance(content, str)
        else " ".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
    )
    return message.get("role") == "system" and text.startswith("# Environment")


def make_provider(
    kind: str, scenario: dict[str, Any]
) -> tuple[Provider | None, ScenarioServer | None]:
    if kind == "scripted":
        return ProviderResolver(scenario).scripted, None
    server = ScenarioServer(scenario).start()
    if kind == "claude_code":
        return None, server  # the claude CLI is the client (see claude_env)
    if kind.startswith("anthropic"):
        from iterion_nb.backends.providers.anthropic import AnthropicProvider

        provider: Provider = AnthropicProvider(
            "claude-test", base_url=server.url, api_key="test-key",
            stream=kind.endswith("stream"),
        )  # fmt: skip
    else:
        from iterion_nb.backends.providers.openai import OpenAIProvider

        provider = OpenAIProvider("gpt-test", base_url=server.url + "/v1", api_key="test-key")
    return provider, server


def claude_env(server: ScenarioServer, tmp_path: Path) -> dict[str, str]:
    """The real claude CLI, offline: the loopback server as its API, an isolated HOME."""
    home = tmp_path / "claude-home"
    home.mkdir(exist_ok=True)
    return {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test-key",
            "HOME": str(home)}  # fmt: skip


@pytest.fixture(params=PROVIDERS)
def provider_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def harness_factory(provider_kind: str, tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Harness] = []

    def factory(scenario: dict[str, Any], store: Store | None = None, **kwargs: Any) -> Harness:
        provider, server = make_provider(provider_kind, scenario)
        backend: Any
        if provider is None:
            assert server is not None
            backend = ClaudeCodeBackend(env=claude_env(server, tmp_path))
        else:
            backend = ClawBackend(provider, retry_delay=0.01)
        session = Session(store or MemoryStore(), backend=backend, workdir=tmp_path,
                          poll_interval=kwargs.pop("poll_interval", 60), **kwargs)  # fmt: skip
        harness = Harness(provider_kind, session, provider, server)
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        await harness.session.close()
        if harness.server is not None:
            harness.server.stop()


@pytest.fixture
async def duckdb_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = open_duckdb_store(tmp_path / "runs.duckdb")
    yield store
    await store.close()
