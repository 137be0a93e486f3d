"""Run reports: what they contain, live runs, escaping, and the mistakes around them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.errors import NotFoundError
from iterion_nb.report import ReportError, render, write_report
from iterion_nb.runtime.records import Interaction, Option, Run
from iterion_nb.session import Session

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "iterion-nb"
EVIL = "<script>alert('x')</script>"


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    s = Session(tmp_path / "store", scenario=ROOT / "examples" / "async_questions.scenario.yaml")
    yield s
    await s.close()


async def finished_run(session: Session) -> it.RunHandle:
    run = await session.start(it.compile((ROOT / "examples" / "async_questions.iter").read_text()))
    first = await run.next_question(timeout=10)
    assert first is not None
    await run.answer(first.id, "Formal", answered_by="ada")  # by its label
    second = await run.next_question(timeout=10)
    assert second is not None
    await run.answer(second.id, f"{EVIL} the inbox | the runs", answered_by="cli")
    assert await run.wait(10) == "finished"
    return run


async def test_markdown_report_has_every_section(session: Session) -> None:
    run = await finished_run(session)
    md = await run.report()
    for heading in ("## Summary", "## Workflow", "## Timeline", "## Outputs", "## Questions",
                    "## Events ("):  # fmt: skip
        assert heading in md
    assert "| Status | finished |" in md
    assert f"## Summary\n\n| Run | {run.id} |\n|---|---|\n| Workflow | release_notes |" in md
    assert "```mermaid\nflowchart TD" in md
    assert "| gatherer | finished |" in md and "| finalizer | finished |" in md
    assert '"title": "iterion_nb 0.1"' in md  # the finalizer's output
    # every question: async marked, options, the answer (escaped, pipes too), who, when
    assert (
        "| **async** | gatherer | Should the notes be formal or casual? |"
        " Formal (formal), Casual (casual) |" in md
    )
    assert " Formal (formal), Casual (casual) | Formal (formal) | ada |" in md
    assert "&lt;script&gt;alert('x')&lt;/script&gt; the inbox \\| the runs | cli |" in md
    assert "<script>" not in md.split("## Outputs")[0] + md.split("## Questions")[1]
    assert "Live run" not in md


async def test_html_report_is_self_contained_and_escaped(session: Session, tmp_path: Path) -> None:
    run = await finished_run(session)
    html = await run.report(path=tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text() == html
    assert html.startswith("<!DOCTYPE html>")
    for section in ("summary", "graph", "timeline", "outputs", "questions", "events"):
        assert f'<section id="{section}">' in html
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "http://" not in html and "https://" not in html  # nothing fetched
    assert html.count('data-state="finished"') == 3 and "<svg" in html
    assert 'id="report-arrow"' in html and "url(#report-arrow)" in html
    assert '<span class="async">async</span>' in html


async def test_tokens_cost_and_durations_come_from_the_run(tmp_path: Path) -> None:
    s = Session(tmp_path / "store")
    try:
        store = s.store
        t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        await store.create_run(Run("r1", "w", "h", "running", t0, t0))
        await store.append_event("r1", "node_started", {}, node_id="a")
        question = Interaction(
            "q1", "r1", "a", "human", ("Ship?",), t0, options=(Option("y", "Yes"),)
        )
        await store.add_interaction(question)
        checkpoint = {"outputs": {"a": {"x": 1}}, "usage": {"tokens": 1234, "cost_usd": 0.0567}}
        await store.update_run(r"r1", status="paused_waiting_human", checkpoint=checkpoint)
        md = await render(store, "r1", "md")
        assert "| Tokens | 1234 |" in md and "| Cost | $0.0567 |" in md
        assert "| Questions | 1 (1 pending) |" in md
        assert "| human | a | Ship? | Yes (y) | *pending* |" in md
        assert "| a | waiting |" in md  # waiting on its blocking question
        assert "(the workflow's source is not available)" in md
    finally:
        await s.close()


async def test_a_live_run_gets_a_report_of_its_state_so_far(session: Session) -> None:
    run = await session.start(it.compile((ROOT / "examples" / "async_questions.iter").read_text()))
    assert await run.next_question(timeout=10) is not None
    md = await run.report("md")
    html = await run.report("html")
    assert "> **Live run.** This run is still running" in md
    assert '<div class="live" id="live">' in html
    assert "| gatherer |" in md
    await run.cancel()


async def test_unknown_run_and_unwritable_path_are_clear_errors(
    session: Session, tmp_path: Path
) -> None:
    with pytest.raises(NotFoundError, match="no run 'nope'"):
        await render(session.store, "nope", "md")
    with pytest.raises(ReportError, match="unknown report format 'pdf'"):
        await render(session.store, "nope", "pdf")
    with pytest.raises(ReportError, match="it is a directory"):
        write_report("x", tmp_path)
    # the directories on the way are made, as the CLI and the notebook do; a file there cannot be
    assert write_report("x", tmp_path / "missing" / "r.md").read_text() == "x"
    (tmp_path / "afile").write_text("")
    with pytest.raises(ReportError, match=r"afile/r\.md: a part of its directory is a file"):
        write_report("x", tmp_path / "afile" / "r.md")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=60)


async def test_cli_report_on_the_file_and_through_a_holder(
    session: Session, tmp_path: Path
) -> None:
    run = await finished_run(session)
    store = str(session.store.path)  # type: ignore[attr-defined]
    # this process holds the file and serves it: the CLI goes through the holder
    out = tmp_path / "r.html"
    done = await asyncio.to_thread(cli, "report", run.id, "-o", str(out), "--store", store)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote the html report of run {run.id} to {out}\n"
    assert '<section id="questions">' in out.read_text()
    await session.close()
    # nobody holds it now: the CLI opens the file itself; Markdown to stdout
    done = await asyncio.to_thread(cli, "report", run.id, "--store", store)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"# Run {run.id} · release_notes · finished")
    bad = await asyncio.to_thread(cli, "report", "nope", "--store", store)
    assert (bad.returncode, bad.stderr) == (1, "iterion-nb: no run 'nope'\n")
    (tmp_path / "afile").write_text("")  # a missing folder is made; one under a file cannot be
    made = await asyncio.to_thread(
        cli, "report", run.id, "-o", str(tmp_path / "new" / "r.md"), "--store", store
    )
    assert made.returncode == 0 and (tmp_path / "new" / "r.md").read_text().startswith("# Run ")
    bad = await asyncio.to_thread(
        cli, "report", run.id, "-o", str(tmp_path / "afile" / "r.md"), "--store", store
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith("iterion-nb: cannot write the report to ")
    assert "Traceback" not in bad.stderr
    bad = await asyncio.to_thread(cli, "report", run.id, "--format", "pdf", "--store", store)
    assert bad.returncode == 2 and "invalid choice: 'pdf'" in bad.stderr


def test_durations_read_well() -> None:
    from iterion_nb.report.build import seconds

    assert [seconds(x) for x in (0.421, 12.34, 245, 7380)] == [
        "0.42 s", "12.3 s", "4 min 05 s", "2 h 03 min"
    ]  # fmt: skip


async def test_a_failing_tool_node_is_a_failed_step_in_the_timeline(tmp_path: Path) -> None:
    flow = 'tool broken:\n  command: "exit 3"\n\nworkflow w:\n  entry: broken\n  broken -> done\n'
    session = Session(tmp_path / "store", workdir=tmp_path)
    try:
        run = await session.start(it.compile(flow))
        assert await run.wait(10) == "failed_resumable"
        md = await run.report()
    finally:
        await session.close()
    row = next(line for line in md.splitlines() if line.startswith("| broken |"))
    assert row.startswith("| broken | failed |"), row
    assert "| — |" not in row  # the step is closed: it has an end time


async def test_the_mermaid_graph_shows_each_node_s_state_in_colour_and_words(
    tmp_path: Path,
) -> None:
    """Same states as the run widget: finished, waiting (with what for), pending; skipped."""
    session = Session(
        tmp_path / "store", scenario=ROOT / "examples" / "async_questions.scenario.yaml"
    )
    try:
        run = await session.start(
            it.compile((ROOT / "examples" / "async_questions.iter").read_text())
        )
        first = await run.next_question(timeout=10)
        assert first is not None
        await run.answer(first.id, "formal")
        for _ in range(200):  # the gate counts one of two answers in
            md = await run.report()
            if "waiting for 1 of 2 answers" in md:
                break
            await asyncio.sleep(0.02)
        mermaid = md.split("```mermaid\n")[1].split("```")[0]
        assert "gatherer<br/><small>agent, interaction: async · finished</small>" in mermaid
        assert "· waiting for 1 of 2 answers</small>" in mermaid
        assert "finalizer<br/><small>agent · pending</small>" in mermaid
        for state in ("pending", "running", "waiting", "finished", "failed", "skipped"):
            assert f"  classDef {state} fill:" in mermaid
        assert "  class n_gatherer finished" in mermaid
        assert "  class n_gate waiting" in mermaid
        assert "  class n_finalizer pending" in mermaid
        await run.cancel()
    finally:
        await session.close()


async def test_a_failed_node_is_failed_in_both_reports_and_the_rest_skipped(
    tmp_path: Path,
) -> None:
    flow = (
        'tool broken:\n  command: "exit 3"\n\ntool after:\n  command: "true"\n\n'
        "workflow w:\n  entry: broken\n  broken -> after\n  after -> done\n"
    )
    session = Session(tmp_path / "store", workdir=tmp_path)
    try:
        run = await session.start(it.compile(flow))
        assert await run.wait(10) == "failed_resumable"
        html = await run.report("html")
        md = await run.report("md")
    finally:
        await session.close()
    assert '<g class="node" data-node="broken" data-state="failed">' in html
    # resumable: the node after it may still run, so it is pending, not skipped
    assert '<g class="node" data-node="after" data-state="pending">' in html
    assert "  class n_broken failed" in md and "  class n_after pending" in md


async def test_budget_limits_show_beside_what_was_used(tmp_path: Path) -> None:
    flow = (
        'agent a:\n  model: "scripted"\n  user: "hi"\n\nworkflow w:\n  entry: a\n'
        '  budget:\n    max_tokens: 5000\n    max_cost_usd: 2\n    max_duration: "10m"\n'
        "  a -> done\n"
    )
    scenario = {"nodes": {"a": [{"output": "hello", "tokens": {"in": 30, "out": 12},
                                 "cost_usd": 0.25}]}}  # fmt: skip
    session = Session(tmp_path / "store", scenario=scenario)
    try:
        run = await session.start(it.compile(flow))
        assert await run.wait(10) == "finished"
        md = await run.report()
    finally:
        await session.close()
    assert "| Tokens | 42 of 5000 (budget) |" in md
    assert "| Cost | $0.2500 of $2.00 (budget) |" in md
    assert "of 10 min 00 s (budget) |" in md


async def test_an_option_answer_reads_as_its_label(session: Session) -> None:
    run = await session.start(it.compile((ROOT / "examples" / "async_questions.iter").read_text()))
    first = await run.next_question(timeout=10)
    assert first is not None and first.options
    await run.answer(first.id, "formal")
    md = await run.report()
    assert "| Formal (formal) |" in md
    html = await run.report("html")
    assert "<td>Formal (formal)</td>" in html
    await run.cancel()


async def test_reports_say_which_questions_expired_or_were_withdrawn(tmp_path: Path) -> None:
    s = Session(tmp_path / "store")
    try:
        store = s.store
        t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        await store.create_run(Run("r1", "w", "h", "running", t0, t0))
        for iid, text in (("q1", "Ship?"), ("q2", "Tone?"), ("q3", "Date?")):
            await store.add_interaction(Interaction(iid, "r1", "a", "async", (text,), t0))
        await store.retract("q1", "decided <b>myself</b>")
        await store.add_interaction(
            Interaction("q4", "r1", "a", "async", ("Late?",), t0, expires_at=t0)
        )
        await store.expire_due("r1")
        md = await render(store, "r1", "md")
        assert "| Questions | 4 (2 pending, 1 expired, 1 withdrawn) |" in md
        assert "| **async** | a | Ship? |  | withdrawn by its agent: decided &lt;b&gt;myself" in md
        assert "| **async** | a | Late? |  | expired unanswered |" in md
        html = await render(store, "r1", "html")
        assert "withdrawn by its agent: decided &lt;b&gt;myself&lt;/b&gt;" in html
        assert "expired unanswered" in html
    finally:
        await s.close()


def test_executing_time_leaves_out_the_time_a_dead_process_left_the_run() -> None:
    """Killed 5 s in, answered meanwhile, resumed 200 s in and done 10 s later: 15 s executed."""
    from iterion_nb.runtime.records import Event
    from iterion_nb.view.usage import usage

    t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    log = [
        ("run_started", 0), ("node_finished", 5),  # then kill -9: no stop written
        ("interaction_answered", 100),  # anyone writes answers, running the run or not
        ("run_resumed", 200), ("node_finished", 208), ("run_finished", 210),
    ]  # fmt: skip
    events = [
        Event("r1", n, kind, t0 + timedelta(seconds=at)) for n, (kind, at) in enumerate(log, 1)
    ]
    assert usage(events, "finished").seconds == 15
    assert usage(events[:3], "interrupted").seconds == 5  # not until the answer came


async def test_the_json_report_holds_the_same_facts_as_the_others(
    session: Session, tmp_path: Path
) -> None:
    import json

    run = await finished_run(session)
    data = json.loads(await run.report("json"))
    assert (data["run"]["id"], data["run"]["status"], data["live"]) == (run.id, "finished", False)
    assert data["summary"]["Workflow"] == "release_notes"
    assert data["summary"]["Questions"].startswith("2 ")
    assert data["nodes"]["gatherer"]["state"] == "finished"
    assert [v["node"] for v in data["timeline"]][:1] == ["gatherer"]
    assert all(v["state"] == "finished" and v["ended"] for v in data["timeline"])
    assert data["outputs"]["finalizer"]["title"] == "iterion_nb 0.1"
    answers = {q["answered_by"]: q["answers"] for q in data["questions"]}
    assert answers["ada"] == "formal" and EVIL in answers["cli"]  # data, as given
    assert data["events"][0]["type"] == "run_started" and data["events"][-1]["type"] == (
        "run_finished"
    )
    store = str(session.store.path)  # type: ignore[attr-defined]
    # the CLI: --json, -o FILE.json, and two formats at once refused
    done = await asyncio.to_thread(cli, "report", run.id, "--json", "--store", store)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["id"] == run.id
    out = tmp_path / "r.json"
    done = await asyncio.to_thread(cli, "report", run.id, "-o", str(out), "--store", store)
    assert done.stdout == f"wrote the json report of run {run.id} to {out}\n"
    assert json.loads(out.read_text())["summary"]["Status"] == "finished"
    both = await asyncio.to_thread(
        cli, "report", run.id, "--json", "--format", "md", "--store", store
    )
    assert (both.returncode, both.stderr) == (
        2, "iterion-nb: --json and --format md ask for two formats: give one\n"
    )  # fmt: skip
