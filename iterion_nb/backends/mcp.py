"""MCP servers for the in-process loop: their tools, as the model's, for one node call.

A node's ``mcp: [files]`` connects (for the duration of the call) to each
named ``mcp_server`` with the official ``mcp`` SDK — a ``stdio`` server is
started as a child process in the run's working directory, an ``http`` one
reached at its URL — lists its tools and offers each to the model as
``<server>__<tool>`` (Claude Code names the same tool ``mcp__<server>__<tool>``;
a scenario may use either). A call goes to the server; its text content is the
result, an error result a tool error.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from iterion_nb.backends.providers.base import ToolSpec
from iterion_nb.backends.tools import ToolContext, ToolError
from iterion_nb.errors import NodeError, VarsError
from iterion_nb.ir import model as m
from iterion_nb.runtime.values import expand_env

#: Between a server's name and its tool's, in the name the model sees.
SEPARATOR = "__"


class McpTool:
    """One tool of an MCP server, shaped like :class:`~iterion_nb.backends.tools.Tool`."""

    def __init__(self, server: str, client: Any, tool: Any) -> None:
        self.server = server
        self.client = client
        self.tool_name = str(tool.name)
        self.name = f"{server}{SEPARATOR}{self.tool_name}"
        self.description = str(tool.description or f"{self.tool_name} (MCP server {server})")
        schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)
        self.schema: dict[str, Any] = dict(schema or {"type": "object", "properties": {}})

    @property
    def spec(self) -> ToolSpec:
        """How the model sees it."""
        return ToolSpec(self.name, self.description, self.schema)

    def input_problem(self, arguments: Any) -> str | None:
        """The server checks its own arguments (and says what is wrong in its result)."""
        if arguments is not None and not isinstance(arguments, dict):
            return f"{self.name} takes an object of arguments"
        return None

    async def run(self, arguments: Any, context: ToolContext) -> str:
        """Call the tool on its server; an error result is a :class:`ToolError`."""
        result = await self.client.call_tool(self.tool_name, dict(arguments or {}))
        texts = [str(c.text) for c in result.content if getattr(c, "type", "") == "text"]
        text = "\n".join(texts)
        if getattr(result, "is_error", False) or getattr(result, "isError", False):
            raise ToolError(text or f"{self.name} failed")
        return text


class McpConnections:
    """The MCP servers of one node call, connected while the call runs."""

    def __init__(
        self, node: str, servers: tuple[m.McpServer, ...], workdir: str,
        named: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        self.node = node
        self.servers = servers
        #: The node's ``tools:``: its ``mcp.SERVER.TOOL`` entries choose among a server's tools.
        self.named = named
        self.workdir = workdir
        self.tools: dict[str, McpTool] = {}
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> McpConnections:
        if not self.servers:
            return self
        try:
            import mcp
            from mcp.client.stdio import StdioServerParameters, stdio_client
        except ImportError:
            raise NodeError(
                self.node,
                "MCP servers need the mcp package: pip install 'iterion-nb[mcp]'",
            ) from None

        await self._stack.__aenter__()
        for server in self.servers:
            target: Any
            try:
                server = expanded(server)
            except VarsError as err:
                await self._stack.aclose()
                raise NodeError(self.node, f"MCP server '{server.name}': {err}") from None
            # the server's stderr: a real file (a kernel's sys.stderr has no descriptor),
            # whose end is quoted when the server fails
            errlog = self._stack.enter_context(
                tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            )
            if server.transport == "stdio":
                params = StdioServerParameters(
                    command=server.command or "", args=list(server.args),
                    cwd=str(Path(self.workdir).resolve()),
                )  # fmt: skip
                target = stdio_client(params, errlog=errlog)
            else:
                target = server.url or ""
            try:
                client = await self._stack.enter_async_context(mcp.Client(target))
                listed = await client.list_tools()
            except Exception as err:  # a server that does not start or answer
                errlog.seek(0)
                said = " | ".join(line.strip() for line in errlog.read().splitlines()[-3:])
                await self._stack.aclose()
                raise NodeError(
                    self.node,
                    f"MCP server '{server.name}' ({server.transport}) failed: {err}"
                    + (f" (stderr: {said})" if said else ""),
                ) from None
            await self._offer(server.name, client, listed.tools)
        return self

    async def _offer(self, server: str, client: Any, tools: list[Any]) -> None:
        """The server's tools the node chose (all of them unless ``tools:`` names some)."""
        chosen = m.mcp_tool_choice(self.named, server)
        have = {str(tool.name) for tool in tools}
        missing = sorted(chosen - have) if chosen is not None else []
        if missing:
            await self._stack.aclose()
            raise NodeError(
                self.node,
                f"MCP server '{server}' has no tool {', '.join(map(repr, missing))}"
                f" (it has: {', '.join(sorted(have)) or 'none'})",
            )
        for tool in tools:
            if chosen is None or str(tool.name) in chosen:
                wrapped = McpTool(server, client, tool)
                self.tools[wrapped.name] = wrapped

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(Exception):
            await self._stack.aclose()


def expanded(server: m.McpServer) -> m.McpServer:
    """The server with ``${NAME}`` / ``${NAME:-default}`` read from the environment.

    Raises:
        VarsError: A variable that is not set and has no default.
    """
    return replace(
        server,
        command=None if server.command is None else expand_env(server.command),
        args=tuple(expand_env(a) for a in server.args),
        url=None if server.url is None else expand_env(server.url),
    )


def cli_allowed(
    servers: tuple[m.McpServer, ...], named: tuple[str, ...],
    policy: tuple[str, ...] | None = None,
) -> list[str]:  # fmt: skip
    """Claude Code's ``allowed_tools`` for the servers: all of a server's, or those named.

    Less what ``tool_policy`` refuses: a server whose every tool it allows stays
    whole, else only the tools it names (``mcp.SERVER.TOOL``) are allowed.
    """
    allowed: list[str] = []
    for server in servers:
        prefix = f"{m.MCP_TOOL_PREFIX}{server.name}."
        chosen = m.mcp_tool_choice(named, server.name)
        if chosen is None and not _allows_all(policy, prefix):
            chosen = frozenset(p.removeprefix(prefix) for p in policy or () if
                               p.startswith(prefix) and not p.endswith("*"))  # fmt: skip
        if chosen is None:
            allowed.append(f"mcp__{server.name}")
            continue
        allowed += [f"mcp__{server.name}__{tool}" for tool in sorted(chosen)
                    if m.tool_allowed(policy, prefix + tool)]  # fmt: skip
    return allowed


def _allows_all(policy: tuple[str, ...] | None, prefix: str) -> bool:
    """Whether ``policy`` allows every tool whose name starts with ``prefix``."""
    if policy is None:
        return True
    return any(p == "*" or (p.endswith(".*") and prefix.startswith(p[:-1])) for p in policy)


def cli_servers(servers: tuple[m.McpServer, ...]) -> dict[str, dict[str, Any]]:
    """The servers as Claude Code's ``mcp_servers`` option takes them (environment read)."""
    out: dict[str, dict[str, Any]] = {}
    for server in map(expanded, servers):
        if server.transport == "stdio":
            out[server.name] = {"type": "stdio", "command": server.command,
                                "args": list(server.args)}  # fmt: skip
        else:
            out[server.name] = {"type": "http", "url": server.url}
    return out
