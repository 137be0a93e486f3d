"""``openai/<model>``: the official ``openai`` SDK, Chat Completions with tools.

``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` are read by the SDK as usual. Our
conversation (Anthropic-shaped blocks) is translated both ways.
"""

from __future__ import annotations

import json
from typing import Any

from iterion_nb.backends.providers.base import (
    Message,
    ProviderRequest,
    ProviderResponse,
    TransientProviderError,
    image_data,
    require_key,
)


def to_openai(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Our conversation as Chat Completions messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
        if message["role"] == "assistant":
            calls = [
                {"id": b["id"], "type": "function",
                 "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
                for b in message["content"] if b.get("type") == "tool_use"
            ]  # fmt: skip
            entry: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        for block in message["content"]:
            if block.get("type") == "tool_result":
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": str(block.get("content", ""))})  # fmt: skip
        images = [b for b in message["content"] if b.get("type") == "image"]
        if images:
            out.append({"role": "user", "content": _parts(message["content"])})
        elif texts:
            out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _parts(blocks: list[Any]) -> list[dict[str, Any]]:
    """A user message that shows images: text and ``image_url`` parts (data URLs), in order."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "text":
            parts.append({"type": "text", "text": block["text"]})
        elif block.get("type") == "image":
            found = image_data(block)
            if isinstance(found, str):
                parts.append({"type": "text", "text": found})
            else:
                url = f"data:{found[0]};base64,{found[1]}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


class OpenAIProvider:
    """Turns through the OpenAI Chat Completions API."""

    def __init__(
        self, model: str, *, base_url: str | None = None, api_key: str | None = None,
        client: Any = None,
    ) -> None:  # fmt: skip
        import openai

        if client is None:
            require_key(f"openai/{model}", api_key, ("OPENAI_API_KEY",))
        self.model = model
        self._openai = openai
        self.client = client or openai.AsyncOpenAI(base_url=base_url, api_key=api_key,
                                                   max_retries=0)  # fmt: skip

    async def close(self) -> None:
        """Close the SDK client's connections."""
        await self.client.close()

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """One Chat Completions call; transient failures are marked for retry."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai(request.system, request.messages),
            "max_tokens": request.max_tokens,
            "extra_headers": {"x-iterion-node": request.node,
                              "x-iterion-visit": str(request.visit),
                              "x-iterion-turn-base": str(request.turn_base)},
        }  # fmt: skip
        if request.reasoning_effort is not None:  # every level is one of the API's
            kwargs["extra_body"] = {"reasoning_effort": request.reasoning_effort}
        if request.tools:
            kwargs["tools"] = [
                {"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.input_schema}}
                for t in request.tools
            ]  # fmt: skip
        errors = self._openai
        try:
            completion = await self.client.chat.completions.create(**kwargs)
        except (
            errors.RateLimitError,
            errors.APIConnectionError,
            errors.InternalServerError,
        ) as err:
            raise TransientProviderError(str(err)) from err
        choice = completion.choices[0].message
        content: list[dict[str, Any]] = []
        if choice.content:
            content.append({"type": "text", "text": choice.content})
        for call in choice.tool_calls or []:
            content.append({"type": "tool_use", "id": call.id, "name": call.function.name,
                            "input": json.loads(call.function.arguments or "{}")})  # fmt: skip
        usage = completion.usage
        return ProviderResponse(
            content=content,
            stop_reason="tool_use" if choice.tool_calls else "end_turn",
            tokens_in=usage.prompt_tokens if usage else 0,
            tokens_out=usage.completion_tokens if usage else 0,
        )
