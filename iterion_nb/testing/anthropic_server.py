"""A loopback HTTP server that answers like a model API, from a scenario.

It speaks the Anthropic Messages API (``POST /v1/messages``, streaming and
not) and OpenAI Chat Completions (``POST /v1/chat/completions``), so the real
``anthropic`` and ``openai`` SDKs — and the ``claude`` CLI — run offline
against it. Each answer comes from the same scenario the scripted provider
uses: the node is named by the ``x-iterion-node`` header (or an ``[iterion
node: NAME]`` line in the system prompt), the turn is the number of assistant
messages in the request.

::

    with ScenarioServer(scenario) as server:
        provider = AnthropicProvider("claude-test", base_url=server.url, api_key="test")

Only for tests and offline demos: it binds 127.0.0.1 on an ephemeral port.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from iterion_nb.backends.providers.base import ProviderRequest, ProviderResponse
from iterion_nb.backends.providers.scripted import (
    FailureBudget,
    ScenarioError,
    load_scenario,
    response_for,
    turn_of,
)

_NODE_LINE = re.compile(r"\[iterion node: ([A-Za-z0-9_\-]+)\]")


class _Overloaded(Exception):  # noqa: N818 - answered as HTTP 529
    pass


class ScenarioServer:
    """Serves a scenario over HTTP on 127.0.0.1. Use as a context manager."""

    def __init__(self, scenario: Mapping[str, Any] | str | Path) -> None:
        self.scenario = load_scenario(scenario)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._failures = FailureBudget()
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL to give an SDK (``http://127.0.0.1:PORT``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ScenarioServer:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScenarioServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def answer(
        self, body: dict[str, Any], headers: Mapping[str, str], raw: dict[str, Any] | None = None
    ) -> ProviderResponse:
        """The scenario's turn for a request body (``raw``: the body as received)."""
        system = body.get("system") or ""
        if isinstance(system, list):
            system = "".join(b.get("text", "") for b in system)
        node = headers.get("x-iterion-node")
        if not node:
            found = _NODE_LINE.search(system)
            node = found.group(1) if found else "default"
        visit = int(headers.get("x-iterion-visit") or 0)
        base = int(headers.get("x-iterion-turn-base") or 0)
        with self._lock:
            self.requests.append({"node": node, "visit": visit, "body": raw or body})
        request = ProviderRequest(
            model=str(body.get("model", "")), system=system,
            messages=list(body.get("messages", [])), tools=[], node=node, visit=visit,
            turn_base=base,
        )  # fmt: skip
        index, turn = turn_of(self.scenario, request)
        if turn.get("delay"):
            time.sleep(float(turn["delay"]))
        with self._lock:
            if self._failures.should_fail(node, visit, index, turn):
                raise _Overloaded
        reply = response_for(turn, node, visit, index)
        offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        for block in reply.content:
            # a client that serves tools over MCP (the claude CLI) offers ours as
            # mcp__<server>__<name>: a scenario names them plainly, for every backend
            if block.get("type") == "tool_use" and block["name"] not in offered:
                served = sorted(n for n in offered if n and n.endswith("__" + block["name"]))
                if served:
                    block["name"] = served[0]
        return reply


class _Handler(BaseHTTPRequestHandler):
    server_state: ScenarioServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._error(400, "invalid_request_error", "body is not JSON")
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path.split("?")[0]
        if path.endswith("/v1/messages"):
            self._messages(body, headers)
        elif path.endswith("/chat/completions"):
            self._chat(body, headers)
        else:
            self._error(404, "not_found_error", f"no route {path}")

    # -- Anthropic -------------------------------------------------------------
    def _messages(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        try:
            reply = self.server_state.answer(body, headers)
        except ScenarioError as err:
            self._error(400, "invalid_request_error", str(err))
            return
        except _Overloaded:
            self._error(529, "overloaded_error", "Overloaded")
            return
        message = {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": reply.content,
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": reply.tokens_in, "output_tokens": reply.tokens_out},
        }
        if body.get("stream"):
            self._stream(message)
        else:
            self._json(200, message)

    def _stream(self, message: dict[str, Any]) -> None:
        events: list[tuple[str, dict[str, Any]]] = []
        usage = {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0}
        start = {**message, "content": [], "stop_reason": None, "usage": usage}
        events.append(("message_start", {"type": "message_start", "message": start}))
        for index, block in enumerate(message["content"]):
            opening: dict[str, Any]
            if block["type"] == "text":
                opening = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                opening = {"type": "tool_use", "id": block["id"], "name": block["name"],
                           "input": {}}  # fmt: skip
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": opening}),
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
        events.append(("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        }))  # fmt: skip
        events.append(("message_stop", {"type": "message_stop"}))
        payload = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        raw = payload.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    # -- OpenAI ----------------------------------------------------------------
    def _chat(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        converted = _from_openai(body)
        try:
            reply = self.server_state.answer(converted, headers, raw=body)
        except ScenarioError as err:
            self._json(400, {"error": {"message": str(err), "type": "invalid_request_error"}})
            return
        except _Overloaded:
            self._json(503, {"error": {"message": "Overloaded", "type": "server_error"}})
            return
        calls = [
            {"id": b["id"], "type": "function",
             "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
            for b in reply.tool_calls
        ]  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = calls
        self._json(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:20]}", "object": "chat.completion",
            "created": 0, "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": reply.tokens_in, "completion_tokens": reply.tokens_out,
                      "total_tokens": reply.tokens_in + reply.tokens_out},
        })  # fmt: skip

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def _from_openai(body: dict[str, Any]) -> dict[str, Any]:
    """Enough of a Chat Completions body, seen as Messages: system and assistant turns."""
    system = "".join(
        str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "system"
    )
    messages = [
        {"role": m["role"], "content": m.get("content")}
        for m in body.get("messages", [])
        if m.get("role") in ("user", "assistant")
    ]
    return {"model": body.get("model"), "system": system, "messages": messages}
