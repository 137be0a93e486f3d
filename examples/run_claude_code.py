"""Run examples/async_questions.iter with its agent on the Claude Code backend, offline.

    python examples/run_claude_code.py [--store DIR]

Needs the ``claude`` extra (``pip install 'iterion-nb[claude]'``: the SDK
bundles the ``claude`` CLI). The real CLI runs the agent node, but its model
is a loopback server (``iterion_nb.testing.ScenarioServer``) that answers
from the same scenario the scripted model reads
(examples/async_questions.scenario.yaml), so nothing leaves the machine and
no API key is needed. The agent asks its two questions through our MCP
tools, keeps working, receives the answers in its hooks; the gate and the
finalizer run as usual. Compare with examples/run_async.py: same questions,
same answers, same outputs.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import iterion_nb as it
from iterion_nb.backends.claude_code import ClaudeCodeBackend
from iterion_nb.backends.claw import ClawBackend
from iterion_nb.backends.providers import ProviderResolver
from iterion_nb.backends.router import BackendRouter
from iterion_nb.testing import ScenarioServer

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "async_questions.scenario.yaml"
ANSWERS = {
    "Should the notes be formal or casual?": "formal",
    "Which feature should come first?": "asking while working",
}


async def main(store: str) -> None:
    """Start the run on claude_code, answer its two questions, print the release notes."""
    with ScenarioServer(SCENARIO) as server, tempfile.TemporaryDirectory() as home:
        # the CLI talks to the loopback server; HOME keeps its config out of yours
        claude = ClaudeCodeBackend(
            env={"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "offline", "HOME": home}
        )
        backends = BackendRouter(
            {"claw": ClawBackend(ProviderResolver(SCENARIO)), "claude_code": claude}
        )
        session = it.Session(store, backend=backends)
        workflow = it.compile_file(HERE / "async_questions.iter")
        # nodes that name no backend run on claude_code (like %%iterion --backend claude_code)
        run = await session.start(workflow, backend="claude_code")
        print(f"run {run.id} started on claude_code")
        for _ in ANSWERS:
            question = await run.next_question(timeout=60)
            if question is None:
                break
            answer = ANSWERS[question.question]
            print(f"  question {question.id}: {question.question!r} -> answering {answer!r}")
            await run.answer(question.id, answer, answered_by="example")
        status = await run.wait(timeout=120)
        print(f"run {run.id}: {status}")
        print(f"release notes: {run.outputs.get('finalizer')}")
        nodes = sorted({r["node"] for r in server.requests})
        print(f"model requests through the CLI, by node: {nodes}")
        await session.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default=".iterion", help="the run store (a directory)")
    asyncio.run(main(parser.parse_args().store))
