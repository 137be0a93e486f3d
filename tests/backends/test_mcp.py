"""MCP servers (issue 20 item 5): agents call their tools, on every provider and the claude CLI.

The server is notebooks/words_server.py, a real MCP server over stdio,
started by the node's backend (the in-process loop through the official
``mcp`` SDK; Claude Code by itself). A scenario names its tools
``words__shout``; the claude CLI offers them as ``mcp__words__shout``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.ir import analyze

from .conftest import Harness

#: The tour's MCP server (notebooks/03 gives it to its agent): one server for both.
SERVER = Path(__file__).resolve().parents[2] / "notebooks" / "words_server.py"

FLOW = f"""\
mcp_server words:
  command: "{sys.executable}"
  args: ["{SERVER}"]

agent writer:
  model: "scripted"
  mcp: [words]
  user: "Shout hello."

workflow w:
  entry: writer
  writer -> done
"""


async def test_an_agent_calls_a_tool_of_an_mcp_server(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{"name": "words__shout", "input": {"text": "hello"}}]},
        {"text": "I shouted."},
    ]}})  # fmt: skip
    run = await h.start(FLOW)
    assert await run.wait(60) == "finished", run.error
    assert "HELLO" in h.last_user_text("writer", 1)  # the server's answer, read by the model
    called = [e.data["tool"] for e in await run.events() if e.type == "tool_called"]
    assert "words__shout" in called


async def test_an_mcp_tool_error_comes_back_to_the_model(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{"name": "words__refuse", "input": {"reason": "too loud"}}]},
        {"text": "It refused."},
    ]}})  # fmt: skip
    run = await h.start(FLOW)
    assert await run.wait(60) == "finished", run.error
    assert "refused: too loud" in h.last_user_text("writer", 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("  mcp: [words]", "  mcp: [wrods]"),
         "'writer' uses MCP server 'wrods', which is not declared; did you mean 'words'?"),
        ((f'  command: "{sys.executable}"\n', ""), "MCP server 'words' (stdio) needs 'command:'"),
        (("mcp_server words:\n", "mcp_server words:\n  transport: http\n"),
         "MCP server 'words' (http) needs 'url:'"),
    ],
)  # fmt: skip
def test_mcp_mistakes_are_named(change: tuple[str, str], message: str) -> None:
    source = FLOW.replace(*change)
    found = [d.message for d in analyze(source, "w.iter").diagnostics]
    assert any(message in m for m in found), found


async def test_a_server_that_does_not_start_fails_the_node_clearly(tmp_path: Path) -> None:
    from iterion_nb.session import Session
    from iterion_nb.store import MemoryStore

    broken = FLOW.replace(str(SERVER), str(tmp_path / "missing.py"))
    session = Session(MemoryStore(), scenario={"nodes": {"writer": [{"text": "x"}]}})
    try:
        run = await session.start(it.compile(broken))
        assert await run.wait(60) == "failed_resumable"
        assert run.error is not None and "MCP server 'words' (stdio) failed" in run.error
    finally:
        await session.close()


@pytest.fixture
def http_server() -> Iterator[str]:
    """The words server over streamable HTTP on a free loopback port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(300):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_an_mcp_server_over_http(harness_factory: Any, http_server: str) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        {"tool_calls": [{"name": "words__shout", "input": {"text": "over http"}}]},
        {"text": "Done."},
    ]}})  # fmt: skip
    source = FLOW.replace(
        f'  command: "{sys.executable}"\n  args: ["{SERVER}"]\n',
        f'  transport: http\n  url: "{http_server}"\n',
    )
    assert source != FLOW
    run = await h.start(source)
    assert await run.wait(60) == "finished", run.error
    assert "OVER HTTP" in h.last_user_text("writer", 1)


# -- upstream's forms: the workflow's mcp:, inherit / disable, tools: [mcp.SERVER.TOOL] ---------
WORKFLOW_MCP = f"""\
mcp_server words:
  command: "{sys.executable}"
  args: ["{SERVER}"]

agent writer:
  model: "scripted"
  tools: [mcp.words.shout]
  user: "Shout hello."

agent quiet:
  model: "scripted"
  mcp:
    inherit: false
  user: "Say nothing."

workflow w:
  mcp:
    servers: [words]
  entry: writer
  writer -> quiet
  quiet -> done
"""


async def test_tools_named_mcp_server_tool_are_the_only_ones_offered(harness_factory: Any) -> None:
    """The workflow's server reaches the agent; ``tools:`` keeps shout, so refuse never runs."""
    h: Harness = harness_factory({"nodes": {
        "writer": [
            {"tool_calls": [{"name": "words__shout", "input": {"text": "hello"}}]},
            {"tool_calls": [{"name": "words__refuse", "input": {"reason": "too loud"}}]},
            {"text": "Done."},
        ],
        "quiet": [
            {"tool_calls": [{"name": "words__shout", "input": {"text": "psst"}}]},
            {"text": "Quiet."},
        ],
    }})  # fmt: skip
    run = await h.start(WORKFLOW_MCP)
    assert await run.wait(90) == "finished", run.error
    assert "HELLO" in h.last_user_text("writer", 1)
    assert "refused: too loud" not in h.last_user_text("writer", 2)  # not offered: not run
    assert "PSST" not in h.last_user_text("quiet", 1)  # inherit: false: no server at all


def test_the_workflows_mcp_servers_reach_every_agent_unless_it_opts_out() -> None:
    flow = it.compile(WORKFLOW_MCP)
    writer, quiet = flow.nodes["writer"], flow.nodes["quiet"]
    assert getattr(writer, "mcp", None) == ("words",)
    assert getattr(quiet, "mcp", None) == ()
    disabled = it.compile(
        WORKFLOW_MCP.replace("    inherit: false", "    disable: [words]")
        .replace("  tools: [mcp.words.shout]\n", "")
    )  # fmt: skip
    assert getattr(disabled.nodes["writer"], "mcp", None) == ("words",)
    assert getattr(disabled.nodes["quiet"], "mcp", None) == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("[mcp.words.shout]", "[mcp.wrods.shout]"),
         "names tool 'mcp.wrods.shout' of MCP server 'wrods', which is not declared;"
         " did you mean 'words'?"),
        (("[mcp.words.shout]", "[words.shout]"),
         "only an MCP server's tools have dotted names, written mcp.SERVER.TOOL"),
        (("    servers: [words]", "    servers: [wordz]"),
         "the workflow's 'mcp:' uses MCP server 'wordz', which is not declared"),
        (("    inherit: false", "    disable: [words]\n  tools: [mcp.words.shout]"),
         "'quiet' names 'mcp.words.shout', but its 'mcp: disable' turns server 'words' off"),
    ],
)  # fmt: skip
def test_mcp_tool_name_mistakes_are_named(change: tuple[str, str], message: str) -> None:
    source = WORKFLOW_MCP.replace(*change)
    assert source != WORKFLOW_MCP
    found = [d.message for d in analyze(source, "w.iter").diagnostics]
    assert any(message in m for m in found), found


async def test_a_named_tool_the_server_lacks_fails_the_node_clearly() -> None:
    from iterion_nb.session import Session
    from iterion_nb.store import MemoryStore

    source = WORKFLOW_MCP.replace("[mcp.words.shout]", "[mcp.words.whisper]")
    session = Session(MemoryStore(), scenario={"nodes": {"writer": [{"text": "x"}]}})
    try:
        run = await session.start(it.compile(source))
        assert await run.wait(60) == "failed_resumable"
        assert run.error is not None
        assert "MCP server 'words' has no tool 'whisper' (it has: refuse, shout)" in run.error
    finally:
        await session.close()
