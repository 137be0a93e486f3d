"""The text of an answer, and who gives it, is checked on the one answer path.

U+0000 is refused everywhere (PostgreSQL cannot store it), every control
character in ``answered_by``, every C0 control but tab and line breaks in
an answer: before the store is read or written, on every store, and from
every surface (the Python API, the CLI; REST is in tests/api).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from iterion_nb.errors import BadTextError
from iterion_nb.runtime.answers import AnswerService, check_answer_text, check_answered_by
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.session import Session
from iterion_nb.store import MemoryStore, open_duckdb_store

AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
CLI = Path(sys.executable).parent / "iterion-nb"


def a_run(run_id: str = "r1") -> Run:
    return Run(run_id, "w", "h", "paused_waiting_human", AT, AT, source="workflow w:\n")


def a_question(iid: str, run_id: str = "r1") -> Interaction:
    return Interaction(iid, run_id, "asker", "async", (f"{iid}?",), AT)


@pytest.fixture(params=["memory", "duckdb", "postgres"])
async def text_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store with run ``r1`` and free-text questions ``q1``…``q3``."""
    impl: Store
    if request.param == "memory":
        impl = MemoryStore()
    elif request.param == "duckdb":
        impl = open_duckdb_store(tmp_path / "t.duckdb")
    else:
        from iterion_nb.store.postgres_store import open_postgres_store

        base = request.getfixturevalue("postgres_url")
        impl = open_postgres_store(f"{base}?schema=t_{uuid.uuid4().hex}")
    await impl.create_run(a_run())
    for n in (1, 2, 3):
        await impl.add_interaction(a_question(f"q{n}"))
    yield impl
    await impl.close()


async def unanswered(store: Store, iid: str) -> bool:
    found = await store.get_interaction(iid)
    events = await store.events("r1")
    told = [e for e in events if e.type == "interaction_answered"]
    return found.pending and found.answered_by is None and not told


REFUSED: list[tuple[Any, str, str, str]] = [
    # answer, answered_by, field named, what the message says
    ("a\x00b", "alice", "answer", "holds U+0000 (NUL) at position 1: no text can hold U+0000"),
    ({"note": "ok", "why": "\x00"}, "alice", "answer.why", "U+0000"),
    (["fine", {"deep": ["\x1b[2J"]}], "alice", "answer[1].deep[0]", "U+001B"),
    ({"with space": "\x08"}, "alice", 'answer["with space"]', "U+0008"),
    ({"k\x0b": 1}, "alice", "a key of answer", "U+000B"),
    ("formal", "bob\x00", "answered_by", "U+0000"),
    ("formal", "bob\r\nX-Admin: yes", "answered_by", "U+000D"),
    ("formal", "\x85bob", "answered_by", "U+0085"),
]


@pytest.mark.parametrize(("answer", "by", "field", "said"), REFUSED)
async def test_a_refused_text_names_its_field_and_nothing_is_written(
    text_store: Store, answer: Any, by: str, field: str, said: str
) -> None:
    service = AnswerService(text_store)
    with pytest.raises(BadTextError) as info:
        await service.answer("r1", "q1", answer, by)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field} holds ") and said in str(info.value)
    assert await unanswered(text_store, "q1")


async def test_tabs_line_breaks_and_other_text_are_kept_as_given(text_store: Store) -> None:
    answer = {"text": "one\r\ntwo\tthree\n", "more": "DEL \x7f and C1 \x85 are text here"}
    outcome = await AnswerService(text_store).answer("r1", "q2", answer, "Zoë (review)")
    assert outcome.queued
    found = await text_store.get_interaction("q2")
    assert (found.answers, found.answered_by) == (answer, "Zoë (review)")


async def test_answer_human_checks_every_answer_before_reading_the_run(
    text_store: Store,
) -> None:
    service = AnswerService(text_store)
    with pytest.raises(BadTextError) as info:
        await service.answer_human("r1", {"q1": "fine", "q2": "not\x00fine"}, "alice")
    assert info.value.field == "answers.q2"
    with pytest.raises(BadTextError) as info:
        await service.answer_human("nosuchrun", {"": "x\x01"}, "alice")  # text first
    assert info.value.field == "answer"
    assert await unanswered(text_store, "q1") and await unanswered(text_store, "q2")


