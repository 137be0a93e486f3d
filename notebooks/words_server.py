"""The MCP server 03_pause_and_resume.ipynb gives its agent: words in capitals.

A real Model Context Protocol server (the official ``mcp`` SDK), over stdio;
``--http PORT`` serves it over streamable HTTP instead.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("words")


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"refused: {reason}")  # its message reaches the client


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == "--http":  # words.py --http PORT
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
