"""Widget models without a kernel: a message in -> an answer recorded; a store change -> state."""

from __future__ import annotations

import asyncio
import getpass
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

import iterion_nb as it
from iterion_nb.session import Session
from iterion_nb.widgets import InboxWidget, RunWidget, graph_layout

CLI = Path(sys.executable).parent / "iterion-nb"

FLOW = """\
schema draft:
  text: string

agent writer:
  model: "scripted"
  interaction: async
  user: "Write."
  output: draft

await_answers gate:
  from: writer
  timeout: "5m"

workflow notes:
  entry: writer
  writer -> gate
  gate -> done
"""


def scenario(*questions: dict[str, Any]) -> dict[str, Any]:
    calls = [{"name": "ask_user_async", "input": q} for q in questions]
    return {"nodes": {"writer": [{"tool_calls": calls}, {"output": {"text": "a draft"}}]}}


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    s = Session(tmp_path / "store")
    yield s
    await s.close()


async def until(check: Callable[[], Any], timeout: float = 5.0) -> None:
    """Wait (on the loop, as a kernel would) until ``check()`` holds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        assert loop.time() < end, "the widget did not update in time"
        await asyncio.sleep(0.02)


def answerer(session: Session) -> Callable[[str, str, Any, str], Awaitable[dict[str, Any]]]:
    async def answer(run_id: str, iid: str, value: Any, by: str) -> dict[str, Any]:
        return await session.run(run_id).answer(iid, value, answered_by=by)

    return answer


async def started(session: Session, *questions: dict[str, Any]) -> it.RunHandle:
    run = await session.start(it.compile(FLOW), scenario=scenario(*questions))
    for _ in range(500):
        if len(await run.pending_questions()) == len(questions):
            return run
        await asyncio.sleep(0.01)
    raise AssertionError("questions not asked")


async def test_inbox_shows_pending_questions_with_options(session: Session) -> None:
    run = await started(
        session,
        {"question": "Tone?", "options": [{"id": "formal", "label": "Formal"}]},
        {"question": "First feature?"},
    )
    inbox = InboxWidget(session.store, answerer(session), run.id)
    await until(lambda: len(inbox.pending) == 2)
    tone = next(q for q in inbox.pending if q["questions"] == ["Tone?"])
    assert tone["options"] == [{"id": "formal", "label": "Formal"}]
    assert tone["kind"] == "async" and tone["node_id"] == "writer" and tone["run_id"] == run.id
    assert tone["run_cluster"] is False  # run in this process: a stopped one needs a resume
    assert inbox.scope == f"run {run.id}"
    inbox.close()


@pytest.mark.parametrize("thread", ["loop", "subshell"])
async def test_a_message_in_records_the_answer(session: Session, thread: str) -> None:
    """Handlers run on the main loop (ipykernel 7.4) or a subshell thread (7.0-7.3)."""
    run = await started(session, {"question": "Tone?"})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    await until(lambda: len(inbox.pending) == 1)
    iid = inbox.pending[0]["id"]
    message = {"type": "answer", "run_id": run.id, "interaction_id": iid, "answer": "formal"}
    if thread == "loop":
        inbox._handle_custom_msg(message, [])
    else:
        worker = threading.Thread(target=inbox._handle_custom_msg, args=(message, []))
        worker.start()
        await asyncio.to_thread(worker.join)
    await until(lambda: inbox.last_result.get("interaction_id") == iid)
    result = inbox.last_result
    assert (result["queued"], result["resumed"], result["run_id"]) == (True, False, run.id)
    assert result["text"] in (
        "Sent — the agent reads it at its next turn",
        "Answered — the run has since finished",  # it may be over already (below)
    )
    recorded = await session.store.get_interaction(iid)
    assert recorded.answers == "formal"
    assert recorded.answered_by == getpass.getuser()  # a click: the person, not "notebook"
    await until(lambda: not inbox.pending and inbox.history)
    assert inbox.history[0]["answers"] == "formal"
    assert await run.wait(10) == "finished"
    # the banner does not go on saying the agent will read it: the run is over
    await until(lambda: inbox.last_result.get("text") == "Answered — the run has since finished")
    inbox.close()


async def test_a_question_of_a_run_nothing_executes_says_the_answer_waits_for_the_resume(
    session: Session, shell: InteractiveShell
) -> None:
    """A cancelled run's question: its state and how to resume it; the answer says it is kept."""
    run = await started(session, {"question": "Tone?", "options": [{"id": "f", "label": "F"}]})
    await run.cancel()
    assert await run.wait(5) == "cancelled"
    inbox = InboxWidget(session.store, answerer(session), None)  # every run's questions
    widget = RunWidget(session.store, run.id, answer=answerer(session))
    await until(lambda: [q["run_status"] for q in inbox.pending] == ["cancelled"])
    await until(lambda: [q["run_status"] for q in widget.questions] == ["cancelled"])
    assert f"run {run.id} is cancelled" in inbox.snapshot()["text/plain"]
    iid = inbox.pending[0]["id"]
    inbox._handle_custom_msg({"type": "answer", "run_id": run.id, "interaction_id": iid,
                              "answer": "f"}, [])  # fmt: skip
    await until(lambda: inbox.last_result.get("interaction_id") == iid)
    assert inbox.last_result["text"] == (
        f"Saved — run {run.id} is cancelled, so the agent gets your answer when the run is"
        f" resumed (%iterion resume {run.id})"
    )
    assert (await session.store.get_interaction(iid)).answers == "f"
    # resumed, the run reads it and ends: the banner says so instead
    resumed = await session.resume(run.id)
    assert await resumed.wait(10) == "finished"
    await until(lambda: inbox.last_result.get("text") == "Answered — the run has since finished")
    inbox.close()
    widget.close()


