"""The Claude Code backend beyond the shared ADR-081 scenarios (those run in test_interaction.py
through the real CLI too): routing by ``backend:``, and a CLI that is missing, too old or broken."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.backends.claude_code import ClaudeCodeBackend
from iterion_nb.session import Session
from iterion_nb.store import MemoryStore
from iterion_nb.testing import ScenarioServer

FLOW = """\
schema result:
  summary: string

agent drafter:
  model: "scripted"
  output: result

agent reviewer:
  model: "claude-test"
  backend: claude_code
  interaction: async
  output: result

workflow w:
  entry: drafter
  drafter -> reviewer
  reviewer -> done
"""

SCENARIO = {"nodes": {
    "drafter": [{"output": {"summary": "a draft"}}],
    "reviewer": [
        {"tool_calls": [{"name": "ask_user_async", "input": {"question": "Tone?"}}]},
        {"output": {"summary": "reviewed"}},
    ],
}}  # fmt: skip


async def test_nodes_run_on_the_backend_they_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScenarioServer(SCENARIO) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        monkeypatch.setenv("HOME", str(tmp_path))
        session = Session(MemoryStore(), scenario=SCENARIO, workdir=tmp_path)
        try:
            run = await session.start(it.compile(FLOW))
            assert await run.wait(60) == "finished", run.error
            assert run.outputs == {"drafter": {"summary": "a draft"},
                                   "reviewer": {"summary": "reviewed"}}  # fmt: skip
            # only the claude_code node went through the CLI (and so the server)
            assert {r["node"] for r in server.requests} == {"reviewer"}
            (question,) = await session.store.interactions(run.id)
            assert question.node_id == "reviewer" and question.kind == "async"
        finally:
            await session.close()


def fake_cli(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "claude"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


async def failing(tmp_path: Path, backend: ClaudeCodeBackend) -> str:
    session = Session(MemoryStore(), backend=backend, workdir=tmp_path)
    try:
        run = await session.start(it.compile(FLOW.replace("entry: drafter", "entry: reviewer")))
        assert await run.wait(60) == "failed_resumable"
        assert run.error is not None
        return run.error
    finally:
        await session.close()


async def test_a_missing_cli_says_what_to_install(tmp_path: Path) -> None:
    error = await failing(tmp_path, ClaudeCodeBackend(cli_path=tmp_path / "nowhere" / "claude"))
    assert "node 'reviewer'" in error
    assert "the claude CLI is missing: install claude-agent-sdk" in error


async def test_a_cli_too_old_says_to_upgrade(tmp_path: Path) -> None:
    cli = fake_cli(tmp_path, 'echo "1.0.3 (Claude Code)"\n')
    error = await failing(tmp_path, ClaudeCodeBackend(cli_path=cli))
    assert (
        f"the claude CLI at {cli} is 1.0.3, older than 2.1.300: upgrade claude-agent-sdk" in error
    )


async def test_a_cli_that_exits_early_fails_the_node_resumably(tmp_path: Path) -> None:
    cli = fake_cli(
        tmp_path,
        'if [ "$1" = "--version" ]; then echo "2.1.332 (Claude Code)"; exit 0; fi\n'
        'echo "fatal: cannot start" >&2\nexit 3\n',
    )
    error = await failing(tmp_path, ClaudeCodeBackend(cli_path=cli))
    assert "node 'reviewer'" in error
    assert "the claude CLI failed" in error


async def run_example(tmp_path: Path, backend: str) -> tuple[list[str], list[tuple[Any, ...]], Any]:
    """examples/async_questions.iter on one backend; answers given once the gate waits.

    (Answering at a fixed point of the run keeps timing out of the comparison:
    an answer that lands between two tool calls is delivered there, by design.)
    """
    root = Path(__file__).resolve().parents[2]
    source = (root / "examples" / "async_questions.iter").read_text()
    scenario = root / "examples" / "async_questions.scenario.yaml"
    session = Session(MemoryStore(), scenario=scenario, workdir=tmp_path)
    try:
        run = await session.start(it.compile(source), backend=backend)
        for _ in range(3000):
            if "gatherer" in run.outputs:
                break
            await asyncio.sleep(0.01)
        questions = await run.pending_questions()
        assert len(questions) == 2
        for question, answer in zip(questions, ("formal", "the inbox"), strict=True):
            await run.answer(question.id, answer)
        assert await run.wait(60) == "finished", run.error
        events = [e.type for e in await run.events()]
        asked = [(q.id, q.kind, q.node_id, q.questions, q.answers)
                 for q in await session.store.interactions(run.id)]  # fmt: skip
        outputs = json.loads(json.dumps(run.outputs).replace(run.id, "RUN"))
        return events, [(i.split("-", 1)[1], *rest) for i, *rest in asked], outputs
    finally:
        await session.close()


async def test_the_example_is_identical_on_both_backends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same scenario, same answers: same events, same questions, same outputs."""
    root = Path(__file__).resolve().parents[2]
    with ScenarioServer(root / "examples" / "async_questions.scenario.yaml") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        monkeypatch.setenv("HOME", str(tmp_path))
        claw = await run_example(tmp_path, "claw")
        claude = await run_example(tmp_path, "claude_code")
    assert claude[2] == claw[2]  # outputs
    assert claude[1] == claw[1]  # questions: ids (past the run id), kinds, nodes, texts, answers
    assert claude[0] == claw[0]  # the event log, type by type
