"""The Provider protocol: one model turn, in a provider-neutral shape.

Conversations are lists of messages whose content is a list of blocks, in the
shape of the Anthropic Messages API (which maps cleanly onto the others)::

    {"role": "user", "content": [{"type": "text", "text": "..."}]}
    {"role": "assistant", "content": [{"type": "tool_use", "id": "...", "name": "...",
                                        "input": {...}}]}
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "...",
                                   "content": "...", "is_error": false}]}

They are plain JSON data, so a paused conversation goes into the checkpoint.
An image the user prompt shows (an ``image`` attachment) is a block that names
its file, ``{"type": "image", "path": "...", "media_type": "image/png"}``; a
provider reads the bytes when it sends the turn (:func:`image_data`), so
checkpoints and events stay small.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

Message = dict[str, Any]
Block = dict[str, Any]


#: The largest image sent inline (the Messages API's limit for one image).
MAX_IMAGE_BYTES = 5 * 1024 * 1024


def image_data(block: Block) -> tuple[str, str] | str:
    """An image block's ``(media_type, base64 bytes)``, or a text that says why not.

    (A file gone or over :data:`MAX_IMAGE_BYTES` reaches the model as that text.)
    """
    path = Path(str(block.get("path", "")))
    try:
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            return f"[image {path} not sent: {size / 2**20:.1f} MB, over the 5 MB limit]"
        data = path.read_bytes()
    except OSError as err:
        return f"[image {path} could not be read: {err.strerror or err}]"
    return str(block.get("media_type") or "image/png"), base64.b64encode(data).decode()


def inline_images(messages: list[Message]) -> list[Message]:
    """The conversation with image blocks as the Messages API takes them (base64)."""
    if not any(b.get("type") == "image" for m in messages for b in _blocks(m)):
        return messages
    out: list[Message] = []
    for message in messages:
        blocks = []
        for block in _blocks(message):
            if block.get("type") == "image" and "path" in block:
                found = image_data(block)
                blocks.append(
                    {"type": "text", "text": found} if isinstance(found, str) else {
                        "type": "image",
                        "source": {"type": "base64", "media_type": found[0], "data": found[1]},
                    }
                )  # fmt: skip
            else:
                blocks.append(block)
        out.append({**message, "content": blocks})
    return out


def _blocks(message: Message) -> list[Block]:
    content = message.get("content")
    return content if isinstance(content, list) else []


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
    #: The node's ``reasoning_effort`` (``minimal`` … ``max``), or None. Recorded with the
    #: turn, and sent in each API's words (see docs/language.md).
    reasoning_effort: str | None = None


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


#: How a repair turn (a final answer that does not fit the output schema) begins and ends.
_REPAIR_HEAD = "Your final answer does not match the required output: "
_REPAIR_TAIL = ". Reply with only the corrected JSON object."


def repair_prompt(problems: list[str]) -> str:
    """The user turn that asks the model to correct a final answer its schema refused."""
    return _REPAIR_HEAD + "; ".join(problems) + _REPAIR_TAIL


def repair_reason(message: Message) -> str | None:
    """Why the answer before ``message`` was refused, if ``message`` is a repair turn.

    (A scripted model reads it back to say why a node wanted one more turn.)
    """
    if message.get("role") != "user":
        return None
    content = message.get("content")
    blocks = [{"text": content}] if isinstance(content, str) else _blocks(message)
    for block in blocks:
        text = block.get("text")
        if isinstance(text, str) and _REPAIR_HEAD in text:
            said = text[text.index(_REPAIR_HEAD) + len(_REPAIR_HEAD) :]
            return said.split(_REPAIR_TAIL, 1)[0]
    return None


class TransientProviderError(Exception):
    """A failure worth retrying (rate limit, overload, connection reset)."""


class MissingKeyError(Exception):
    """A real model's API with no key to call it: said before any request, naming what to set."""


def require_key(model: str, given: str | None, variables: tuple[str, ...]) -> None:
    """Refuse a provider with no API key, given or in one of ``variables``.

    The SDKs' own words name neither the model nor where the run executes
    ("Could not resolve authentication method …"); this names both.

    Raises:
        MissingKeyError: Neither a key nor any of ``variables`` is set.
    """
    if given or any(os.environ.get(v) for v in variables):
        return
    names = " or ".join(variables)
    raise MissingKeyError(
        f"model '{model}' needs an API key and none is set: set {names} in the environment"
        " of the process that executes the run (this one, or the cluster's workers), then"
        " resume the run"
    )


class Provider(Protocol):
    """Answers one turn of a conversation."""

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """The model's next turn; raise TransientProviderError to be retried."""
        ...