async def test_an_answer_that_leaves_a_run_waiting_for_its_resume_says_to_resume_it(
    tmp_path: Path,
) -> None:
    """Paused at a gate, its session gone; answered where nothing runs workflows: resume it."""
    from iterion_nb.runtime.answers import AnswerService

    gate = 'human ok:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: ok\n  ok -> done\n'
    first = Session(tmp_path / "s", workdir=tmp_path)
    run = await first.start(it.compile(gate))
    assert await run.wait(10) == "paused_waiting_human"
    await first.close()  # nothing executes the run now, nor keeps it parked
    second = Session(tmp_path / "s", workdir=tmp_path)
    answers = AnswerService(second.store)  # as the Jupyter server's: it runs no workflows

    async def answer(run_id: str, iid: str, value: Any, by: str) -> dict[str, Any]:
        return (await answers.answer(run_id, iid, value, by)).to_dict()

    inbox = InboxWidget(second.store, answer, None)
    try:
        await until(lambda: len(inbox.pending) == 1)
        iid = inbox.pending[0]["id"]
        inbox._handle_custom_msg({"type": "answer", "run_id": run.id, "interaction_id": iid,
                                  "answer": "yes"}, [])  # fmt: skip
        await until(lambda: inbox.last_result.get("interaction_id") == iid)
        assert inbox.last_result["text"] == (
            f"Saved — every answer run {run.id} waits for is in, but nothing executes it:"
            f" resume it (%iterion resume {run.id})"
        )
        resumed = await second.resume(run.id)
        assert await resumed.wait(10) == "finished"
        await until(
            lambda: inbox.last_result.get("text") == "Answered — the run has since finished"
        )
    finally:
        inbox.close()
        await second.close()


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[InteractiveShell]:
    """A real IPython shell with the extension loaded."""
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext iterion_nb")
    yield ip
    ip.run_cell("%unload_ext iterion_nb")


def test_the_answer_magic_says_the_same_for_a_run_nothing_executes(
    tmp_path: Path, shell: InteractiveShell
) -> None:
    shell.user_ns.update({"sc": scenario({"question": "Tone?"}), "store": str(tmp_path / "s")})
    made = shell.run_cell("%%iterion --run --scenario sc --store $store\n" + FLOW)
    assert made.success, made.error_in_exec
    shell.user_ns["r"] = made.result
    for line in ("q = await r.next_question(timeout=10)", "%iterion cancel {r.id}"):
        assert shell.run_cell(line).success
    said = shell.run_cell("%iterion answer {r.id} {q.id} formal")
    assert said.success, said.error_in_exec
    run_id = shell.user_ns["r"].id
    assert said.result == {
        "queued": True,
        "resumed": False,
        "run_status": "cancelled",
        "resume_needed": False,
        "awaiting_worker": False,
    }
    assert repr(said.result) == (  # the widgets' words
        f"Saved — run {run_id} is cancelled, so the agent gets your answer when the run is"
        f" resumed (%iterion resume {run_id})"
    )


async def test_a_refused_answer_s_banner_leaves_with_its_question(session: Session) -> None:
    run = await started(session, {"question": "Tone?", "options": [{"id": "f", "label": "F"}]})
    widget = RunWidget(session.store, run.id, answer=answerer(session))
    await until(lambda: bool(widget._pending_ids()))
    (iid,) = widget._pending_ids()
    refused = await widget.submit({"run_id": run.id, "interaction_id": iid, "answer": "nope"})
    assert "not one of the options" in refused["error"]
    assert widget.last_result == refused  # shown under the form, which stays
    await run.answer(iid, "f")  # answered elsewhere: the refusal is moot
    await until(lambda: widget.last_result == {})
    assert await run.wait(10) == "finished"
    widget.close()


