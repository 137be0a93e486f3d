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
from iterion_nb.ir import model as m

from .conftest import Harness

#: The tour's MCP server (notebooks/03 gives it to its agent): one server for both.
SERVER = Path(__file__).resolve().parents[2] / "notebooks" / "words_server.py"

#: Its declaration, shared with test_tool_policy.py.
WORDS_SERVER = f"""\
mcp_server words:
  command: "{sys.executable}"
  args: ["{SERVER}"]
"""

FLOW = f"""\
{WORDS_SERVER}
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
{WORDS_SERVER}
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


def shouting(server: str, refuse: bool = False) -> dict[str, Any]:
    """writer calls SERVER's shout (then refuse, if asked); quiet tries shout too."""

    def call(tool: str, **given: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": f"{server}__{tool}", "input": given}]}

    writer = [call("shout", text="hello"), *([call("refuse", reason="too loud")] * refuse)]
    return {"nodes": {
        "writer": [*writer, {"text": "Done."}],
        "quiet": [call("shout", text="psst"), {"text": "Quiet."}],
    }}  # fmt: skip


async def test_tools_named_mcp_server_tool_are_the_only_ones_offered(harness_factory: Any) -> None:
    """The workflow's server reaches the agent; ``tools:`` keeps shout, so refuse never runs."""
    h: Harness = harness_factory(shouting("words", refuse=True))
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


# -- a project's own servers: .mcp.json, with autoload_project: true -------------------------
PROJECT_FLOW = """\
agent writer:
  model: "scripted"
  user: "Shout hello."

agent quiet:
  model: "scripted"
  mcp:
    inherit: false
  user: "Say nothing."

workflow w:
  mcp:
    autoload_project: true
  entry: writer
  writer -> quiet
  quiet -> done
"""


def write_project_file(where: Path, **servers: Any) -> None:
    import json

    (where / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))


def words_entry() -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER)]}


async def test_autoload_project_gives_agents_the_servers_of_mcp_json(
    harness_factory: Any, tmp_path: Path
) -> None:
    """The run's working directory's .mcp.json, as Claude Code and upstream read it."""
    write_project_file(tmp_path, proj=words_entry())
    h: Harness = harness_factory(shouting("proj"))
    run = await h.start(PROJECT_FLOW)
    assert await run.wait(90) == "finished", run.error
    assert "HELLO" in h.last_user_text("writer", 1)
    assert "PSST" not in h.last_user_text("quiet", 1)  # inherit: false: not the project's either


def project_servers_of(source: str, workdir: Path, node: str = "writer") -> list[str]:
    from iterion_nb.runtime.project_mcp import agent_servers

    wf = it.compile(source)
    agent = wf.nodes[node]
    assert isinstance(agent, m.AgentNode)
    return [f"{s.name}:{s.command or s.url}" for s in agent_servers(wf, agent, workdir)]


def test_which_project_servers_an_agent_gets(tmp_path: Path) -> None:
    write_project_file(
        tmp_path, proj=words_entry(), web={"type": "http", "url": "http://127.0.0.1:9/mcp"},
        words={"command": "not-the-declared-one"},
    )  # fmt: skip
    assert project_servers_of(PROJECT_FLOW, tmp_path) == [
        f"proj:{sys.executable}", "web:http://127.0.0.1:9/mcp", "words:not-the-declared-one"
    ]  # fmt: skip
    assert project_servers_of(PROJECT_FLOW, tmp_path, "quiet") == []
    # off by default: the file is not read
    off = PROJECT_FLOW.replace("    autoload_project: true", "    autoload_project: false")
    assert project_servers_of(off, tmp_path) == []
    # the workflow's disable: and the agent's turn servers of the file off
    some = PROJECT_FLOW.replace(
        "autoload_project: true", "autoload_project: true\n    disable: [web]"
    )
    assert [s.split(":")[0] for s in project_servers_of(some, tmp_path)] == ["proj", "words"]
    # a declared server wins over the file's of the same name
    declared = f'mcp_server words:\n  command: "{sys.executable}"\n\n' + PROJECT_FLOW
    assert f"words:{sys.executable}" in project_servers_of(declared, tmp_path)


def test_with_autoload_a_server_may_be_named_before_the_file_is_read(tmp_path: Path) -> None:
    """mcp.proj.shout compiles (proj may be in .mcp.json); an absent one fails the node, named."""
    from iterion_nb.runtime.project_mcp import ProjectMcpError

    named = PROJECT_FLOW.replace(
        '  user: "Shout hello."', '  user: "Shout hello."\n  tools: [mcp.proj.shout]'
    )
    assert [d.code for d in analyze(named).diagnostics] == []
    assert "C364" in [d.code for d in analyze(named.replace("true", "false")).diagnostics]
    write_project_file(tmp_path, other=words_entry())
    with pytest.raises(ProjectMcpError) as info:
        project_servers_of(named, tmp_path)
    assert str(info.value) == (
        f"MCP server 'proj' is neither declared nor in {tmp_path / '.mcp.json'} (known: other)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"mcpServers": {"proj": ', ".mcp.json:1:25: not JSON: Expecting value"),
        ('{"mcpServers": []}', "'mcpServers' must be an object of servers by name"),
        ('{"mcpServers": {"proj": {"args": ["x"]}}}',
         "server 'proj': a stdio server needs a 'command' string"),
        ('{"mcpServers": {"proj": {"type": "sse", "url": "http://h/sse"}}}',
         "transport 'sse' is not supported here"),
        ('{"mcpServers": {"proj": {"type": "http"}}}',
         "server 'proj': an http server needs a 'url' string"),
        ('{"mcpServers": {"a b": {"command": "x"}}}', "server 'a b': a name is letters, digits"),
    ],
)  # fmt: skip
async def test_a_bad_mcp_json_fails_the_node_naming_the_file(
    tmp_path: Path, content: str, message: str
) -> None:
    from iterion_nb.session import Session
    from iterion_nb.store import MemoryStore

    (tmp_path / ".mcp.json").write_text(content)
    scenario = {"nodes": {"writer": [{"text": "x"}], "quiet": [{"text": "y"}]}}
    session = Session(MemoryStore(), scenario=scenario, workdir=tmp_path)
    try:
        run = await session.start(it.compile(PROJECT_FLOW))
        assert await run.wait(60) == "failed_resumable"
        assert run.error is not None and str(tmp_path / ".mcp.json") in run.error
        assert message in run.error, run.error
    finally:
        await session.close()
