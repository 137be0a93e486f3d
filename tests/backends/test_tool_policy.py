"""``tool_policy``: a call the policy refuses is not run, on every provider and the claude CLI.

The model gets an error result saying why, and the run's events record it
(``tool_error`` with ``denied_by: tool_policy``). The MCP server is the tour's
(notebooks/words_server.py), declared as in test_mcp.py (``WORDS_SERVER``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iterion_nb.backends.mcp import cli_allowed
from iterion_nb.dsl.source import Span
from iterion_nb.ir import model as m

from .conftest import Harness
from .test_mcp import WORDS_SERVER

FLOW = f"""\
{WORDS_SERVER}
agent writer:
  model: "scripted"
  tools: [read_file, write_file]
  mcp: [words]
  tool_policy: [read_file, mcp.words.shout]
  user: "Write and shout."

workflow w:
  tool_policy: [write_file, "mcp.words.*"]   ## the node's own list replaces this one
  entry: writer
  writer -> done
"""


def _call(name: str, **given: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": given}]}


async def test_a_call_the_policy_refuses_is_not_run(harness_factory: Any, tmp_path: Path) -> None:
    h: Harness = harness_factory({"nodes": {"writer": [
        _call("write_file", path="out.txt", content="secret"),
        _call("words__refuse", reason="too loud"),
        _call("words__shout", text="hello"),
        {"text": "Done."},
    ]}})  # fmt: skip
    run = await h.start(FLOW)
    assert await run.wait(90) == "finished", run.error
    assert not (tmp_path / "out.txt").exists()  # refused: never written
    told = h.last_user_text("writer", 1)
    assert "tool 'write_file' is not allowed by tool_policy" in told
    told = h.last_user_text("writer", 2)
    assert "tool 'mcp.words.refuse' is not allowed by tool_policy" in told
    assert "refused: too loud" not in told  # the server never ran it
    assert "HELLO" in h.last_user_text("writer", 3)  # allowed: run
    events = await run.events()
    denied = [e.data["tool"] for e in events
              if e.type == "tool_error" and e.data.get("denied_by") == "tool_policy"]  # fmt: skip
    assert denied == ["write_file", "words__refuse"]
    # each refused call is one tool_called then one tool_error, and nothing after it
    # (the claude CLI's own failure hook and its turn's end once recorded it again)
    trail = [(e.type, e.data.get("tool")) for e in events if e.type.startswith("tool_")]
    for name in ("write_file", "words__refuse"):
        mine = [kind for kind, tool in trail if tool == name]
        assert mine == ["tool_called", "tool_error"], (name, trail)


@pytest.mark.parametrize(
    ("policy", "allowed"),
    [
        (None, ["mcp__words"]),
        (("*",), ["mcp__words"]),
        (("mcp.*",), ["mcp__words"]),
        (("mcp.words.*",), ["mcp__words"]),
        (("mcp.words.shout", "read_file"), ["mcp__words__shout"]),
        (("read_file",), []),
        ((), []),
    ],
)  # fmt: skip
def test_the_cli_is_allowed_only_the_mcp_tools_the_policy_allows(
    policy: tuple[str, ...] | None, allowed: list[str]
) -> None:
    server = m.McpServer("words", Span.point(1, 1), command="python3")
    assert cli_allowed((server,), (), policy) == allowed
    named = ("mcp.words.shout", "mcp.words.refuse")
    expected = [f"mcp__words__{t}" for t in ("refuse", "shout") if policy is None or
                m.tool_allowed(policy, f"mcp.words.{t}")]  # fmt: skip
    assert cli_allowed((server,), named, policy) == expected


@pytest.mark.parametrize(
    ("name", "allowed"),
    [("read_file", True), ("write_file", False), ("mcp.github.create_issue", True),
     ("mcp.git.log", False), ("mcp.githubx.x", False), ("mcp.github", False),
     ("memory_read", True), ("memory_write", False)],
)  # fmt: skip
def test_policy_patterns(name: str, allowed: bool) -> None:
    policy = ("read_file", "mcp.github.*", "memory_read")
    assert m.tool_allowed(policy, name) is allowed
    assert m.tool_allowed(None, name) and m.tool_allowed(("*",), name)
    assert not m.tool_allowed((), name)
