"""The magics through a real IPython shell: define, run, answer, wait; mistakes in one line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from iterion_nb.ir import model as m
from iterion_nb.magics import LiveRun

WORKFLOW = """\
vars:
  topic: string

schema draft:
  text: string

agent writer:
  model: "scripted"
  interaction: async
  user: "Write about {{vars.topic}}."
  output: draft

await_answers gate:
  from: writer
  timeout: "5m"

workflow notes:
  entry: writer
  writer -> gate
  gate -> done
"""

SCENARIO = {
    "nodes": {
        "writer": [
            {"tool_calls": [{"name": "ask_user_async", "input": {
                "question": "Tone?", "options": [{"id": "formal", "label": "Formal"}]}}]},
            {"text": "drafting"},
            {"output": {"text": "a draft"}},
        ]
    }
}  # fmt: skip


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.user_ns.update({"scenario": SCENARIO, "store": str(tmp_path / "store"), "WF": WORKFLOW})
    run(ip, "%load_ext iterion_nb")
    yield ip
    run(ip, "%unload_ext iterion_nb")


def run(ip: InteractiveShell, code: str) -> Any:
    """Run a cell; return its result, raising what it raised (user errors stay UsageErrors)."""
    result = ip.run_cell(code)
    return result


def ok(ip: InteractiveShell, code: str) -> Any:
    result = ip.run_cell(code)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def asking(shell: InteractiveShell) -> Any:
    """A run of WORKFLOW started by the magic, as ``r``, its first question asked, as ``q``."""
    handle = ok(
        shell, "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    )
    shell.user_ns["r"] = handle
    ok(shell, "q = await r.next_question(timeout=10)")
    return handle


def test_a_cell_compiles_and_binds_the_workflow(shell: InteractiveShell) -> None:
    assert ok(shell, "%%iterion\n" + WORKFLOW) is None
    assert isinstance(shell.user_ns["notes"], m.Workflow)  # bound to the workflow's name
    ok(shell, "%%iterion other_name\n" + WORKFLOW)
    assert shell.user_ns["other_name"].name == "notes"


def test_diagnostics_are_a_table_with_line_numbers_not_a_traceback(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = WORKFLOW.replace('model: "scripted"', "model: 1").replace(
        "entry: writer", "entry: nope"
    )
    result = run(shell, "%%iterion broken\n" + broken)
    out, err = capsys.readouterr()
    assert not result.success
    assert "line:col" in out and "C352" in out and "C008" in out
    # numbered as the editor shows the cell: the %%iterion line is line 1
    (row,) = [line for line in out.splitlines() if "C352" in line]
    assert row.startswith("9:10 ") and row.endswith("model: 1")
    lines = ("%%iterion broken\n" + broken).splitlines()
    assert lines[9 - 1].strip() == "model: 1"
    assert "UsageError: <cell broken>: the workflow does not compile" in err
    assert "Traceback" not in out + err
    assert "broken" not in shell.user_ns


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%%iterion x --bogus", "unrecognized arguments: --bogus"),
        ("%%iterion x --run --backend nope --scenario scenario", "unknown backend 'nope'"),
        ("%%iterion x --run --scenario scenario", "variable 'topic' (string) has no default"),
        ("%%iterion x --run --var topic=tea --scenario missing_name", "name 'missing_name' is not"),
        ("%%iterion x --run --var topic=tea --scenario '\"nofile.yaml\"'", "no scenario file"),
        ("%%iterion x --run --var nope=1 --var topic=t --scenario scenario", "unknown variable"),
        ("%%iterion x --var topic", "--var expects KEY=VALUE"),
    ],
)
def test_usage_mistakes_are_one_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    result = run(shell, f"{line} --store $store\n" + WORKFLOW)
    _, err = capsys.readouterr()
    assert not result.success
    assert message in err, err
    assert err.count("\n") == 1 and err.startswith("UsageError:"), err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%iterion wait nosuchrun", "no run 'nosuchrun'"),
        ("%iterion answer nosuchrun q1 yes", "no run 'nosuchrun'"),
        ("%iterion cancel nosuchrun", "no run 'nosuchrun'"),
        ("%iterion resume nosuchrun", "no run 'nosuchrun'"),
        ("%iterion inbox nosuchrun", "no run 'nosuchrun'"),
        ("%iterion bogus", "unknown command 'bogus'"),
        ("%iterion", "%iterion runs | show RUN | inbox"),
        ("%iterion wait", "the following arguments are required: run_id"),
    ],
)
def test_line_magic_mistakes_are_one_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    ok(shell, "import iterion_nb as it\nawait it.Session(store).close()")  # the store is there
    result = run(shell, f"{line} --store $store" if line != "%iterion" else line)
    _, err = capsys.readouterr()
    assert not result.success
    assert message in err, err
    assert "Traceback" not in err


STATUSES = (
    "'running', 'paused_waiting_human', 'finished', 'failed', 'failed_resumable', 'cancelled',"
    " 'interrupted'"
)


LIMIT = "argument --limit: must be a whole number from 1 to 10,000, not"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("runs --limit many", f"{LIMIT} 'many'"),
        ("runs --limit 0", f"{LIMIT} '0'"),
        ("runs --limit 10001", f"{LIMIT} '10001'"),
        (
            "runs --status bogus",
            f"argument --status: invalid choice: 'bogus' (choose from {STATUSES})",
        ),
    ],
)
def test_runs_takes_a_status_and_a_limit_as_the_cli_does(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str, said: str
) -> None:
    """A status that is none, a limit of 0: one line each, as the CLI says them."""
    ok(shell, "import iterion_nb as it\nawait it.Session(store).close()")  # the store is there
    result = run(shell, f"%iterion {line} --store $store")
    assert not result.success
    assert capsys.readouterr().err == f"UsageError: %iterion runs: {said}\n"
    table = ok(shell, "%iterion runs --status finished --limit 10000 --store $store")
    assert repr(table).startswith("0 run(s) with status finished")


def test_a_store_that_is_not_there_is_refused_and_not_made(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in --store makes no empty store, nor becomes the store the next magic uses."""
    typo = tmp_path / "x" / "typo-store"
    shell.user_ns["typo"] = str(typo)
    handle = ok(shell, "%%iterion --run --store $store\n" + FORM_GATE)
    shell.user_ns["r"] = handle
    assert ok(shell, "%iterion wait {r.id}") == "paused_waiting_human"
    capsys.readouterr()
    for line in ("%iterion runs --store $typo", "%iterion wait {r.id} --store $typo"):
        result = run(shell, line)
        assert not result.success
        assert capsys.readouterr().err == (
            f"UsageError: %iterion: no run store at {typo}/iterion.duckdb (nothing was created:"
            " %%iterion --run makes one; --store or ITERION_NB_STORE names another)\n"
        )
    assert not (tmp_path / "x").exists()
    # the store refused is not the one the next magic uses: the one before is
    table = ok(shell, "%iterion runs")
    assert repr(table).startswith("1 run(s)") and handle.id in repr(table)
    # what starts runs makes the store
    made = ok(shell, "%%iterion --run --store $typo\n" + FORM_GATE)
    assert (typo / "iterion.duckdb").is_file()
    assert made.id in repr(ok(shell, "%iterion runs --store $typo"))
    shell.user_ns["made"] = made
    assert (
        ok(shell, "%iterion wait {made.id}") == "paused_waiting_human"
    )  # (in $typo: the last used)
    assert ok(shell, "%iterion cancel {made.id}") == "cancelled"
    assert ok(shell, "%iterion cancel {r.id} --store $store") == "cancelled"