async def test_the_python_api_refuses_it_too(text_store: Store) -> None:
    session = Session(text_store)
    try:
        with pytest.raises(BadTextError, match=r"^answer holds U\+0000"):
            await session.run("r1").answer("q3", "\x00")
        with pytest.raises(BadTextError, match=r"^answered_by holds"):
            await session.run("r1").answer("q3", "ok", answered_by="a\x1fb")
    finally:
        await session.close()
    assert await unanswered(text_store, "q3")


def test_the_checks_directly() -> None:
    looped: list[Any] = ["ok"]
    looped.append(looped)  # a cycle is walked once (the store refuses it as not JSON)
    check_answer_text(looped)
    check_answer_text({1: "keys that are not text are the store's business", "t": ("a", "b")})
    with pytest.raises(BadTextError, match=r"^answer\[1\]\[0\] holds"):
        check_answer_text(("ok", ("\x00",)))
    assert check_answered_by("rest") == "rest"
    with pytest.raises(BadTextError, match=r"^answered_by must be text"):
        check_answered_by(None)


def test_the_cli_says_what_is_wrong_without_a_traceback(tmp_path: Path) -> None:
    async def seed() -> None:
        store = open_duckdb_store(tmp_path / "s")
        await store.create_run(a_run())
        await store.add_interaction(a_question("q1"))
        await store.close()

    asyncio.run(seed())

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CLI), "runs", "answer", "r1", "q1", *args, "--store", str(tmp_path / "s")],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    refused = (2,)  # what the person typed: a usage error
    sent = cli('"a\\u0000b"', "--json-value")
    assert sent.returncode in refused, sent.stderr
    assert sent.stderr == (
        "iterion-nb: answer holds U+0000 (NUL) at position 1: no text can hold U+0000\n"
    )
    sent = cli("ring\x07", "--as", "me")
    assert sent.returncode in refused
    assert sent.stderr.startswith("iterion-nb: answer holds the control character U+0007")
    sent = cli("formal", "--as", "me\x1b[1m")
    assert sent.returncode in refused
    # named as the option typed, with the usage line (it named `answered_by`, no option)
    assert sent.stderr.rstrip().endswith(
        "error: argument --as: holds a control character: 'me\\x1b[1m'"
    ), sent.stderr
    assert "Traceback" not in sent.stderr

    async def still_open() -> bool:
        store = open_duckdb_store(tmp_path / "s")
        try:
            return (await store.get_interaction("q1")).pending
        finally:
            await store.close()

    assert asyncio.run(still_open())


GATE = 'human gate:\n  instructions: "Ship it?"\n\nworkflow w:\n  entry: gate\n  gate -> done\n'


async def test_answers_given_to_resume_are_checked_before_the_run_is_taken(
    tmp_path: Path,
) -> None:
    session = Session(tmp_path / "s", serve=False)
    try:
        run = await session.start(GATE)
        assert await run.wait(30) == "paused_waiting_human"
        (question,) = await run.pending_questions()
        with pytest.raises(BadTextError, match=r"^answers\['.*'\] holds U\+0000"):
            await session.resume(run.id, answers={question.id: "ye\x00s"})
        with pytest.raises(BadTextError, match=r"^answered_by holds the control character"):
            await session.resume(run.id, answers={question.id: "yes"}, answered_by="me\x1b")
        record = await run.refresh()
        assert record.status == "paused_waiting_human" and (await run.pending_questions())
    finally:
        await session.close()


def test_pinned_answers_with_a_control_character_are_refused_when_read() -> None:
    from iterion_nb.runtime.replay import AnswersFileError, pins_of

    pins = [{"node": "gate", "question": "Ship it?", "answer": "ye\x00s"}]
    with pytest.raises(AnswersFileError, match=r"^a\.yaml: answer 1: answer holds U\+0000"):
        pins_of({"answers": pins}, "a.yaml")
