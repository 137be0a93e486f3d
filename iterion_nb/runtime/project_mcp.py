"""A project's own MCP servers: the working directory's ``.mcp.json``.

A workflow whose ``mcp:`` says ``autoload_project: true`` gives its agents the
servers of this file too, as upstream iterion does. It is the file Claude Code
reads::

    {"mcpServers": {
        "words": {"command": "python3", "args": ["tools/words.py"]},
        "search": {"type": "http", "url": "http://127.0.0.1:8000/mcp"}}}

It is read when an agent runs, so an edit applies to the next agent. A server
the workflow declares wins over one of the same name here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from iterion_nb.dsl.source import Span
from iterion_nb.ir import model as m

#: The file's name, in the run's working directory.
PROJECT_FILE = ".mcp.json"
#: The most of it read: a project's server list, not a data file.
MAX_BYTES = 1_000_000
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HTTP = ("http", "streamable-http", "streamable_http", "streamablehttp")
_NOWHERE = Span.point(1, 1)


class ProjectMcpError(ValueError):
    """The project's ``.mcp.json`` cannot be used; the message names the file and the problem."""


def project_servers(workdir: Path) -> dict[str, m.McpServer]:
    """The servers of ``workdir/.mcp.json`` by name (none when there is no such file).

    Raises:
        ProjectMcpError: It cannot be read, is not JSON, or describes a server badly.
    """
    path = workdir / PROJECT_FILE
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise ProjectMcpError(f"cannot read {path}: {err.strerror or err}") from None
    if len(raw) > MAX_BYTES:
        raise ProjectMcpError(f"{path}: larger than {MAX_BYTES:,} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProjectMcpError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ProjectMcpError(f"{path}:{err.lineno}:{err.colno}: not JSON: {err.msg}") from None
    found = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(found, dict):
        raise ProjectMcpError(f"{path}: 'mcpServers' must be an object of servers by name")
    return {name: _server(path, name, spec) for name, spec in found.items()}


def _server(path: Path, name: str, spec: Any) -> m.McpServer:
    where = f"{path}: server '{name}'"
    if not _NAME.fullmatch(name):
        raise ProjectMcpError(f"{where}: a name is letters, digits, '_' and '-' (64 at most)")
    if not isinstance(spec, dict):
        raise ProjectMcpError(f"{where}: must be an object")
    kind = spec.get("type", spec.get("transport"))
    if kind is None:
        kind = "http" if "url" in spec and "command" not in spec else "stdio"
    if kind in _HTTP:
        url = spec.get("url")
        if not isinstance(url, str) or not url:
            raise ProjectMcpError(f"{where}: an http server needs a 'url' string")
        return m.McpServer(name, _NOWHERE, transport="http", url=url)
    if kind != "stdio":
        raise ProjectMcpError(f"{where}: transport '{kind}' is not supported here (stdio or http)")
    command, args = spec.get("command"), spec.get("args", [])
    if not isinstance(command, str) or not command:
        raise ProjectMcpError(f"{where}: a stdio server needs a 'command' string")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ProjectMcpError(f"{where}: 'args' must be a list of strings")
    return m.McpServer(name, _NOWHERE, command=command, args=tuple(args))


def agent_servers(wf: m.Workflow, node: m.AgentNode, workdir: Path) -> tuple[m.McpServer, ...]:
    """The MCP servers ``node`` uses: its compiled ones, plus the project's when autoloaded.

    Raises:
        ProjectMcpError: The project's file is unusable, or a server the node names
            is neither declared nor in it.
    """
    if not wf.mcp_autoload:
        return tuple(wf.mcp_servers[name] for name in node.mcp)
    project = project_servers(workdir)
    names = list(node.mcp)
    if node.mcp_inherit:  # the project's servers are the workflow's, as upstream
        off = {*wf.mcp_disable, *node.mcp_disable}
        names += [name for name in sorted(project) if name not in off]
    servers = []
    for name in dict.fromkeys(names):
        server = wf.mcp_servers.get(name) or project.get(name)
        if server is None:
            known = ", ".join(sorted({*wf.mcp_servers, *project})) or "none"
            raise ProjectMcpError(
                f"MCP server '{name}' is neither declared nor in {workdir / PROJECT_FILE}"
                f" (known: {known})"
            )
        servers.append(server)
    return tuple(servers)
