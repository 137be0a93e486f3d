"""Workspace memory (upstream's ``memory:``, issue 20) on every provider and the claude CLI.

One agent writes a note; the next one, with the same scope, finds it indexed
and (being autoloaded) in full in its system prompt, can read and list notes but
not write them (``write: false``), and cannot leave the scope's folder.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.backends.memory import memory_root
from iterion_nb.backends.providers.scripted import ScriptedProvider

from .conftest import Harness

FLOW = """\
agent writer:
  model: "scripted"
  user: "Keep a brief."
  memory:
    enabled: true
    scope: release

agent reader:
  model: "scripted"
  user: "Use the brief."
  memory:
    enabled: true
    scope: release
    autoload: ["CONTEXT_BRIEF.md"]
    write: false
    pre_compact_inject: true

workflow w:
  entry: writer
  writer -> reader
  reader -> done
"""

NOTE = "---\ntitle: Brief\ntags: [release, notes]\ndescription: what we agreed\n---\nShip Friday.\n"


def systems(h: Harness, node: str) -> list[str]:
    """The system prompt of each of the node's turns, as the model got it."""
    if isinstance(h.provider, ScriptedProvider):
        return [r.system for r in h.provider.requests if r.node == node]
    assert h.server is not None
    found = []
    for r in h.server.requests:
        if r["node"] != node:
            continue
        body = r["body"]
        system = body.get("system")
        if system is None:  # Chat Completions: the first message
            system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        if isinstance(system, list):
            system = "".join(b.get("text", "") for b in system)
        found.append(system)
    return found


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "iterion-home"
    monkeypatch.setenv("ITERION_NB_HOME", str(home))
    return home


async def test_a_note_one_agent_writes_is_in_the_next_ones_prompt(
    harness_factory: Any, tmp_path: Path, home: Path
) -> None:
    h: Harness = harness_factory({"nodes": {
        "writer": [
            {"tool_calls": [{"name": "memory_write",
                             "input": {"path": "CONTEXT_BRIEF.md", "content": NOTE}}]},
            {"tool_calls": [{"name": "memory_list", "input": {}}]},
            {"text": "Noted."},
        ],
        "reader": [
            {"tool_calls": [{"name": "memory_read", "input": {"path": "CONTEXT_BRIEF.md"}}]},
            {"tool_calls": [{"name": "memory_read", "input": {"path": "../../secrets"}}]},
            {"tool_calls": [{"name": "memory_write", "input": {"path": "x.md", "content": "x"}}]},
            {"text": "Friday."},
        ],
    }})  # fmt: skip
    run = await h.start(FLOW)
    assert await run.wait(90) == "finished", run.error
    note = memory_root(tmp_path, "release") / "CONTEXT_BRIEF.md"
    assert note.read_text() == NOTE and str(note).startswith(str(home))
    assert stat.S_IMODE(note.stat().st_mode) == 0o600  # private, as the store is
    wrote = f"wrote {len(NOTE)} characters to memory note CONTEXT_BRIEF.md"
    assert wrote in h.last_user_text("writer", 1)
    assert "CONTEXT_BRIEF.md" in h.last_user_text("writer", 2)  # memory_list
    assert "Ship Friday." not in systems(h, "writer")[0]  # nothing written yet then
    prompt = systems(h, "reader")[0]
    assert '<file path="CONTEXT_BRIEF.md" title="Brief" tags="release,notes">what we agreed' \
        "</file>" in prompt  # fmt: skip
    assert '<file path="CONTEXT_BRIEF.md">\n' + NOTE in prompt  # autoloaded in full
    assert "Ship Friday." in h.last_user_text("reader", 1)  # memory_read
    assert "memory path '../../secrets' leaves the scope" in h.last_user_text("reader", 2)
    refused = h.last_user_text("reader", 3).lower()  # write: false: no memory_write
    assert "unknown tool 'memory_write'" in refused or "no such tool available" in refused
    assert not (note.parent / "x.md").exists()


def test_notes_stay_inside_their_scope_even_through_links(tmp_path: Path) -> None:
    from iterion_nb.backends.memory import MemoryScope
    from iterion_nb.backends.tools import ToolError
    from iterion_nb.ir.model import Memory

    root = tmp_path / "scope"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("SECRET")
    (root / "link.md").symlink_to(tmp_path / "secret.txt")
    (root / "out").symlink_to(tmp_path)
    notes = MemoryScope(root)
    for attempt in (lambda: notes.read_note("link.md"),
                    lambda: notes.read_note("../secret.txt"),
                    lambda: notes.write_note("out/planted.md", "x"),
                    lambda: notes.list_notes("out")):  # fmt: skip
        with pytest.raises(ToolError, match="leaves the scope"):
            attempt()
    assert not (tmp_path / "planted.md").exists()
    assert "SECRET" not in notes.prompt(Memory("scope", autoload=("*.md", "out/*")))
    # a readonly agent reads its notes but writes none
    assert sorted(notes.tools(Memory("scope"), readonly=True)) == ["memory_list", "memory_read"]
    # a note is replaced whole (never half written), and two folders never share notes
    notes.write_note("brief.md", "one")
    notes.write_note("brief.md", "two")
    assert notes.read_note("brief.md") == "two" and notes.names() == ["brief.md"]
    assert memory_root("/a/b-c", "s") != memory_root("/a-b/c", "s")
