"""Hostile or clumsy input on the Jupyter surface: magics through a real shell, widget messages.

A mistake is one line naming it (never a traceback, never "the store failed"),
nothing a user typed reaches the page with its escape sequences live, and a
message from a widget's front-end answers only what that widget shows.
"""

from __future__ import annotations

import asyncio
import getpass
import shlex
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import iterion_nb as it
from iterion_nb.magics import core as magics_core
from iterion_nb.session import Session
from iterion_nb.widgets import InboxWidget, RunWidget
from iterion_nb.widgets.common import front_end_identity
from tests.jupyter.test_magics import SCENARIO, WORKFLOW
from tests.jupyter.test_widgets import answerer, started, until

ESC = "\x1b[31mred"
SURROGATE = "x\udc80y"


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.user_ns.update(
        {"scenario": SCENARIO, "store": str(tmp_path / "store"), "esc": ESC, "sur": SURROGATE}
    )
    ip.user_ns.update({"nul": "a\x00b", "out": str(tmp_path / "out")})
    ip.run_cell("%load_ext iterion_nb")
    yield ip
    ip.run_cell("%unload_ext iterion_nb")


def refused(ip: InteractiveShell, code: str) -> str:
    """Run a cell that must fail with a UsageError; its one line."""
    result = ip.run_cell(code)
    err = result.error_in_exec or result.error_before_exec
    assert isinstance(err, UsageError), repr(err)
    return str(err)


def with_a_run(ip: InteractiveShell) -> None:
    """A run of the magics' workflow, as ``r``, its first question asked, as ``q``."""
    made = ip.run_cell(
        "%%iterion --run --var topic=t --scenario scenario --store $store\n" + WORKFLOW
    )
    assert made.success, made.error_in_exec
    ip.user_ns["r"] = made.result
    assert ip.run_cell("q = await r.next_question(timeout=10)").success


# -- the magics ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("%iterion show {esc}", "argument run_id: holds a control character: '\\x1b[31mred'"),
        ("%iterion inbox {esc}", "argument run_id: holds a control character"),
        ("%iterion answer {r.id} {esc} yes", "argument interaction_id: holds a control character"),
        ("%iterion show {sur}", "argument run_id: is not UTF-8 text: 'x\\x80y'"),
        ("%iterion answer {r.id} {sur} yes", "argument interaction_id: is not UTF-8 text"),
        ("%iterion wait ''", "argument run_id: must not be empty"),
    ],
)
def test_an_id_that_is_no_id_is_named_escaped_not_blamed_on_the_store(
    shell: InteractiveShell, line: str, said: str
) -> None:
    """Before: ``no run '<ESC>[31mred'`` echoed raw; "the run store … failed" for a surrogate."""
    with_a_run(shell)
    message = refused(shell, line)
    assert said in message, message
    assert "\x1b" not in message and "failed" not in message


def test_a_cell_naming_a_run_to_replay_that_is_not_utf8_says_so(shell: InteractiveShell) -> None:
    with_a_run(shell)
    line = "%%iterion --run --var topic=t --scenario scenario --answers-from {sur} --store $store"
    message = refused(shell, line + "\n" + WORKFLOW)
    assert "argument --answers-from: is not UTF-8 text: 'x\\x80y'" in message, message


@pytest.mark.parametrize(
    ("line", "option"),
    [
        ("%iterion answers {r.id} --export {nul}", "--export"),
        ("%iterion report {r.id} -o {nul}", "-o/--output"),
    ],
)
def test_a_path_holding_nul_is_one_line_not_a_traceback(
    shell: InteractiveShell, line: str, option: str
) -> None:
    """Before: ``ValueError: embedded null byte`` and its traceback (export, report)."""
    with_a_run(shell)
    message = refused(shell, line)
    assert f"argument {option}: holds U+0000, which no path can: 'a\\x00b'" in message, message


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("{nul}", "argument --store: the store's name holds U+0000, which no path or URL can"),
        # once the default store, silently, as when the variable was unset
        ("''", "argument --store: is empty: name a store (a path or a postgresql:// URL)"),
        ("postgresql://h:port/db", "--store: the store URL postgresql://h:***/db is malformed"),
    ],
)
def test_a_store_no_store_has_is_refused_as_the_cli_refuses_it(
    shell: InteractiveShell, store: str, said: str
) -> None:
    for line in (f"%iterion runs --store {store}", f"%%iterion --run --store {store}\n"):
        message = refused(shell, line + WORKFLOW * line.startswith("%%"))
        assert said in message, message