def test_run_answer_wait_through_the_magics(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = ok(
        shell, "%%iterion --run --var topic=tea --scenario scenario --store $store\n" + WORKFLOW
    )
    assert isinstance(handle, LiveRun)
    shell.user_ns["r"] = handle
    ok(shell, "q = await r.next_question(timeout=10)")
    assert shell.user_ns["q"].questions == ("Tone?",)
    table = ok(shell, "%iterion runs")
    assert handle.id in repr(table) and "notes" in repr(table)
    said = ok(shell, "%iterion answer {r.id} {q.id} formal")
    assert said == {
        "queued": True,
        "resumed": False,
        "run_status": "running",
        "resume_needed": False,
        "awaiting_worker": False,
    }
    assert repr(said) == "Sent — the agent reads it at its next turn"
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    assert handle.outputs["writer"] == {"text": "a draft"}
    assert handle.outputs["gate"]["answers"][0]["answer"] == "formal"
    # the display of a run handle is the live run widget, which shows the end state
    data, _ = handle._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"].startswith(f"Run {handle.id}: the live run widget")
    # answering again is a conflict, said in one line: who answered, what
    result = run(shell, "%iterion answer {r.id} {q.id} casual")
    assert not result.success
    assert capsys.readouterr().err == (
        f"UsageError: %iterion answer: question '{shell.user_ns['q'].id}' is already answered"
        " by magic: 'formal' ('Formal') — nothing sent\n"
    )
    # a finished run has nothing to cancel: said as the CLI says it, not returned as a status
    assert not run(shell, "%iterion cancel {r.id}").success
    assert capsys.readouterr().err == (
        f"UsageError: %iterion cancel: run {handle.id} already finished; nothing to cancel\n"
    )


def test_a_second_answer_says_who_answered_and_what_as_the_cli_does(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = asking(shell)
    ok(shell, "await r.answer(q.id, 'formal', answered_by='ada')")
    capsys.readouterr()
    result = run(shell, "%iterion answer {r.id} {q.id} casual")
    assert not result.success
    iid = shell.user_ns["q"].id
    assert capsys.readouterr().err == (
        f"UsageError: %iterion answer: question '{iid}' is already answered by ada:"
        " 'formal' ('Formal') — nothing sent\n"
    )
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    assert handle.outputs["gate"]["answers"][0]["answer"] == "formal"


def test_wait_awaits_without_blocking_the_loop(shell: InteractiveShell) -> None:
    """While `%iterion wait` waits, other tasks on the loop keep running."""
    handle = ok(
        shell, "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    )
    shell.user_ns["r"] = handle
    ok(shell, "import asyncio\nticks = []\nasync def tick():\n    while True:\n"
              "        ticks.append(1)\n        await asyncio.sleep(0.01)\n"
              "ticker = asyncio.ensure_future(tick())\nawait asyncio.sleep(0)")  # fmt: skip
    ok(shell, "q = await r.next_question(timeout=10)")
    ok(shell, "async def later():\n    await asyncio.sleep(0.3)\n"
              "    await r.answer(q.id, 'formal')\nanswerer = asyncio.ensure_future(later())\n"
              "await asyncio.sleep(0)")  # fmt: skip
    before = len(shell.user_ns["ticks"])
    assert ok(shell, "%iterion wait {r.id}") == "finished"  # answered by a task during the wait
    assert len(shell.user_ns["ticks"]) - before >= 10
    ok(shell, "ticker.cancel()")


def test_cancel_resume_and_timeout(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = asking(shell)
    result = run(shell, "%iterion wait {r.id} --timeout 0.2")
    assert not result.success
    assert "still running after 0.2 s" in capsys.readouterr().err
    assert ok(shell, "%iterion cancel {r.id}") == "cancelled"
    resumed = ok(shell, "%iterion resume {r.id}")
    assert isinstance(resumed, LiveRun) and resumed.id == handle.id
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"


def test_resume_of_a_run_another_session_owns_is_one_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # another owner in this process (another kernel would be another process: same rule)
    ok(shell, "import iterion_nb as it\nother = it.Session(store)")
    ok(shell, "h = await other.start(it.compile(WF), vars={'topic': 't'}, scenario=scenario)")
    ok(shell, "q = await h.next_question(timeout=10)")
    result = run(shell, "%iterion resume {h.id} --store $store")
    _, err = capsys.readouterr()
    assert not result.success
    assert err.startswith("UsageError: %iterion resume: run ")
    # the owner is named as what it is: another session of this very kernel
    assert f"is owned by another session of this process ({os.getpid()} on host" in err, err
    assert "close that session to resume the run here" in err
    assert err.count("\n") == 1, err
    ok(shell, "await h.answer(q.id, 'formal')")
    assert ok(shell, "await h.wait(10)") == "finished"
    ok(shell, "await other.close()")


def test_unload_and_reload(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    handle = ok(
        shell, "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    )
    shell.user_ns["r"] = handle
    ok(shell, "%unload_ext iterion_nb")
    result = run(shell, "%iterion runs")
    assert not result.success
    assert "Line magic function `%iterion` not found" in capsys.readouterr().err
    ok(shell, "%load_ext iterion_nb")
    # the run started before the reload is still reachable (same store, same session)
    ok(shell, "q = await r.next_question(timeout=10)")
    assert ok(shell, "%iterion answer {r.id} {q.id} formal")["queued"] is True
    assert ok(shell, "%iterion wait {r.id}") == "finished"


def test_inbox_magic_lists_pending_questions(shell: InteractiveShell) -> None:
    handle = asking(shell)
    inbox = ok(shell, "%iterion inbox {r.id}")
    assert [q["questions"] for q in inbox.pending] == [["Tone?"]]
    everything = ok(shell, "%iterion inbox")
    assert handle.id in {q["run_id"] for q in everything.pending}
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    inbox.close()
    everything.close()


def test_report_magic(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = asking(shell)
    live = ok(shell, "%iterion report {r.id}")
    assert "Live run" in live.data  # still running: its state so far, marked
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    md = ok(shell, "%iterion report {r.id}")
    assert md.data.startswith(f"# Run {handle.id} · notes · finished")
    html = ok(shell, "%iterion report {r.id} --format html")
    assert '<section id="questions">' in html.data
    data = ok(shell, "%iterion report {r.id} --format json")  # the report's data, for code
    assert isinstance(data, dict) and handle.id in json.dumps(data)
    shell.user_ns["target"] = str(tmp_path / "r.html")
    said = ok(shell, "%iterion report {r.id} -o $target")
    assert said == f"wrote the report of run {handle.id} to {tmp_path / 'r.html'}"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    shell.user_ns["nested"] = str(tmp_path / "new" / "dir" / "r.md")
    ok(shell, "%iterion report {r.id} -o $nested")  # the directories on the way are made
    assert (tmp_path / "new" / "dir" / "r.md").read_text().startswith(f"# Run {handle.id}")
    shell.user_ns["blocked"] = str(tmp_path / "r.html" / "r.md")  # under a file: cannot be
    result = run(shell, "%iterion report {r.id} -o $blocked")
    assert not result.success
    err = capsys.readouterr().err
    assert (
        f"cannot write the report to {tmp_path}/r.html/r.md: a part of its directory is a file"
        in (err)
        and "Traceback" not in err
    )


def test_answer_if_pending_says_why_a_withdrawn_question_takes_no_answer(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once 'Already answered by someone: None'; and a question of another run was looked
    up there (an answer without --if-pending is refused: no such question in this run)."""
    asking(shell)
    ok(shell, "await r.session.store.retract(q.id, 'no longer needed')")
    said = ok(shell, "%iterion answer {r.id} {q.id} casual --if-pending")
    assert repr(said) == (
        "The question was withdrawn by its asker: no longer needed — nothing sent"
    )
    assert (said["queued"], said["resumed"]) == (False, False)
    table = repr(ok(shell, "%iterion questions {r.id}"))
    assert "(withdrawn: no longer needed)" in table and "None" not in table
    other = ok(
        shell, "%%iterion --run --var topic=u --scenario scenario --store $store\n" + WORKFLOW
    )
    shell.user_ns["other"] = other
    capsys.readouterr()
    refused = run(shell, "%iterion answer {other.id} {q.id} casual --if-pending")
    assert not refused.success
    err = capsys.readouterr().err
    assert f"no question '{shell.user_ns['q'].id}' in run '{other.id}'" in err, err
    assert "Traceback" not in err
    # withdrawn because its run ended (as a run that finishes withdraws what it left open):
    # not blamed on its asker
    ok(shell, "q2 = await other.next_question(timeout=10)")
    ok(shell, "from iterion_nb.runtime.lifecycle import run_ended_reason")
    ok(shell, "await r.session.store.retract(q2.id, run_ended_reason(other.id, 'failed'))")
    said = ok(shell, "%iterion answer {other.id} {q2.id} casual --if-pending")
    assert repr(said) == (
        f"The question was withdrawn: its run {other.id} failed before it was answered, and"
        " nothing would read an answer — nothing sent"
    )
    ok(shell, "await other.cancel()")


def test_answer_if_pending_leaves_an_answered_question_alone(shell: InteractiveShell) -> None:
    """Code that answers answers only what is still pending, and says so (a click came first)."""
    handle = asking(shell)
    ok(shell, "await r.answer(q.id, 'formal', answered_by='ada')")  # the person clicked
    said = ok(shell, "%iterion answer {r.id} {q.id} casual --if-pending")
    assert repr(said) == "Already answered by ada: 'Formal' — nothing sent"
    assert (said["queued"], said["resumed"]) == (False, False)  # nothing sent
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    assert handle.outputs["gate"]["answers"][0]["answer"] == "formal"


def test_an_answer_from_the_magic_says_magic(shell: InteractiveShell) -> None:
    asking(shell)
    ok(shell, "%iterion answer {r.id} {q.id} formal --if-pending")
    asked = ok(shell, "await r.session.store.get_interaction(q.id)")
    assert asked.answered_by == "magic"
    assert ok(shell, "%iterion wait {r.id}") == "finished"


FORM_GATE = """\
schema verdict:
  ship: bool

human gate:
  instructions: "Ship it?"
  output: verdict

workflow shipping:
  entry: gate
  gate -> done
"""


def test_a_form_is_answered_with_json_and_text_for_it_says_how(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = ok(shell, "%%iterion --run --store $store\n" + FORM_GATE)
    shell.user_ns["r"] = handle
    assert ok(shell, "%iterion wait {r.id}") == "paused_waiting_human"
    ok(shell, "q = (await r.pending_questions())[0]")
    ids = f"{handle.id} {shell.user_ns['q'].id}"  # (braces in a line stop IPython's {expansion})
    as_text = run(shell, f"""%iterion answer {ids} {{"ship": true}}""")
    assert not as_text.success
    err = capsys.readouterr().err
    assert "'ship' must be bool" in err and "give a form's fields as JSON with --json" in err
    not_json = run(shell, "%iterion answer {r.id} {q.id} --json yes please")
    assert not not_json.success
    assert "%iterion answer --json: the answer is not JSON" in capsys.readouterr().err
    twice = run(shell, f"""%iterion answer {ids} --json '{{"ship": true, "ship": false}}'""")
    assert not twice.success  # which one would count is up to each parser: neither does
    said_twice = 'the answer repeats the key "ship" in one object'
    assert said_twice in capsys.readouterr().err
    said = ok(shell, f"""%iterion answer {ids} --json '{{"ship": true}}'""")
    assert said["resumed"] is True
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    assert handle.outputs["gate"] == {"ship": True}


def test_resume_reuses_the_recorded_scenario_and_says_so(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = asking(shell)
    assert ok(shell, "%iterion cancel {r.id}") == "cancelled"
    capsys.readouterr()
    resumed = ok(shell, "%iterion resume {r.id}")  # no --scenario: the recorded one
    out = capsys.readouterr().out
    assert f"resuming run {handle.id} with the scenario it recorded when it started" in out
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    assert resumed.outputs["writer"] == {"text": "a draft"}


def test_resume_of_a_scripted_run_without_a_scenario_is_one_clear_error(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run recorded before runs kept their scenario: say what to do, before anything runs."""
    ok(shell, "import iterion_nb as it\nfrom datetime import datetime, UTC\n"
              "from iterion_nb.runtime.records import Run\nold = it.Session(store)")  # fmt: skip
    ok(shell, "wf = it.compile(WF)\nnow = datetime.now(UTC)\n"
              "await old.store.create_run(Run('oldrun', 'notes', wf.source_hash, 'running',"
              " now, now, source=WF, vars={'topic': 't'}))\n"
              "await old.store.update_run('oldrun', status='cancelled')\n"
              "await old.close()")  # fmt: skip
    result = run(shell, "%iterion resume oldrun --store $store")
    err = capsys.readouterr().err
    assert not result.success
    assert err == (
        "UsageError: %iterion resume: run 'oldrun' uses the scripted model and recorded no"
        " scenario: pass --scenario EXPR (a dict or a file)\n"
    )
    resumed = ok(shell, "%iterion resume oldrun --scenario scenario --store $store")
    assert "with the scenario given (--scenario)" in capsys.readouterr().out
    shell.user_ns["R"] = resumed
    ok(shell, "q = await R.next_question(timeout=10)")
    ok(shell, "await R.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait oldrun --store $store") == "finished"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%iterion wait {failing.id}", "cannot expand {failing.id}: NameError: name 'failing'"),
        ("%iterion answer {failing.id} q1 yes", "cannot expand {failing.id}: NameError"),
        ("%iterion runs --store $nowhere", "cannot expand $nowhere: NameError"),
    ],
)
def test_a_value_ipython_could_not_expand_is_named(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    result = run(shell, line)
    err = capsys.readouterr().err
    assert not result.success
    assert err.startswith("UsageError: %iterion ") and message in err, err
    assert err.count("\n") == 1 and "no run" not in err


def test_a_cell_magic_store_that_did_not_expand_is_named(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(shell, "%%iterion --store $nowhere\n" + WORKFLOW)
    assert not result.success
    assert "UsageError: %%iterion: cannot expand $nowhere" in capsys.readouterr().err


def test_run_equals_underscore_warns_when_the_notebook_took_underscore(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell("for _ in range(2):\n    pass", store_history=True)
    capsys.readouterr()
    handle = ok(
        shell, "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    )
    out = capsys.readouterr().out
    assert "this notebook assigned `_`, so IPython no longer updates it" in out
    assert "run = Out[" in out
    shell.user_ns.pop("_")  # as `del _` does: IPython's `_` is back
    shell.user_ns["r"] = handle
    ok(shell, "q = await r.next_question(timeout=10)")
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"


def test_questions_lists_who_answered_what_and_show_displays_a_run(
    shell: InteractiveShell,
) -> None:
    handle = ok(
        shell, "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    )
    shell.user_ns["r"] = handle
    asked = ok(shell, "%iterion questions {r.id} --wait 1")
    assert [q.questions for q in asked] == [("Tone?",)]
    assert "writer  async  Tone?     (pending)" in repr(asked)
    shell.user_ns["asked"] = asked
    ok(shell, "await r.answer(asked[0].id, 'formal', answered_by='ada')")
    assert "writer  async  Tone?     Formal  ada" in repr(ok(shell, "%iterion questions {r.id}"))
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    shown = ok(shell, "%iterion show {r.id}")
    assert isinstance(shown, LiveRun) and shown.id == handle.id
    shown.widget.close()


def test_questions_waits_for_what_was_asked_then_says_what_is_missing(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = ok(
        shell, "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    )
    shell.user_ns["r"] = handle
    result = run(shell, "%iterion questions {r.id} --wait 2 --timeout 0.5")
    assert not result.success
    err = capsys.readouterr().err
    assert "asked 1 question(s) in 0.5 s, not 2" in err and err.count("\n") == 1
    ok(shell, "await r.cancel()")


def test_the_magics_on_a_postgresql_store(
    shell: InteractiveShell, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "schema=magics_pg"
    shell.user_ns["pg"] = url
    final = {"output": {"text": "a draft"}}  # twice: an answer landing late buys a turn
    shell.user_ns["sc"] = {"nodes": {"writer": [SCENARIO["nodes"]["writer"][0], final, final]}}
    handle = ok(shell, "%%iterion --run --var topic=t --scenario sc --store $pg\n" + WORKFLOW)
    shell.user_ns["r"] = handle
    ok(shell, "q = await r.next_question(timeout=10)")
    table = ok(shell, "%iterion runs --store $pg")
    assert handle.id in repr(table)
    assert "***" in repr(table) or "SECRET" not in repr(table)  # never a password
    # a schema that holds no store is refused, not made (nor used by the next magic)
    from iterion_nb.store.location import mask_url

    typo = shell.user_ns["typo_pg"] = url.replace("schema=magics_pg", "schema=magics_typo")
    result = run(shell, "%iterion runs --store $typo_pg")
    assert not result.success
    assert capsys.readouterr().err == (
        f"UsageError: %iterion: no run store in schema 'magics_typo' of {mask_url(typo)}"
        " (nothing was created: %%iterion --run makes one; ?schema=NAME names another)\n"
    )
    assert handle.id in repr(ok(shell, "%iterion runs"))
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    result = run(shell, "%iterion runs --store mysql://u:pw@db/x")
    assert not result.success
    err = capsys.readouterr().err
    assert "mysql" in err and "pw" not in err and "Traceback" not in err


def test_pinned_answers_through_the_magics(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Export a run's answers, then runs that nobody answers: from the file, from the run."""
    launch = "%%iterion --run --var topic=tea --scenario scenario --store $store"
    first = ok(shell, launch + "\n" + WORKFLOW)
    shell.user_ns.update({"r": first, "pins": str(tmp_path / "pins.yaml")})
    ok(shell, "q = await r.next_question(timeout=10)")
    ok(shell, "%iterion answer {r.id} {q.id} Formal")  # by its label: kept as its id
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    table = ok(shell, "%iterion answers {r.id}")
    assert 'writer  Tone?     formal   "formal"' in repr(table)
    said = ok(shell, "%iterion answers {r.id} --export $pins")
    assert said == f"wrote 1 answer(s) of run {first.id} to {tmp_path / 'pins.yaml'}"
    for how in ("--answers $pins", "--answers-from {r.id}"):
        again = ok(shell, f"{launch} {how}\n" + WORKFLOW)
        shell.user_ns["again"] = again
        assert ok(shell, "await again.wait(timeout=10)") == "finished"  # nobody answered
        assert again.outputs["gate"]["answers"][0]["answer"] == "formal"
        asked = ok(shell, "await again.questions()")
        assert [(q.answers, q.answered_by) for q in asked] == [("formal", "replay")]
    (tmp_path / "bad.yaml").write_text("answers:\n  - node: writer\n")
    capsys.readouterr()
    result = run(
        shell, f"%%iterion --run --var topic=tea --answers {tmp_path / 'bad.yaml'}\n" + WORKFLOW
    )
    _, err = capsys.readouterr()
    assert not result.success and err.count("\n") == 1 and err.startswith("UsageError:"), err
    assert "bad.yaml: answer 1: 'question' must be a non-empty string" in err
    (tmp_path / "stray.yaml").write_text(
        "answers:\n  - node: writr\n    question: Tone?\n    answer: x\n"
    )
    result = run(
        shell, f"%%iterion --run --var topic=tea --answers {tmp_path / 'stray.yaml'}\n" + WORKFLOW
    )
    _, err = capsys.readouterr()
    assert not result.success and err.count("\n") == 1, err
    assert "stray.yaml: answer 1: node 'writr' is not in workflow 'notes'; did you mean" in err


def test_a_cell_run_takes_a_preset(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    presets = 'presets:\n  tea:\n    topic: "tea"\n\n'
    cell = "%%iterion --run --preset tea --scenario scenario --store $store\n" + presets + WORKFLOW
    handle = ok(shell, cell)
    shell.user_ns["r"] = handle
    ok(shell, "q = await r.next_question(timeout=10)")
    assert ok(shell, "(await r.refresh()).vars") == {"topic": "tea"}
    result = run(shell, "%%iterion --run --preset coffee --store $store\n" + presets + WORKFLOW)
    _, err = capsys.readouterr()
    assert not result.success and err.startswith("UsageError:") and err.count("\n") == 1
    assert "no preset 'coffee' in workflow 'notes' (presets: tea)" in err
    # a name with an escape sequence is shown escaped, not sent to the terminal or the page
    shell.user_ns["odd"] = "a\x1b[31mb"
    result = run(shell, "%%iterion --run --preset $odd --store $store\n" + presets + WORKFLOW)
    _, err = capsys.readouterr()
    assert not result.success and "\x1b" not in err, err
    assert "no preset 'a\\x1b[31mb' in workflow 'notes'" in err


@pytest.mark.parametrize("bad", ["postgresql://u:hunter2@127.0.0.1:1/db", "a_file"])
def test_a_store_that_fails_to_open_is_not_remembered(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    (tmp_path / "a_file").write_text("not a store")  # a path that is a file: no store there
    shell.user_ns["bad"] = bad if "://" in bad else str(tmp_path / bad)
    handle = ok(shell, "%%iterion --run --store $store\n" + FORM_GATE)
    capsys.readouterr()
    result = run(shell, "%iterion runs --store $bad")
    err = capsys.readouterr().err
    assert not result.success
    assert err.startswith("UsageError: %iterion: ") and err.count("\n") == 1, err
    assert "hunter2" not in err
    # the next magic without --store uses the store before: the failing one is not remembered
    table = ok(shell, "%iterion runs --limit 1")
    assert handle.id in repr(table) and "shipping" in repr(table)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # a port the system just gave out: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_cluster_that_does_not_answer_is_one_line_naming_the_variable(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    address = f"tcp://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("ITERION_NB_CLUSTER", address)
    began = time.monotonic()
    result = run(shell, "%%iterion --run --store $store\n" + FORM_GATE)
    err = capsys.readouterr().err
    assert not result.success
    assert time.monotonic() - began < 5  # nothing listens: said at once
    assert err.startswith("UsageError: %%iterion --run: no Dask scheduler at") and address in err
    assert "the address is ITERION_NB_CLUSTER's" in err and "%env ITERION_NB_CLUSTER=" in err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    # as it says: with the variable set to nothing, the same cell runs in this kernel
    ok(shell, "%env ITERION_NB_CLUSTER=")
    handle = ok(shell, "%%iterion --run --store $store\n" + FORM_GATE)
    shell.user_ns["r"] = handle
    assert ok(shell, "%iterion wait {r.id}") == "paused_waiting_human"
    assert ok(shell, "%iterion cancel {r.id}") == "cancelled"


def test_a_resume_on_a_cluster_that_does_not_answer_names_the_variable(
    shell: InteractiveShell,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ok(shell, "import iterion_nb as it\nother = it.Session(store + '-r', cluster=False)")
    ok(shell, "h = await other.start(it.compile(WF), vars={'topic': 't'}, scenario=scenario)")
    ok(shell, "await h.cancel()\nawait other.close()")
    monkeypatch.setenv("ITERION_NB_CLUSTER", f"tcp://127.0.0.1:{_closed_port()}")
    result = run(shell, "%iterion resume {h.id} --store {store + '-r'}")
    err = capsys.readouterr().err
    assert not result.success
    assert err.startswith("UsageError: %iterion resume: no Dask scheduler at"), err
    assert "the address is ITERION_NB_CLUSTER's" in err and err.count("\n") == 1, err


def test_a_name_ipython_left_as_typed_beside_json_braces_is_refused_saying_what_works(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = ok(shell, "%%iterion --run --store $store\n" + FORM_GATE)
    shell.user_ns["r"] = handle
    assert ok(shell, "%iterion wait {r.id}") == "paused_waiting_human"
    ok(shell, "q = (await r.pending_questions())[0]\ngid, iid = r.id, q.id")
    capsys.readouterr()
    # the JSON's braces are no Python: IPython leaves the whole line as typed, $gid too
    result = run(shell, """%iterion answer $gid $iid --json '{"ship": true, "note": "x"}'""")
    err = capsys.readouterr().err
    assert not result.success and err.count("\n") == 1, err
    assert err.startswith("UsageError: %iterion answer: $gid was not expanded (IPython leaves")
    assert "write {gid} instead" in err and "no run" not in err
    said = """%iterion answer {gid} {iid} --json '{{"ship": true}}'"""  # what the message says
    assert said in err
    expanded = f"""%iterion answer {handle.id} {shell.user_ns["iid"]} --json '{{"ship": true}}'"""
    assert shell.var_expand(said) == expanded  # (IPython expands it so)
    # doubled braces alone do not do: IPython expands no $name before a quoted {…}
    result = run(shell, """%iterion answer $gid $iid --json '{{"ship": true}}'""")
    assert not result.success and "$gid was not expanded" in capsys.readouterr().err
    # nor a {name} in a line whose other braces it cannot evaluate
    result = run(shell, """%iterion answer {r.id} {q.id} --json '{"ship": true}'""")
    err = capsys.readouterr().err
    assert not result.success and "{r.id} was not expanded" in err, err
    # what works: {name}s, and the JSON in a variable
    shell.user_ns["payload"] = '{"ship": true}'
    answered = ok(shell, "%iterion answer {gid} {iid} --json '{payload}'")
    assert answered["resumed"] is True


def test_a_scenario_is_a_file_s_path_as_typed_or_a_python_expression(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    path = tmp_path / "minimal.scenario.yaml"
    path.write_text(json.dumps(SCENARIO))  # (JSON is YAML)
    shell.user_ns["spath"] = str(path)
    launch = "%%iterion x --run --var topic=t --store $store --scenario "
    for given in (str(path), f'"{path}"', f"'{path}'", "spath", "scenario"):
        handle = ok(shell, launch + given + "\n" + WORKFLOW)
        shell.user_ns["r"] = handle
        asked = ok(shell, "await r.next_question(timeout=10)")
        assert asked.questions == ("Tone?",), given
        assert ok(shell, "%iterion cancel {r.id}") == "cancelled"
    capsys.readouterr()
    missing = tmp_path / "nope.yaml"
    for given, why in [
        (str(missing), "SyntaxError: invalid syntax"),
        ("nosuch_scenario", "NameError: name 'nosuch_scenario' is not defined"),
    ]:
        result = run(shell, launch + given + "\n" + WORKFLOW)
        assert not result.success
        assert capsys.readouterr().err == (
            f"UsageError: --scenario {given}: no scenario file '{given}', nor a Python expression"
            f" that evaluates ({why}); give a scenario file's path or a dict\n"
        )
    shell.user_ns["spath"] = str(missing)  # evaluates to a path: that file is missing
    result = run(shell, launch + "spath\n" + WORKFLOW)
    assert not result.success
    assert (
        capsys.readouterr().err == f"UsageError: --scenario spath: no scenario file '{missing}'\n"
    )


def test_the_note_names_the_out_of_the_cell_it_is_in(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cell whose prompt is [n] files its result as Out[n]: the note names that one."""
    for code in ("1 + 1", "'two'", "for _ in range(2):\n    pass"):
        shell.run_cell(code, store_history=True)
    number = shell.execution_count  # the prompt of the next cell: In [number]
    capsys.readouterr()
    cell = "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    result = shell.run_cell(cell, store_history=True)
    assert result.success and result.execution_count == number
    out = capsys.readouterr().out
    assert f"take this run with `run = Out[{number}]`" in out, out
    assert shell.user_ns["Out"][number] is result.result
    shell.user_ns.pop("_")  # as `del _` does
    shell.user_ns["r"] = result.result
    assert ok(shell, "%iterion cancel {r.id}") == "cancelled"


def test_the_expression_that_does_not_expand_is_named_not_the_one_before(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    shell.user_ns["known"] = SimpleNamespace(id="abc")
    for line, typed, name in [
        ("%iterion answer {known.id} {nosuch.id} formal", "{nosuch.id}", "nosuch"),
        ("%iterion answer {known.id} q1 {nosuch_word}", "{nosuch_word}", "nosuch_word"),
    ]:
        result = run(shell, line)
        assert not result.success
        assert capsys.readouterr().err == (
            f"UsageError: %iterion answer: cannot expand {typed}: NameError:"
            f" name '{name}' is not defined\n"
        )


def test_an_interrupted_wait_is_one_line_and_the_run_goes_on(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupt cancels the cell's task (as ipykernel does): the wait stops, not the run."""
    handle = asking(shell)
    capsys.readouterr()
    interrupt = (
        "import asyncio\n"
        "asyncio.get_running_loop().call_later(0.3, asyncio.current_task().cancel)\n"
    )
    for verb in ("wait {r.id}", "questions {r.id} --wait 2"):
        result = run(shell, f"{interrupt}%iterion {verb}")
        assert not result.success
        name = verb.split()[0]
        rid = handle.id
        assert capsys.readouterr().err == (
            f"UsageError: %iterion {name}: stopped waiting for run {rid}; it goes on (see it with"
            f" %iterion show {rid}, wait again with %iterion wait {rid}, stop it with"
            f" %iterion cancel {rid})\n"
        )
    assert ok(shell, "(await r.refresh()).status") == "running"
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"


def test_questions_wait_on_a_settled_run_says_so_at_once(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    handle = asking(shell)
    assert ok(shell, "%iterion cancel {r.id}") == "cancelled"
    capsys.readouterr()
    began = time.monotonic()
    result = run(shell, "%iterion questions {r.id} --wait 2")
    assert not result.success
    assert capsys.readouterr().err == (
        f"UsageError: %iterion questions: run '{handle.id}' is cancelled and asked 1 question(s),"
        f" not 2: nothing executes it, so it asks no more unless resumed"
        f" (%iterion resume {handle.id})\n"
    )
    ok(shell, "%iterion resume {r.id}")
    ok(shell, "await r.answer(q.id, 'formal')")
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    capsys.readouterr()
    result = run(shell, "%iterion questions {r.id} --wait 5")
    assert not result.success
    assert capsys.readouterr().err == (
        f"UsageError: %iterion questions: run '{handle.id}' is finished and asked 1 question(s),"
        " not 5: nothing executes it, so it asks no more\n"
    )
    assert time.monotonic() - began < 10  # not the 60 s timeout


UNSCRIPTED = (
    "UsageError: %%iterion --run: node 'writer' uses the scripted model, and no scenario says"
    " what it answers: give one with --scenario EXPR (a scenario file or dict;"
    ' examples/*.scenario.yaml are samples), or give it a real model (model: "anthropic/…",'
    ' "openai/…")\n'
)


def test_a_scripted_run_without_a_scenario_is_refused_before_anything_is_recorded(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `iterion-nb run` refuses it (exit 2): one line, no run recorded, no store made."""
    fresh = tmp_path / "fresh"
    shell.user_ns["fresh"] = str(fresh)
    result = run(shell, "%%iterion --run --var topic=t --store $fresh\n" + WORKFLOW)
    assert not result.success
    assert capsys.readouterr().err == UNSCRIPTED
    assert not fresh.exists()  # nothing recorded: not even the store was made
    # in a store that is there, no run is recorded either
    ok(shell, "import iterion_nb as it\nawait it.Session(store).close()")
    assert not run(shell, "%%iterion --run --var topic=t --store $store\n" + WORKFLOW).success
    assert capsys.readouterr().err == UNSCRIPTED
    assert repr(ok(shell, "%iterion runs --store $store")).startswith("0 run(s)")
    # the workflow is still defined (only the run is refused), and another backend runs it
    assert isinstance(shell.user_ns["notes"], m.Workflow)
    cell = "%%iterion --run --var topic=t --backend claude_code --store $store\n" + WORKFLOW
    handle = ok(shell, cell)
    shell.user_ns["r"] = handle
    ok(shell, "await r.cancel()")


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("my-notes", "a Python identifier is needed"),
        ("123", "a Python identifier is needed"),
        ("class", "it is a Python keyword"),
    ],
)
def test_a_name_python_cannot_bind_is_refused_in_one_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], name: str, why: str
) -> None:
    shell.user_ns.pop("notes", None)  # (one shell for every test)
    result = run(shell, f"%%iterion {name}\n" + WORKFLOW)
    assert not result.success
    err = capsys.readouterr().err
    assert err.startswith(f"UsageError: %%iterion: cannot bind the workflow to '{name}': {why}")
    assert err.count("\n") == 1, err
    assert "notes" not in shell.user_ns  # nothing bound under another name either


def test_a_name_that_shadows_a_builtin_is_bound_and_said(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ok(shell, "%%iterion print\n" + WORKFLOW) is None
    out = capsys.readouterr().out
    assert out == (
        "note: print now names this workflow, not Python's builtin print"
        " (del print brings the builtin back)\n"
    )
    assert isinstance(shell.user_ns["print"], m.Workflow)
    ok(shell, "%%iterion print\n" + WORKFLOW)  # the notebook's own name now: said once
    assert capsys.readouterr().out == ""
    ok(shell, "del print")
    ok(shell, "print('the builtin again')")
    assert capsys.readouterr().out == "the builtin again\n"


COUNT = "argument --wait: must be a whole number, 0 or more, not"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("questions RUN --wait -1", "argument --wait: must be a whole number, 0 or more, not '-1'"),
        (
            "questions RUN --wait 1.5",
            "argument --wait: must be a whole number, 0 or more, not '1.5'",
        ),
        ("questions RUN --timeout -1", "argument --timeout: must be more than 0 seconds, got -1"),
        ("questions RUN --timeout 0", "argument --timeout: must be more than 0 seconds, got 0"),
        ("wait RUN --timeout -1", "argument --timeout: must be more than 0 seconds, got -1"),
        ("wait RUN --timeout nan", "argument --timeout: must be more than 0 seconds, got nan"),
        ("wait RUN --timeout soon", "argument --timeout: not a number of seconds: 'soon'"),
    ],
)
def test_numbers_the_line_magics_take_are_refused_out_of_range_as_the_cli_does(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str, said: str
) -> None:
    """A negative count or timeout is one line (as `runs follow --timeout -1` is), not taken."""
    handle = asking(shell)
    result = run(shell, f"%iterion {line.replace('RUN', handle.id)}")
    assert not result.success
    verb = line.split()[0]
    assert capsys.readouterr().err == f"UsageError: %iterion {verb}: {said}\n"
    ok(shell, "await r.cancel()")