async def test_a_second_answer_is_shown_as_an_error(session: Session) -> None:
    run = await started(session, {"question": "Tone?"})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    await until(lambda: len(inbox.pending) == 1)
    iid = inbox.pending[0]["id"]
    await run.answer(iid, "casual")
    result = await inbox.submit({"run_id": run.id, "interaction_id": iid, "answer": "formal"})
    assert "already answered" in result["error"]
    assert inbox.last_result == result
    junk = await inbox.submit({"interaction_id": "", "answer": "x"})
    assert junk["error"] == "the answer names no question"
    inbox.close()


async def test_questions_that_end_well_show_so_in_the_inbox_and_the_run_widget(
    session: Session,
) -> None:
    """Time left, a refusal that keeps the question open, a rewording, a withdrawal (issue 19)."""
    run = await started(
        session,
        {"question": "Tone?", "options": [{"id": "formal", "label": "Formal"}],
         "expires_in": "1h"},
        {"question": "First feature?"},
    )  # fmt: skip
    inbox = InboxWidget(session.store, answerer(session), run.id)
    widget = RunWidget(session.store, run.id, answer=answerer(session))
    await until(lambda: len(inbox.pending) == 2)
    tone = next(q for q in inbox.pending if q["questions"] == ["Tone?"])
    feature = next(q for q in inbox.pending if q["questions"] == ["First feature?"])
    assert tone["expires_at"] is not None and feature["expires_at"] is None
    # not one of the options: refused with the reason, and still pending (the form stays)
    refused = await inbox.submit({"run_id": run.id, "interaction_id": tone["id"], "answer": "hm"})
    assert "not one of the options" in refused["error"] and "formal (Formal)" in refused["error"]
    await asyncio.sleep(0.2)
    assert [q["id"] for q in inbox.pending if q["id"] == tone["id"]] == [tone["id"]]
    # the agent rewords one (in place: a new revision) and withdraws the other
    await session.store.amend(tone["id"], questions=("Tone of the notes?",))
    await until(lambda: any(q["questions"] == ["Tone of the notes?"] for q in inbox.pending))
    assert next(q for q in inbox.pending if q["id"] == tone["id"])["revision"] == 1
    await session.store.retract(feature["id"], "found it in the changelog")
    await until(lambda: [q["id"] for q in inbox.pending] == [tone["id"]])
    gone = next(q for q in inbox.history if q["id"] == feature["id"])
    assert (gone["ended"], gone["end_reason"]) == ("retracted", "found it in the changelog")
    text = inbox.snapshot()["text/plain"]
    assert "First feature? — withdrawn by its agent: found it in the changelog" in text
    await until(lambda: any(q.get("ended") == "retracted" for q in widget.questions))
    assert "withdrawn by its agent: found it in the changelog" in widget.snapshot()["text/plain"]
    inbox.close()
    widget.close()


