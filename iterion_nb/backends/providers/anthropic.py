"""``anthropic/<model>``: the official ``anthropic`` SDK (install the ``anthropic`` extra).

``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` are read by the SDK as usual.
Each request carries ``x-iterion-node`` and ``x-iterion-visit`` headers,
which a real API ignores and the loopback test server uses to pick the
scenario's answer.
"""

from __future__ import annotations

from typing import Any

from iterion_nb.backends.providers.base import (
    ProviderRequest,
    ProviderResponse,
    TransientProviderError,
    inline_images,
    require_key,
)

#: Where the SDK finds its credentials when none is given.
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
#: USD per million input / output tokens, for the cost budget (0 when unknown).
PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-haiku-4": (1.0, 5.0),
}


def price_of(model: str, tokens_in: int, tokens_out: int) -> float:
    """The cost of a turn, by the longest matching price prefix."""
    for prefix in sorted(PRICES, key=len, reverse=True):
        if model.startswith(prefix):
            per_in, per_out = PRICES[prefix]
            return (tokens_in * per_in + tokens_out * per_out) / 1_000_000
    return 0.0


class AnthropicProvider:
    """Turns through the Anthropic Messages API, streaming or not."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
        client: Any = None,
    ) -> None:
        import anthropic

        if client is None:
            require_key(
                f"anthropic/{model}", api_key, ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
            )
        self.model = model
        self.stream = stream
        self._anthropic = anthropic
        self.client = client or anthropic.AsyncAnthropic(
            base_url=base_url, api_key=api_key, max_retries=0
        )

    async def close(self) -> None:
        """Close the SDK client's connections."""
        await self.client.close()

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """One Messages API call; transient failures are marked for retry."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": inline_images(request.messages),
            "extra_headers": {"x-iterion-node": request.node,
                              "x-iterion-visit": str(request.visit),
                              "x-iterion-turn-base": str(request.turn_base)},
        }  # fmt: skip
        if request.system:
            kwargs["system"] = request.system
        if request.reasoning_effort is not None:  # the Messages API has no "minimal": low
            effort = "low" if request.reasoning_effort == "minimal" else request.reasoning_effort
            kwargs["extra_body"] = {"output_config": {"effort": effort}}  # any SDK version
        if request.tools:
            kwargs["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        errors = self._anthropic
        try:
            if self.stream:
                async with self.client.messages.stream(**kwargs) as stream:
                    message = await stream.get_final_message()
            else:
                message = await self.client.messages.create(**kwargs)
        except (
            errors.RateLimitError,
            errors.APIConnectionError,
            errors.InternalServerError,
        ) as err:
            raise TransientProviderError(str(err)) from err
        except errors.APIStatusError as err:
            if err.status_code in (408, 409, 429, 529) or err.status_code >= 500:
                raise TransientProviderError(str(err)) from err
            raise
        content = [_block(b) for b in message.content]
        tokens_in, tokens_out = message.usage.input_tokens, message.usage.output_tokens
        return ProviderResponse(
            content=[b for b in content if b is not None],
            stop_reason=message.stop_reason or "end_turn",
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=price_of(self.model, tokens_in, tokens_out),
        )


def _block(block: Any) -> dict[str, Any] | None:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return None