def test_a_cell_given_a_path_holding_nul_is_one_line(shell: InteractiveShell) -> None:
    """Before: a ValueError traceback from reading the answers (or the attachment)."""
    line = "%%iterion --run --var topic=t --scenario scenario --answers {nul} --store $store"
    assert "holds U+0000, which no path can" in refused(shell, line + "\n" + WORKFLOW)
    attaching = "attachments:\n  doc: file\n\n" + WORKFLOW
    line = "%%iterion --run --var topic=t --scenario scenario --attach doc={nul} --store $store"
    assert refused(shell, line + "\n" + attaching) == (
        "%%iterion: attachment 'doc': its path holds U+0000, which no path can"
    )


def test_a_compile_error_keeps_its_lines_with_their_escapes_shown(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    """``%iterion resume`` of a run whose recorded source no longer compiles (written by an
    older release, say): its report, line by line with carets, as ``%%iterion`` shows one
    — not squashed onto one line by the escaping of what the user typed."""
    with_a_run(shell)
    shell.user_ns["older_source"] = (
        'human g:\n  bogus: "\x1b[31m"\n  other: 2\n\nworkflow w:\n  entry: g\n  g -> done\n'
    )
    assert shell.run_cell("await r.cancel()").success
    altered = shell.run_cell(
        "import iterion_nb as _it\n_s = _it.Session(store)\n"
        "await _s.store.update_run(r.id, source=older_source)\nawait _s.close()"
    )
    assert altered.success, altered.error_in_exec
    for name in ("older_source", "_it", "_s"):  # (one shell for every test: leave it clean)
        shell.user_ns.pop(name)
    report = refused(shell, "%iterion resume {r.id} --store $store").splitlines()
    assert len(report) > 5 and "\x1b" not in "\n".join(report), report
    assert report[0].endswith(": 2 errors"), report
    assert "error[C350]: human nodes have no property 'bogus'" in report[1], report
    assert report[2:4] == ['    2 |   bogus: " [31m"', "      |   ^^^^^"], report  # ESC: blank


@pytest.mark.parametrize(
    "line",
    [
        "%iterion resume {r.id} --workflow {esc}",
        "%iterion resume {r.id} --scenario {esc}",
    ],
)
def test_what_a_user_typed_is_echoed_with_its_escapes_shown_not_live(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    with_a_run(shell)
    capsys.readouterr()
    message = refused(shell, line)
    err = capsys.readouterr().err
    assert "\\x1b[31mred" in message and "\x1b" not in message + err, message
    assert err.count("\n") == 1 and err.startswith("UsageError:"), err


def test_a_cell_echoes_its_options_escaped(shell: InteractiveShell) -> None:
    message = refused(shell, "%%iterion --run --var topic=t --scenario '\x1b[31m'\n" + WORKFLOW)
    assert message.startswith("--scenario \\x1b[31m: no scenario file"), message


# -- the widgets' front-end messages ------------------------------------------------
@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    s = Session(tmp_path / "store")
    yield s
    await s.close()


async def two_runs(session: Session) -> tuple[it.RunHandle, it.RunHandle]:
    return (
        await started(session, {"question": "Tone?"}),
        await started(session, {"question": "Other?"}),
    )


async def test_a_widget_answers_only_the_questions_of_the_run_it_shows(session: Session) -> None:
    """Before: a message naming another run (and its question) answered that run."""
    a, b = await two_runs(session)
    (other,) = await b.pending_questions()
    widget = RunWidget(session.store, a.id, answer=answerer(session))
    inbox = InboxWidget(session.store, answerer(session), a.id)
    try:
        for view in (widget, inbox):
            message = {"type": "answer", "run_id": b.id, "interaction_id": other.id, "answer": "x"}
            result = await view.submit(message)
            assert result["error"] == (
                f"the answer names run '{b.id}', but this view answers question '{other.id}'"
                f" for run '{a.id}': nothing sent"
            )
        assert (await session.store.get_interaction(other.id)).pending
    finally:
        widget.close()
        inbox.close()
        await a.cancel()
        await b.cancel()


@pytest.mark.parametrize("iid", [["q"], {"id": "q"}, 5, None, "", "q\x00", SURROGATE])
async def test_an_interaction_id_that_is_no_id_names_no_question(
    session: Session, iid: Any
) -> None:
    """Before: ``no question "['q']"`` (a list's repr), or "the run store … failed"."""
    run = await started(session, {"question": "Tone?"})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    try:
        message = {"type": "answer", "interaction_id": iid, "answer": "x"}
        result = await inbox.submit(message)
        assert result["error"] == "the answer names no question"
    finally:
        inbox.close()
        await run.cancel()


async def test_a_run_id_that_is_no_id_leaves_the_inbox_live(session: Session) -> None:
    """Before: a run id with a lone surrogate went to the banner, and every refresh failed."""
    a, b = await two_runs(session)
    inbox = InboxWidget(session.store, answerer(session), None, interval=0.05)
    try:
        await until(lambda: len(inbox.pending) == 2)
        (asked,) = await a.pending_questions()
        message = {"type": "answer", "run_id": "r\udc80", "interaction_id": asked.id, "answer": "x"}
        said = await inbox.submit(message)
        assert said["error"] == "the answer names no run"
        await b.answer((await b.pending_questions())[0].id, "elsewhere", answered_by="cli")
        await until(lambda: len(inbox.pending) == 1)  # it still follows the store
        assert await inbox.refresh()
    finally:
        inbox.close()
        await a.cancel()
        await b.cancel()


@pytest.mark.parametrize("name", ["\x1b[31mada", "ada\x07", "ad\udc80a"])
async def test_a_front_end_name_the_store_refuses_still_answers(
    session: Session, name: str
) -> None:
    """Before: the click was refused ("answered_by holds the control character U+001B")."""
    assert front_end_identity(name) is None
    run = await started(session, {"question": "Tone?"})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    try:
        (asked,) = await run.pending_questions()
        message = {"type": "answer", "interaction_id": asked.id, "answer": "x", "answered_by": name}
        inbox._handle_custom_msg(message, [])
        await until(lambda: inbox.last_result.get("interaction_id") == asked.id)
        assert "error" not in inbox.last_result, inbox.last_result
        assert (await session.store.get_interaction(asked.id)).answered_by == getpass.getuser()
    finally:
        inbox.close()
        await run.cancel()


async def test_two_widgets_answering_at_once_the_second_is_told_who_answered(
    session: Session,
) -> None:
    """One answer is recorded; the other click's refusal names it, and stays.

    Before: the refusal ("is already answered", without who) was taken away by the
    very refresh that followed it, since the question had left the list.
    """
    tone = {"question": "Tone?", "options": [{"id": "f", "label": "F"}]}
    run = await started(session, tone, {"question": "Later?"})  # the run waits on, for it
    for _ in range(500):
        if (await session.store.get_run(run.id)).status == "paused_waiting_human":
            break
        await asyncio.sleep(0.01)
    asked = next(q for q in await run.pending_questions() if q.question == "Tone?")
    first = InboxWidget(session.store, answerer(session), run.id)
    second = RunWidget(session.store, run.id, answer=answerer(session))
    try:
        await until(lambda: first.pending and second.questions)
        clicks = [
            threading.Thread(target=view._handle_custom_msg, args=(message, []))
            for view, message in (
                (first, {"type": "answer", "interaction_id": asked.id, "answer": "f",
                         "answered_by": "ada", "run_id": run.id}),
                (second, {"type": "answer", "interaction_id": asked.id, "answer": "f",
                          "answered_by": "bob", "run_id": run.id}),
            )
        ]  # fmt: skip
        for click in clicks:
            click.start()
        for click in clicks:
            await asyncio.to_thread(click.join)
        views = (first, second)
        await until(lambda: all(view.last_result for view in views))
        who = (await session.store.get_interaction(asked.id)).answered_by
        loser = second if who == "ada" else first
        for _ in range(3):
            await loser.refresh()
        said = loser.last_result.get("error", "")
        assert (
            said == f"question '{asked.id}' is already answered by {who}: 'f' ('F') — nothing sent"
        )
    finally:
        first.close()
        second.close()
        await run.cancel()


@pytest.mark.parametrize("content", ["not a dict", ["answer"], None, {"type": "bogus"}, {}])
async def test_a_message_that_is_no_answer_is_ignored(session: Session, content: Any) -> None:
    run = await started(session, {"question": "Tone?"})
    widget = RunWidget(session.store, run.id, answer=answerer(session))
    try:
        widget._handle_custom_msg(content, [])
        await asyncio.sleep(0.05)
        assert widget.last_result == {} and not widget._tasks
        assert len(await run.pending_questions()) == 1
    finally:
        widget.close()
        await run.cancel()


async def test_an_answer_too_large_or_too_deep_is_refused_and_the_form_stays(
    session: Session,
) -> None:
    run = await started(session, {"question": "Tone?"})
    inbox = InboxWidget(session.store, answerer(session), run.id)
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    try:
        (asked,) = await run.pending_questions()
        for answer in ("y" * 10_000_000, deep, None):
            message = {"type": "answer", "interaction_id": asked.id, "answer": answer}
            assert "error" in await inbox.submit(message)
        assert (await session.store.get_interaction(asked.id)).pending
        assert [q["id"] for q in inbox.pending] == [asked.id]
    finally:
        inbox.close()
        await run.cancel()


# -- reading a magic's line -------------------------------------------------------------
@settings(max_examples=3000, deadline=None)
@given(st.text(st.sampled_from("ab '\"\\\t\n\r\x0b$={}é"), max_size=16))
def test_a_line_is_read_into_words_as_shlex_reads_it(line: str) -> None:
    """The magics read their line in linear time; what they read is what shlex reads."""
    try:
        expected: Any = shlex.split(line)
    except ValueError as err:
        expected = f"%iterion: cannot read the arguments: {err}"
    try:
        got: Any = magics_core._split(line)
    except UsageError as err:
        got = str(err)
    assert got == expected


def test_a_long_variable_reaches_the_run_whole(shell: InteractiveShell) -> None:
    """``--var topic={doc}`` with a 1 MB document (once: shlex's quadratic reading, 14 s
    and more before the run started), quotes, backslashes and all."""
    doc = 'it\'s "quoted" \\ and long: ' + "x" * 1_000_000
    shell.user_ns.update({"doc": doc, "shlex": shlex})  # as docs/jupyter.md says to give it
    made = shell.run_cell(
        "%%iterion --run --var topic={shlex.quote(doc)} --scenario scenario --store $store\n"
        + WORKFLOW
    )
    shell.user_ns.pop("doc")
    shell.user_ns.pop("shlex")
    assert made.success, made.error_in_exec
    shell.user_ns["long_run"] = made.result
    assert shell.run_cell("(await long_run.refresh()).vars").result == {"topic": doc}
    shell.user_ns.pop("long_run")