async def test_answers_from_another_process_move_to_history_within_a_second(
    session: Session,
) -> None:
    run = await started(session, {"question": "Tone?"}, {"question": "Order?"})
    inbox = InboxWidget(session.store, answerer(session), None)  # the whole store
    await until(lambda: len(inbox.pending) == 2)
    assert inbox.scope == "all runs"
    iid = inbox.pending[0]["id"]
    store = str(session.store.path)  # type: ignore[attr-defined]
    done = await asyncio.to_thread(
        subprocess.run,
        [str(CLI), "runs", "answer", run.id, iid, "from the terminal", "--store", store],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loop = asyncio.get_running_loop()
    answered_at = loop.time()
    await until(lambda: len(inbox.pending) == 1, timeout=3)
    assert loop.time() - answered_at < 1.0
    assert inbox.history[0]["id"] == iid
    assert inbox.history[0]["answers"] == "from the terminal"
    assert inbox.history[0]["answered_by"] == getpass.getuser()  # the terminal's user
    inbox.close()


async def test_an_inbox_over_another_holder_sees_answers_within_a_second(tmp_path: Path) -> None:
    """This kernel does not hold the file: no doorbell rings here, the refresh finds the change."""
    from iterion_nb.store.remote import RemoteStore, open_store

    from ..api.test_takeover import HOLDER

    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), "2"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        store = open_store(db)
        assert isinstance(store, RemoteStore)

        async def answer(run_id: str, iid: str, value: Any, by: str) -> dict[str, bool]:
            result = await store.answer(iid, value, answered_by=by)
            return {"queued": result.message is not None, "resumed": False}

        inbox = InboxWidget(store, answer, "burst")
        await until(lambda: len(inbox.pending) == 2)
        done = await asyncio.to_thread(
            subprocess.run,
            [str(CLI), "runs", "answer", "burst", "q1", "yes", "--store", str(db)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        start = asyncio.get_running_loop().time()
        await until(lambda: [q["id"] for q in inbox.pending] == ["q0"], timeout=3)
        assert asyncio.get_running_loop().time() - start < 1.0
        assert inbox.history[0]["id"] == "q1" and inbox.history[0]["answers"] == "yes"
        # and a click in this inbox answers through the holder
        result = await inbox.submit({"run_id": "burst", "interaction_id": "q0", "answer": "no"})
        assert result["queued"] is True and result["resumed"] is False
        assert result["text"] == "Sent — the agent reads it at its next turn"
        assert not inbox.pending
        inbox.close()
        await store.close()
    finally:
        holder.kill()
        holder.wait()


async def test_agent_text_travels_as_plain_text(session: Session) -> None:
    evil = "<script>alert('x')</script> <b>bold?</b>"
    run = await started(session, {"question": evil, "options": [{"id": "a", "label": evil}]})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    await until(lambda: len(inbox.pending) == 1)
    assert inbox.pending[0]["questions"] == [evil]  # unchanged: the front-end sets textContent
    assert inbox.pending[0]["options"][0]["label"] == evil
    inbox.close()


async def test_run_widget_follows_a_run_to_its_end(session: Session) -> None:
    run = await started(session, {"question": "Tone?"})
    widget = RunWidget(session.store, run.id)  # no workflow given: read from the run
    await until(lambda: widget.states.get("writer") == "finished" and widget.status == "running")
    assert widget.workflow == "notes"
    assert [n["id"] for n in widget.graph["nodes"]] == ["writer", "gate", "done"]
    await until(lambda: widget.states.get("gate") == "waiting")  # at the sync point
    assert widget.notes["gate"] == "waiting for 1 of 1 answer"
    assert [q["questions"] for q in widget.questions] == [["Tone?"]]
    (question,) = await run.pending_questions()
    await run.answer(question.id, "formal")
    await until(lambda: widget.status == "finished")
    assert widget.states == {"writer": "finished", "gate": "finished"}
    assert widget.progress["done"] == 2 and widget.progress["total"] == 2
    assert widget.questions[0]["answers"] == "formal"
    types = [e["type"] for e in widget.events]
    assert "node_finished" in types and types[-1] == "run_finished"
    assert not widget.live.following  # a finished run is no longer polled
    widget.close()


async def test_run_widget_shows_a_parked_node_and_a_failure(session: Session) -> None:
    flow = FLOW.replace("interaction: async", "interaction: human")
    sc = {"nodes": {"writer": [
        {"tool_calls": [{"name": "ask_user", "input": {"question": "Go?"}}]},
    ]}}  # fmt: skip
    run = await session.start(it.compile(flow), scenario=sc)
    widget = RunWidget(session.store, run.id, it.compile(flow))
    await until(lambda: widget.status == "paused_waiting_human")
    await until(lambda: widget.states.get("writer") == "waiting")
    assert widget.notes["writer"] == "waiting for an answer"
    widget.show_failure("Traceback: boom")
    assert widget.error == "Traceback: boom"
    await widget.refresh()
    assert widget.error == "Traceback: boom"  # kept across refreshes
    widget.close()


def test_graph_layout_is_layered_fan_outs_spread_and_loops_go_back_up() -> None:
    source = (Path(__file__).parents[2] / "examples" / "fanout_retry.iter").read_text()
    layout = graph_layout(it.compile(source))
    box = {n["id"]: n for n in layout["nodes"]}
    y = {name: b["y"] for name, b in box.items()}
    # top to bottom, a join below every branch it joins, the terminal last
    assert y["writer"] < y["reviews"] < y["accuracy"] == y["style"] < y["decide"] < y["summary"]
    assert y["summary"] < y["done"] and box["done"]["terminal"]
    # the fan-out spreads under its router, side by side, without overlapping
    left, right = sorted((box["accuracy"], box["style"]), key=lambda b: b["x"])
    assert left["x"] + left["w"] < right["x"]
    centre = box["reviews"]["x"] + box["reviews"]["w"] / 2
    assert left["x"] < centre < right["x"] + right["w"]
    # the loop edge goes back up on the right of everything between its ends
    (back,) = [e for e in layout["edges"] if e["back"]]
    assert (back["src"], back["dst"], back["loop"]) == ("decide", "writer", "revise")
    lane = back["points"][1][0]
    assert all(lane > b["x"] + b["w"] for b in box.values() if y["writer"] <= b["y"] <= y["decide"])
    assert "loop revise" in back["label"]
    # boxes fit their texts: the await_answers line "waiting for 1 of 2 answers" too
    gate = graph_layout(it.compile(FLOW))["nodes"][1]
    assert gate["kind"] == "await_answers" and gate["w"] >= len("waiting for 99 of 99 answers") * 6


def test_an_edge_across_layers_bends_between_the_nodes() -> None:
    flow = (
        'agent a:\n  model: "scripted"\n\nagent b:\n  model: "scripted"\n\n'
        'agent c:\n  model: "scripted"\n  await: wait_all\n\nrouter r:\n  mode: fan_out_all\n\n'
        "workflow w:\n  entry: r\n  r -> a\n  r -> c\n  a -> b\n  b -> c\n  c -> done\n"
    )
    layout = graph_layout(it.compile(flow))
    box = {n["id"]: n for n in layout["nodes"]}
    (long_edge,) = [e for e in layout["edges"] if (e["src"], e["dst"]) == ("r", "c")]
    assert box["c"]["y"] > box["b"]["y"]  # the join sits below the longer branch
    assert len(long_edge["points"]) == 4  # two bends: one on a's layer, one on b's
    for x, y in long_edge["points"][1:-1]:
        for other in ("a", "b"):
            b = box[other]
            assert not (b["x"] <= x <= b["x"] + b["w"] and b["y"] <= y <= b["y"] + b["h"])


def test_shipped_front_end_is_built_from_js() -> None:
    root = Path(__file__).parents[2]
    sys.path.insert(0, str(root / "scripts"))
    try:
        import build_js
    finally:
        sys.path.pop(0)
    for path, text in build_js.built().items():
        assert path.read_text() == text, f"{path.name} is stale: run python scripts/build_js.py"


async def test_a_failing_run_task_is_recorded_and_shown(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the task that drives a run is never lost: on the run, and in its widget."""
    from iterion_nb.magics import LiveRun
    from iterion_nb.runtime.engine import Engine

    async def broken(self: Engine, resumed: bool = False) -> str:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(Engine, "run", broken)
    run = await session.start(it.compile(FLOW), scenario=scenario({"question": "Tone?"}))
    assert await run.wait(10) == "failed_resumable"
    assert run.error == "internal error: RuntimeError: engine bug"
    assert [e.type for e in await run.events()][-1] == "run_failed"
    live = LiveRun(session, run.id)
    assert "RuntimeError: engine bug" in live.widget.error
    assert "Traceback" in live.widget.error
    live.widget.close()


def test_a_large_graph_stays_legible_and_is_laid_out_fast() -> None:
    """300 nodes of fan-outs, joins and a loop: no box overlaps another, edges run down."""
    import time

    width, depth = 6, 50
    lines = ["router r0:\n  mode: fan_out_all\n"]
    edges = []
    for d in range(depth):
        for w in range(width):
            lines.append(f'agent n{d}_{w}:\n  model: "scripted"\n')
            edges.append(f"  r{d} -> n{d}_{w}")
            edges.append(f"  n{d}_{w} -> j{d}")
        lines.append(f'agent j{d}:\n  model: "scripted"\n  await: wait_all\n')
        if d + 1 < depth:
            lines.append(f"router r{d + 1}:\n  mode: fan_out_all\n")
            edges.append(f"  j{d} -> r{d + 1}")
    edges += [f'  j{depth - 1} -> r0 when "false" as again(2)', f"  j{depth - 1} -> done"]
    source = "\n".join(lines) + "\nworkflow big:\n  entry: r0\n" + "\n".join(edges) + "\n"
    wf = it.compile(source)
    started = time.perf_counter()
    layout = graph_layout(wf)
    took = time.perf_counter() - started
    assert took < 1.0, took
    boxes = layout["nodes"]
    assert len(boxes) == len(wf.nodes) + 1  # and `done`
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"]
                     or a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"])  # fmt: skip
            assert apart, (a["id"], b["id"])
    for edge in layout["edges"]:
        ys = [y for _, y in edge["points"]]
        if edge["back"]:
            assert edge["loop"] == "again" and ys[-1] < ys[0]  # the loop goes back up
        else:
            assert ys == sorted(ys)  # everything else runs down
    assert all(b["x"] >= 0 and b["x"] + b["w"] <= layout["width"] for b in boxes)
