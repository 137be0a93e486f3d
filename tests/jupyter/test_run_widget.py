"""The run widget's model without a kernel: states, details, usage, forms, snapshots, identity."""

from __future__ import annotations

import asyncio
import base64
import getpass
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

import iterion_nb as it
from iterion_nb.magics import LiveRun
from iterion_nb.session import Session
from iterion_nb.widgets import InboxWidget, RunWidget, who_clicked

from .test_widgets import FLOW, answerer, scenario, started, until

TOOLS = """\
schema out:
  text: string

agent writer:
  model: "scripted"
  tools: [louder]
  interaction: async
  output: out

await_answers gate:
  from: writer
  timeout: "5m"

workflow w:
  entry: writer
  budget:
    max_tokens: 1000
    max_cost_usd: 1
  writer -> gate
  gate -> done
"""


@it.tool
def louder(text: str) -> str:
    """Say it louder."""
    return text.upper()


#: Released by the test: the writer's work after it asked (stands for slow work).
WORKING: dict[str, asyncio.Event] = {}


@it.tool
async def keep_working() -> str:
    """Work on until the test says the work is done."""
    await WORKING["done"].wait()
    return "drafted"


#: test_widgets' FLOW, its writer given the tool keep_working in place of a prompt.
ASKS_THEN_WORKS = FLOW.replace('  user: "Write."\n', "  tools: [keep_working]\n")


async def test_a_question_card_says_who_waits_for_it_as_the_run_goes_on(
    session: Session,
) -> None:
    """An async card read "the agent keeps working meanwhile" after its agent had finished
    and while the gate waited for exactly that answer."""
    WORKING["done"] = asyncio.Event()
    script = {"nodes": {"writer": [
        {"tool_calls": [{"name": "ask_user_async", "input": {"question": "Tone?"}}]},
        {"tool_calls": [{"name": "keep_working", "input": {}}]},
        {"output": {"text": "a draft"}},
    ]}}  # fmt: skip
    run = await session.start(it.compile(ASKS_THEN_WORKS), scenario=script)
    widget = RunWidget(session.store, run.id)
    inbox = InboxWidget(session.store, None, run.id)

    def says() -> set[tuple[bool, bool]]:
        shown = [q for q in widget.questions if not q["answered_at"]] + inbox.pending
        return {(q["waited_on"], q["asker_finished"]) for q in shown}

    await until(lambda: len(inbox.pending) == 1 and widget.states.get("writer") == "running")
    assert says() == {(False, False)}  # the agent works on beside its question
    WORKING["done"].set()
    await until(lambda: widget.states.get("gate") == "waiting")
    await until(lambda: says() == {(True, True)})  # its agent finished; the gate waits for it
    widget.close()
    inbox.close()
    await run.cancel()


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    s = Session(tmp_path / "store")
    yield s
    await s.close()


