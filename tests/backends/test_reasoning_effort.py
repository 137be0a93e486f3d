"""An agent's reasoning_effort reaches the model's API, in each API's own words.

The Messages API takes ``output_config: {effort}`` (low … max: ``minimal`` is
sent as ``low``), Chat Completions ``reasoning_effort`` (every level), and the
claude CLI ``--effort`` (as the Messages API). Seen in the requests the
loopback model server receives from the real SDK clients and the real CLI.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Harness

FLOW = """\
schema result:
  summary: string

agent writer:
  model: "scripted"
  reasoning_effort: "{effort}"
  output: result

workflow w:
  entry: writer
  writer -> done
"""
SCENARIO = {"nodes": {"writer": [{"output": {"summary": "done"}}]}}


def sent_effort(h: Harness) -> Any:
    """The effort the model's API was asked for, as that API spells it (None: not sent)."""
    if h.server is None:  # the scripted provider: the request the loop made
        return h.provider.requests[-1].reasoning_effort  # type: ignore[union-attr]
    bodies = [r["body"] for r in h.server.requests if "messages" in r["body"]]
    body = bodies[-1]
    if h.kind.startswith("openai"):
        return body.get("reasoning_effort")
    return (body.get("output_config") or {}).get("effort")


@pytest.mark.parametrize(("effort", "anthropic_words"), [("high", "high"), ("minimal", "low")])
async def test_the_effort_is_sent_as_the_api_spells_it(
    harness_factory: Any, effort: str, anthropic_words: str
) -> None:
    h: Harness = harness_factory(SCENARIO)
    run = await h.start(FLOW.format(effort=effort))
    assert await run.wait(60) == "finished", run.error
    expected = effort if h.kind in ("scripted", "openai") else anthropic_words
    assert sent_effort(h) == expected
    # the run's events say what the node asked for, on every backend (the claude CLI's too)
    asked = [e.data for e in await run.events() if e.type == "llm_request"]
    assert asked and all(data.get("reasoning_effort") == effort for data in asked), asked


async def test_no_effort_sends_none(harness_factory: Any) -> None:
    h: Harness = harness_factory(SCENARIO)
    run = await h.start(FLOW.replace('  reasoning_effort: "{effort}"\n', ""))
    assert await run.wait(60) == "finished", run.error
    # no --effort: the claude CLI asks for its own default (high, in the bundled release)
    assert sent_effort(h) == ("high" if h.kind == "claude_code" else None)
