"""The Provider protocol: one model turn, in a provider-neutral shape.

Conversations are lists of messages whose content is a list of blocks, in the
shape of the Anthropic Messages API (which maps cleanly onto the others)::

    {"role": "user", "content": [{"type": "text", "text": "..."}]}
    {"role": "assistant", "content": [{"type": "tool_use", "id": "...", "name": "...",
                                        "input": {...}}]}
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "...",
                                   "content": "...", "is_error": false}]}

They are plain JSON data, so a paused conversation goes into the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, Any]
Block = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ProviderRequest:
    """One turn: the system prompt, the conversation so far, the tools.

    ``node`` and ``visit`` say which node (and which of its runs) is asking,
    so a scripted scenario can answer for the right one.
    """

    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    node: str
    visit: int
    max_tokens: int = 4096
    #: Model turns the conversation held before this node took it over (an
    #: inherited or forked session): a scenario counts this node's turns after them.
    turn_base: int = 0


@dataclass(frozen=True)
class ProviderResponse:
    """The model's turn: text and tool calls, and what it cost."""

    content: list[Block]
    stop_reason: str = "end_turn"
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def tool_calls(self) -> list[Block]:
        """The ``tool_use`` blocks."""
        return [b for b in self.content if b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        """The text blocks joined."""
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")


class TransientProviderError(Exception):
    """A failure worth retrying (rate limit, overload, connection reset)."""


class Provider(Protocol):
    """Answers one turn of a conversation."""

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """The model's next turn; raise TransientProviderError to be retried."""
        ...
