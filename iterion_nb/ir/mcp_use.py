"""Which MCP servers each agent uses, once the whole workflow is read.

An agent uses the workflow's ``mcp:`` servers (unless its own ``mcp:`` says
``inherit: false``), its own ``mcp:`` servers, and the server of every
``mcp.SERVER.TOOL`` its ``tools:`` names, less what its ``disable:`` turns off
(upstream iterion's rules). Unknown servers are C025; a malformed dotted tool
name, or one of an undeclared server, C364 — unless the workflow's ``mcp:`` says
``autoload_project: true``: then a server may come from the working directory's
``.mcp.json``, which is read when the agent runs (and an unknown one fails it).
"""

from __future__ import annotations

from dataclasses import replace

from iterion_nb.dsl import ast
from iterion_nb.dsl.diagnostics import Diagnostics, did_you_mean
from iterion_nb.dsl.source import Span
from iterion_nb.ir import model as m
from iterion_nb.ir.build import Draft


def resolve_mcp(draft: Draft, diags: Diagnostics) -> None:
    """Check every server name, then give each agent its active servers."""
    for name in draft.mcp_spans:
        _known(draft, name, "the workflow's 'mcp:'", draft.mcp_spans[name], diags)
    for name, node in list(draft.nodes.items()):
        if isinstance(node, m.AgentNode):
            draft.nodes[name] = _resolved(draft, node, diags)


def _resolved(draft: Draft, node: m.AgentNode, diags: Diagnostics) -> m.AgentNode:
    for server in (*node.mcp, *node.mcp_disable):
        _known(draft, server, f"'{node.name}'", _value_span(draft, node, "mcp", server), diags)
    from_tools: list[str] = []
    for tool in node.tools:
        if "." not in tool:
            continue
        tools_span = _value_span(draft, node, "tools", tool)
        named = _tool_server(draft, node, tool, tools_span, diags)
        if named is None:
            continue
        server = named
        if server in node.mcp_disable:
            diags.add(
                "C364",
                f"'{node.name}' names '{tool}', but its 'mcp: disable' turns server '{server}' off",
                tools_span,
            )
        from_tools.append(server)
    inherited = draft.mcp_active if node.mcp_inherit else ()
    active = [
        s for s in dict.fromkeys((*inherited, *node.mcp, *from_tools))
        if s not in node.mcp_disable and (s in draft.mcp_servers or draft.mcp_autoload)
    ]  # fmt: skip
    return replace(node, mcp=tuple(active))


def _tool_server(
    draft: Draft, node: m.AgentNode, tool: str, span: Span, diags: Diagnostics
) -> str | None:
    """The server of ``mcp.SERVER.TOOL`` (or ``mcp.SERVER.*``); C364 for anything else."""
    parts = tool.split(".")
    if parts[0] + "." != m.MCP_TOOL_PREFIX or len(parts) != 3:
        diags.add(
            "C364",
            f"'{node.name}' names tool '{tool}': only an MCP server's tools have dotted names,"
            " written mcp.SERVER.TOOL (or mcp.SERVER.* for all of them)",
            span,
        )
        return None
    server = parts[1]
    missing = _undeclared(draft, server)
    if missing is not None:
        diags.add("C364", f"'{node.name}' names tool '{tool}' of {missing}", span)
        return None
    return server


def _known(draft: Draft, server: str, who: str, span: Span, diags: Diagnostics) -> None:
    missing = _undeclared(draft, server)
    if missing is not None:
        diags.add("C025", f"{who} uses {missing}", span)


def _undeclared(draft: Draft, server: str) -> str | None:
    """How a diagnostic names a server nothing declares; None if it is (or may be) declared.

    With ``autoload_project: true`` any name may be a server of ``.mcp.json``.
    """
    if server in draft.mcp_servers or draft.mcp_autoload:
        return None
    known = ", ".join(draft.mcp_servers) or "none"
    return (
        f"MCP server '{server}', which is not declared"
        f"{did_you_mean(server, draft.mcp_servers)} (declared: {known})"
    )


def _value_span(draft: Draft, node: m.AgentNode, name: str, item: str) -> Span:
    """Where ``item`` is written in the node's property ``name`` (at worst, the node)."""
    decl = draft.node_decls.get(node.name)
    if not isinstance(decl, ast.NodeDecl):
        return node.span
    for prop in decl.properties:
        if prop.name != name:
            continue
        values = [prop.value]
        if isinstance(prop.value, ast.BlockValue):  # mcp: servers: / disable:
            values = [e.value for e in prop.value.entries]
        for value in values:
            items = value.items if isinstance(value, ast.ListValue) else (value,)
            for entry in items:
                if getattr(entry, "name", getattr(entry, "text", None)) == item:
                    return entry.span
        return prop.value.span
    return node.span