@pytest.fixture
def shell() -> Iterator[tuple[InteractiveShell, list[dict[str, Any]]]]:
    """A real IPython shell whose display messages are recorded."""
    ip = InteractiveShell.instance()
    published: list[dict[str, Any]] = []
    original = ip.display_pub.publish

    def publish(data: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> None:
        published.append({"data": data, **kwargs})

    ip.display_pub.publish = publish  # type: ignore[method-assign]
    yield ip, published
    ip.display_pub.publish = original  # type: ignore[method-assign]


async def test_an_await_node_says_how_many_answers_it_waits_for(session: Session) -> None:
    run = await started(session, {"question": "Tone?"}, {"question": "Length?"})
    widget = RunWidget(session.store, run.id)
    await until(lambda: widget.notes.get("gate") == "waiting for 2 of 2 answers")
    assert widget.states["gate"] == "waiting"
    first, _ = await run.pending_questions()
    await run.answer(first.id, "formal")
    await until(lambda: widget.notes.get("gate") == "waiting for 1 of 2 answers")
    widget.close()
    await run.cancel()


async def test_pending_questions_are_answered_from_the_widget(session: Session) -> None:
    run = await started(session, {"question": "Tone?", "options": [{"id": "f", "label": "F"}]})
    widget = RunWidget(session.store, run.id, answer=answerer(session))
    assert widget.answerable
    await until(lambda: any(not q["answered_at"] for q in widget.questions))
    (question,) = [q for q in widget.questions if not q["answered_at"]]
    widget._handle_custom_msg(
        {"type": "answer", "run_id": run.id, "interaction_id": question["id"], "answer": "f"}, []
    )
    await until(lambda: widget.last_result.get("interaction_id") == question["id"])
    assert widget.last_result["text"] in (
        "Sent — the agent reads it at its next turn",
        "Answered — the run has since finished",  # it may be over already
    )
    recorded = await session.store.get_interaction(question["id"])
    assert (recorded.answers, recorded.answered_by) == ("f", getpass.getuser())
    assert await run.wait(10) == "finished"
    await until(lambda: widget.states.get("gate") == "finished")
    await until(lambda: widget.last_result["text"] == "Answered — the run has since finished")
    # without an answer path the widget lists the questions, and a stray click says why
    listing = RunWidget(session.store, run.id)
    assert not listing.answerable
    result = await listing.submit({"run_id": run.id, "interaction_id": "x", "answer": "y"})
    assert "cannot answer" in result["error"]
    widget.close()
    listing.close()


async def test_an_answer_that_resumes_a_paused_run_says_so_then_how_the_run_ended(
    session: Session,
) -> None:
    flow = FLOW.replace("interaction: async", "interaction: human")
    sc = {"nodes": {"writer": [
        {"tool_calls": [{"name": "ask_user", "input": {"question": "Go?"}}]},
        {"output": {"text": "went"}},
    ]}}  # fmt: skip
    run = await session.start(it.compile(flow), scenario=sc)
    widget = RunWidget(session.store, run.id, answer=answerer(session))
    said: list[str] = []
    widget.observe(lambda change: said.append(change["new"].get("text", "")), "last_result")
    await until(lambda: widget.status == "paused_waiting_human" and bool(widget._pending_ids()))
    (iid,) = widget._pending_ids()
    widget._handle_custom_msg(
        {"type": "answer", "run_id": run.id, "interaction_id": iid, "answer": "yes"}, []
    )
    await until(lambda: widget.status == "finished")
    # "the run goes on" holds while its owner takes it up; then it says how the run ended
    assert said[0] == "Answered — the run goes on"
    assert said[-1] == "Answered — the run has since finished"
    assert not any("paused" in text for text in said), said
    widget.close()


async def test_a_click_is_answered_by_the_jupyter_user_where_known(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    assert who_clicked() == "ada"
    run = await started(session, {"question": "Tone?"})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    await until(lambda: len(inbox.pending) == 1)
    iid = inbox.pending[0]["id"]
    inbox._handle_custom_msg({"type": "answer", "interaction_id": iid, "answer": "formal"}, [])
    await until(lambda: bool(inbox.history))
    assert inbox.history[0]["answered_by"] == "ada"
    monkeypatch.delenv("JUPYTERHUB_USER")
    assert who_clicked() == getpass.getuser()
    inbox.close()


async def test_a_click_records_the_identity_the_front_end_sent(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JupyterLab's user (as its questions sidebar records it) wins; nobody's name falls back."""
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    run = await started(session, {"question": "Tone?"}, {"question": "Length?"})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    await until(lambda: len(inbox.pending) == 2)
    tone, length = sorted(inbox.pending, key=lambda q: q["questions"][0], reverse=True)
    inbox._handle_custom_msg({"type": "answer", "interaction_id": tone["id"], "answer": "formal",
                              "answered_by": "Anonymous  Europa\n"}, [])  # fmt: skip
    # JupyterLab's id for an anonymous user names nobody: the OS user then
    inbox._handle_custom_msg({"type": "answer", "interaction_id": length["id"], "answer": "short",
                              "answered_by": "0123456789abcdef0123456789abcdef"}, [])  # fmt: skip
    await until(lambda: len(inbox.history) == 2)
    who = {q["questions"][0]: q["answered_by"] for q in inbox.history}
    assert who == {"Tone?": "Anonymous Europa", "Length?": getpass.getuser()}
    inbox.close()
    await run.cancel()


async def test_a_node_s_details_follow_it_live(session: Session) -> None:
    sc = {"nodes": {"writer": [
        {"text": "Louder.", "tool_calls": [{"name": "louder", "input": {"text": "hi"}}],
         "tokens": {"in": 100, "out": 20}, "cost_usd": 0.01},
        {"tool_calls": [{"name": "ask_user_async", "input": {"question": "Tone?"}}],
         "tokens": {"in": 50, "out": 5}, "cost_usd": 0.002},
        {"output": {"text": "HI"}, "tokens": {"in": 10, "out": 5}, "cost_usd": 0.001},
    ]}}  # fmt: skip
    run = await session.start(it.compile(TOOLS), scenario=sc)
    widget = RunWidget(session.store, run.id)
    widget.selected = "writer"  # as the front-end does when the node is clicked
    await until(lambda: widget.details.get("state") == "finished")
    d = widget.details
    assert d["node"] == "writer" and d["kind"] == "agent"
    assert len(d["turns"]) == 3 and all(t["request"] and t["reply"] for t in d["turns"])
    assert d["turns"][0]["reply"]["tokens_in"] == 100
    assert d["turns"][0]["reply"]["tool_calls"] == ["louder"]
    assert [(c["tool"], c["input"]) for c in d["tools"]] == [("louder", {"text": "hi"})]
    assert d["output"] == {"text": "HI"}
    assert [q["questions"] for q in d["questions"]] == [["Tone?"]]
    assert len(d["visits"]) == 1 and d["visits"][0]["seconds"] >= 0
    # the header's usage: tokens and cost against the workflow's budget
    assert widget.usage["tokens"] == 190 and widget.usage["max_tokens"] == 1000
    assert widget.usage["cost_usd"] == pytest.approx(0.013)
    assert widget.usage["max_cost_usd"] == 1
    # another node: its details replace the first's, and change while it waits
    widget.selected = "gate"
    await until(lambda: widget.details.get("node") == "gate")
    await until(lambda: widget.details["text"] == "waiting for 1 of 1 answer")  # once it starts
    assert widget.details["state"] == "waiting"
    (question,) = await run.pending_questions()
    await run.answer(question.id, "formal")
    await until(lambda: widget.details.get("state") == "finished")
    assert widget.details["output"]["answers"][0]["answer"] == "formal"
    widget.selected = ""
    await until(lambda: widget.details == {})
    widget.close()


async def killed_run(store: Path) -> str:
    """A run that asked a question, its process then killed (kill -9): it reads interrupted."""
    script = textwrap.dedent(f"""
        import asyncio, os, signal, sys, iterion_nb as it
        FLOW = {FLOW!r}
        async def main():
            s = it.Session({str(store)!r}, scenario={scenario({"question": "Tone?"})!r})
            run = await s.start(it.compile(FLOW))
            await run.next_question(timeout=10)
            print(run.id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
    """)
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.split()[0]


async def test_a_run_whose_process_died_reads_interrupted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run_id = await killed_run(store)
    session = Session(store)
    try:
        widget = RunWidget(session.store, run_id)
        await until(lambda: widget.status == "interrupted")
        # nothing executes it: its open nodes are not shown as running
        assert "running" not in widget.states.values()
        widget.close()
    finally:
        await session.close()


async def test_an_interrupted_run_s_question_says_the_answer_waits_for_the_resume(
    tmp_path: Path,
) -> None:
    """The inbox says the run stopped and how to resume it; the answer says it is kept."""
    store = tmp_path / "store"
    run_id = await killed_run(store)
    session = Session(store)
    try:
        inbox = InboxWidget(session.store, answerer(session), None)
        await until(lambda: [q.get("run_status") for q in inbox.pending] == ["interrupted"])
        text = inbox.snapshot()["text/plain"]
        assert f"Tone? — run {run_id} is interrupted (nothing executes it)" in text
        iid = inbox.pending[0]["id"]
        inbox._handle_custom_msg(
            {"type": "answer", "run_id": run_id, "interaction_id": iid, "answer": "formal"}, []
        )
        await until(lambda: inbox.last_result.get("interaction_id") == iid)
        assert inbox.last_result["text"] == (
            f"Saved — run {run_id} is interrupted (nothing executes it), so the agent gets"
            f" your answer when the run is resumed (%iterion resume {run_id})"
        )
        resumed = await session.resume(run_id)
        assert await resumed.wait(10) == "finished"
        assert resumed.outputs["gate"]["answers"][0]["answer"] == "formal"  # it reached the run
        await until(lambda: inbox.last_result["text"] == "Answered — the run has since finished")
        inbox.close()
    finally:
        await session.close()


async def test_the_time_counts_what_the_run_executed_not_its_interruption(
    tmp_path: Path,
) -> None:
    """Interrupted for 2 s and more, then resumed: the header's time leaves that out."""
    store = tmp_path / "store"
    run_id = await killed_run(store)
    session = Session(store)
    try:
        widget = RunWidget(session.store, run_id)
        await until(lambda: widget.status == "interrupted")
        await asyncio.sleep(2)  # nothing executes it meanwhile
        resumed = await session.resume(run_id)
        (question,) = await resumed.pending_questions()
        await resumed.answer(question.id, "formal")
        assert await resumed.wait(10) == "finished"
        await until(lambda: widget.status == "finished")
        events = await resumed.events()
        types = [e.type for e in events]
        back = types.index("run_resumed")
        # it ran until the last event its execution wrote (the answer came later, from here)
        last = [e for e in events[:back] if e.type != "interaction_answered"][-1]
        ran = (last.at - events[0].at) + (events[-1].at - events[back].at)
        wall = (events[-1].at - events[0].at).total_seconds()
        assert widget.usage["seconds"] == pytest.approx(ran.total_seconds(), abs=0.002)
        assert widget.usage["seconds"] < wall - 2  # not since the run was created
        widget.close()
    finally:
        await session.close()


async def test_each_display_leaves_a_snapshot_kept_current(
    session: Session, shell: tuple[InteractiveShell, list[dict[str, Any]]]
) -> None:
    _, published = shell
    run = await started(
        session, {"question": "Tone <b>?</b>", "options": [{"id": "f", "label": "F"}]}
    )
    live = LiveRun(session, run.id, it.compile(FLOW))
    await until(lambda: live.widget.states.get("gate") == "waiting")
    data, _ = live._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"] == (  # a line, not an object's address
        f"Run {run.id}: the live run widget (its saved snapshot shows the last state)"
    )
    (shown,) = [p for p in published if not p.get("update")]
    html, text = shown["data"]["text/html"], shown["data"]["text/plain"]
    display_id = shown["transient"]["display_id"]
    assert html.startswith(f'<div class="iterion-snapshot" data-run="{run.id}">')
    assert "gate waiting for 1 of 1 answer" in text and "writer finished" in text
    # a saved notebook keeps it: it says it is a view as of a time, not a live state
    saved, head = text.splitlines()[:2]
    assert re.fullmatch(
        r"Snapshot as of \d{4}-\d\d-\d\d \d\d:\d\d UTC, saved with the notebook — not live"
        r" \(the live view needs the notebook's kernel\)",
        saved,
    )
    assert re.fullmatch(
        rf"Run {run.id} · notes · running as of \d\d:\d\d UTC · 1/2 nodes finished", head
    )
    assert "Tone &lt;b&gt;?&lt;/b&gt;" in html and "<b>?</b>" not in html  # text, never HTML
    picture = html.split('src="data:image/svg+xml;base64,')[1].split('"')[0]
    svg = base64.b64decode(picture).decode()
    assert 'data-node="gate" data-state="waiting"' in svg
    assert f'id="snap-{run.id}-arrow"' in svg
    # the run goes on: the snapshot follows (at most once a second, at once when it settles)
    (question,) = await run.pending_questions()
    await run.answer(question.id, "f")
    await until(lambda: any(p.get("update") and "finished" in p["data"]["text/plain"]
                            and "Nodes: writer finished; gate finished" in p["data"]["text/plain"]
                            for p in published), timeout=5)  # fmt: skip
    updates = [p for p in published if p.get("update")]
    assert {p["transient"]["display_id"] for p in updates} == {display_id}
    last = updates[-1]["data"]["text/plain"]
    assert f"Run {run.id} · notes · finished · 2/2 nodes finished" in last  # final: no "as of"
    assert "answered 'F' by python" in last
    live.widget.close()


async def test_an_inbox_snapshot_lists_its_questions_as_text(
    session: Session, shell: tuple[InteractiveShell, list[dict[str, Any]]]
) -> None:
    _, published = shell
    run = await started(session, {"question": "Tone?", "options": [{"id": "f", "label": "Formal"}]})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    await until(lambda: len(inbox.pending) == 1)
    data, _ = inbox._repr_mimebundle_()
    assert data["text/plain"] == f"Inbox (run {run.id}): the live inbox widget"
    (shown,) = published
    assert "writer asks: Tone? (Formal)" in shown["data"]["text/plain"]
    saved, head = shown["data"]["text/plain"].splitlines()[:2]
    assert saved.startswith("Snapshot as of ") and "not live" in saved
    assert re.fullmatch(rf"Inbox — run {run.id} · 1 pending as of \d\d:\d\d UTC", head)
    assert inbox.pending[0]["workflow"] == "notes"  # the inbox names the run's workflow
    inbox.close()
    await run.cancel()


def test_the_os_user_is_the_fallback_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    monkeypatch.setenv("USER", "grace")
    monkeypatch.setenv("LOGNAME", "grace")
    assert who_clicked() == "grace"  # getpass reads LOGNAME/USER first
