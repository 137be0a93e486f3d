"""``session: inherit | fork | inherit_if_available`` on every provider (issue 20).

A node that inherits continues the conversation of the node before it (or of
the one its input names with ``_session_id``): the model sees the earlier
turns, then the new prompt. ``fork`` starts from a copy, so two forks of one
conversation do not see each other. On the claude CLI the same happens with
its own sessions (``--resume``, ``--fork-session``).
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Harness

CHAIN = """\
agent worker:
  model: "scripted"
  user: "Write the plan."

agent reviewer:
  model: "scripted"
  session: {mode}
  user: "Now review what you wrote."

workflow chain:
  entry: worker
  worker -> reviewer
  reviewer -> done
"""

FORKS = """\
agent worker:
  model: "scripted"
  user: "Write the plan."

router split:
  mode: fan_out_all

agent summarizer:
  model: "scripted"
  session: fork
  user: "Summarize what you did."

agent namer:
  model: "scripted"
  session: fork
  user: "Name the change."

agent closer:
  model: "scripted"
  await: wait_all
  user: "Close."

workflow forks:
  entry: worker
  worker -> split
  split -> summarizer with { _session_id: "{{outputs.worker._session_id}}" }
  split -> namer with { _session_id: "{{outputs.worker._session_id}}" }
  summarizer -> closer
  namer -> closer
  closer -> done
"""


def texts(messages: list[dict[str, Any]]) -> str:
    """Every text of a conversation, in order (Anthropic and OpenAI shapes alike)."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [b.get("text", "") for b in content if isinstance(b, dict)]
    return " | ".join(t for t in out if t)


@pytest.mark.parametrize("mode", ["inherit", "inherit_if_available"])
async def test_an_inheriting_node_continues_the_conversation(
    harness_factory: Any, mode: str
) -> None:
    h: Harness = harness_factory({"nodes": {
        "worker": [{"text": "PLAN: A then B"}],
        "reviewer": [{"text": "REVIEW: fine"}],
    }})  # fmt: skip
    run = await h.start(CHAIN.format(mode=mode))
    assert await run.wait(60) == "finished", run.error
    (seen,) = h.turns("reviewer")
    told = texts(seen)
    assert "Write the plan." in told and "PLAN: A then B" in told
    assert told.index("PLAN: A then B") < told.index("Now review what you wrote.")
    assert run.outputs["reviewer"] == {"text": "REVIEW: fine"}


async def test_a_fresh_node_sees_nothing_before_it(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {
        "worker": [{"text": "PLAN: A then B"}], "reviewer": [{"text": "REVIEW"}],
    }})  # fmt: skip
    run = await h.start(CHAIN.format(mode="fresh"))
    assert await run.wait(60) == "finished", run.error
    (seen,) = h.turns("reviewer")
    assert "PLAN" not in texts(seen)


async def test_forks_start_from_copies_that_do_not_see_each_other(harness_factory: Any) -> None:
    h: Harness = harness_factory({"nodes": {
        "worker": [{"text": "PLAN: A then B"}],
        "summarizer": [{"text": "SUMMARY"}],
        "namer": [{"text": "NAME"}],
        "closer": [{"text": "CLOSED"}],
    }})  # fmt: skip
    run = await h.start(FORKS)
    assert await run.wait(60) == "finished", run.error
    for node, other in (("summarizer", "NAME"), ("namer", "SUMMARY")):
        (seen,) = h.turns(node)
        told = texts(seen)
        assert "PLAN: A then B" in told, (node, told)
        assert other not in told  # a copy: the sibling's turns are not in it
    (closing,) = h.turns("closer")
    assert "PLAN" not in texts(closing)  # fresh


async def test_inherit_with_nothing_to_continue_fails_the_node_clearly(
    harness_factory: Any,
) -> None:
    h: Harness = harness_factory({"nodes": {"reviewer": [{"text": "x"}]}})
    source = CHAIN.format(mode="inherit").replace("entry: worker", "entry: reviewer")
    source = source.replace("  worker -> reviewer\n", "")
    source = source.replace('agent worker:\n  model: "scripted"\n  user: "Write the plan."\n', "")
    run = await h.start(source)
    assert await run.wait(60) == "failed_resumable"
    assert run.error is not None
    assert "session: inherit has nothing to continue: no node came before it" in run.error
