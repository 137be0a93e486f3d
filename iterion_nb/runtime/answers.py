"""The one answer path: validate an answer, record it, decide whether the run resumes.

Every surface — the inbox widget, ``%iterion answer``, ``iterion-nb runs
answer``, REST (store holder and Jupyter server) and ``RunHandle.answer`` —
calls :class:`AnswerService`. Recording is one store transaction (the
answer, the message queued for an async asker, the ``interaction_answered``
event); then, if the run is paused and every answer it waits on is in, the
run resumes:

- by its owner, when a live process keeps it parked (the answer's doorbell
  ring wakes it there, whichever process answered);
- a run of a cluster (``launch["executor"] == "dask"``), by the cluster: its
  workers' watchers take it up (a process with that cluster queues it there
  itself, and leaves it to them when its scheduler does not answer), never a
  process without the cluster — if no worker is up, the first to come
  up takes it, and ``resumed`` is False meanwhile;
- else here, when this process can run workflows (it has a resumer);
- else not yet: ``resumed`` is False and anyone may resume it.

Before anything is read or written, the text is checked (:func:`check_answer_text`,
:func:`check_answered_by`): U+0000 nowhere (PostgreSQL cannot store it, and
nothing shows it), no control character in who answers, none but tab and
line breaks in an answer. A refusal is a :class:`~iterion_nb.errors.BadTextError`
naming the field, on every surface alike.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from iterion_nb.errors import (
    RESUME_APPLIES_EXPIRY,
    AlreadyAnsweredError,
    BadTextError,
    InvalidAnswerError,
    IterionError,
    NotFoundError,
    QuestionClosedError,
    ResumeError,
    RunError,
    RunOwnedError,
)
from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction, Run, utcnow

#: How long an answer waits for the owner of a parked run to pick it up.
HANDOFF_SECONDS = 10.0
#: Who answers is a label: no control character at all (C0, DEL, C1), and UTF-8 text.
_LABEL_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: An answer's text may hold tabs and line breaks; the other C0 controls are not text.
_TEXT_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _refuse(text: str, field: str, forbidden: re.Pattern[str], rule: str) -> None:
    found = forbidden.search(text)
    if found is None:
        return
    char = found.group()
    if char == "\x00":
        what, rule = "U+0000 (NUL)", "no text can hold U+0000"
    elif "\ud800" <= char <= "\udfff":  # a byte that was not UTF-8, where it came in
        what, rule = f"a lone surrogate U+{ord(char):04X}", "it is not UTF-8 text"
    else:
        what = f"the control character U+{ord(char):04X}"
    raise BadTextError(field, f"holds {what} at position {found.start()}: {rule}")


def check_answered_by(answered_by: object) -> str:
    """Who answers, if it is text without control characters (C0, DEL, C1).

    Raises:
        BadTextError: Not text, or it holds a control character (``field``: ``answered_by``).
    """
    if not isinstance(answered_by, str):
        raise BadTextError("answered_by", "must be text: who answers")
    rule = "who answers is named without control characters"
    _refuse(answered_by, "answered_by", _LABEL_FORBIDDEN, rule)
    return answered_by


def _member(where: str, key: object) -> str:
    if isinstance(key, str) and key.isidentifier() and len(key) <= 40:
        return f"{where}.{key}"
    shown = json.dumps(key, ensure_ascii=False) if isinstance(key, str) else repr(key)
    return f"{where}[{shown[:40]}]"


def check_answer_text(answer: object, field: str = "answer") -> None:
    """Refuse an answer whose text (values and keys, at any depth) holds U+0000 or a control.

    Tab, line feed and carriage return are text; the other C0 controls are not.
    The first offender in reading order is named (``answer.note``, ``answer[2]``).

    Raises:
        BadTextError: Naming the field and the character's position.
    """
    rule = "an answer may hold tabs and line breaks, no other control characters"
    seen: set[int] = set()
    stack: list[tuple[object, str]] = [(answer, field)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            _refuse(value, where, _TEXT_FORBIDDEN, rule)
            continue
        if not isinstance(value, dict | list | tuple) or id(value) in seen:
            continue  # a container met twice was checked (or is a cycle the store refuses)
        seen.add(id(value))
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, str):
                    _refuse(key, f"a key of {where}", _TEXT_FORBIDDEN, rule)
            items = [(item, _member(where, key)) for key, item in value.items()]
        else:
            items = [(item, f"{where}[{n}]") for n, item in enumerate(value)]
        stack.extend(reversed(items))


def _repeated(question: Interaction, value: Any, answered_by: str) -> bool:
    """Whether ``question`` already holds this very answer, by the same person (a retry).

    The answer is compared as it was recorded: an option given by its label
    was kept as the option's id.
    """
    if question.answered_at is None or question.answered_by != answered_by:
        return False
    try:
        as_recorded = lifecycle.check_fits(replace(question, answered_at=None), value)
    except IterionError:  # not an answer it takes: not the one it holds either
        return False
    try:
        return bool(question.answers == json.loads(json.dumps(as_recorded)))
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class AnswerOutcome:
    """What answering did: queued a message for the agent; the run resumes; its status.

    ``run_status`` is the run's status once the answer is in: a message queued
    for a run that is not ``running`` (interrupted, failed_resumable,
    cancelled) reaches the agent only when the run is resumed, which the
    front-ends say. ``resume_needed``: the run is paused with every answer it
    waits for in, and nothing will resume it by itself (its process is gone,
    and the one that answered runs no workflows): someone must resume it.
    ``resume_error``: why this process, which would have resumed the run,
    could not (its Dask cluster cannot be reached, say); the answer is in.
    ``awaiting_worker``: a run a Dask cluster executes that nobody holds is
    paused with every answer in, and no worker took it up while this answer
    waited for one (none is up, or all are busy), or it is ``interrupted``
    (its worker was lost): the first worker free to take it up resumes it
    (a person's resume is needed only if none comes up).
    """

    queued: bool
    resumed: bool
    run_status: str
    resume_needed: bool = False
    resume_error: str | None = None
    awaiting_worker: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The outcome as JSON: every field, ``resume_error`` only if set."""
        said: dict[str, Any] = {
            "queued": self.queued,
            "resumed": self.resumed,
            "run_status": self.run_status,
            "resume_needed": self.resume_needed,
            "awaiting_worker": self.awaiting_worker,
        }
        if self.resume_error is not None:
            said["resume_error"] = self.resume_error
        return said


class Resumer(Protocol):
    """A process that can run workflows (a session): it resumes answered runs."""

    claimant: Claimant

    @property
    def on_cluster(self) -> bool:
        """Whether it executes runs on a cluster (then it may queue a cluster's run)."""
        ...

    async def resume_answered(self, run_id: str, answered_by: str) -> None:
        """Resume ``run_id`` here (raises RunOwnedError or ResumeError if it cannot)."""
        ...


def is_cluster_run(run: Run) -> bool:
    """Whether a Dask cluster executes ``run`` (it was started or resumed for one)."""
    return run.launch.get("executor") == "dask"


async def awaited(store: Store, run: Run) -> list[str]:
    """The ids of the questions a paused run waits on (an ``await`` pause: those it lists)."""
    needed: list[str] = []
    for iid in (run.checkpoint or {}).get("waiting_on", []):
        pause = await store.get_interaction(iid)
        if pause.kind != "await":
            needed.append(iid)
        elif pause.pending:  # an await pause that ended (its deadline) waits for nothing
            needed.extend(pause.waits_on)
    return needed


async def ready_to_resume(store: Store, run: Run) -> bool:
    """Whether ``run`` is paused and every question it waits on is answered (or ended)."""
    if run.status != "paused_waiting_human":
        return False
    for iid in await awaited(store, run):
        if (await store.get_interaction(iid)).pending:
            return False
    return True


async def expire_awaited(store: Store, run: Run) -> float | None:
    """Expire what a paused run waits on that is due; seconds until the next expiry (or None).

    The owner of a parked run calls it at each look, and sleeps no longer
    than it says: a question expiring releases the run on time.
    """
    now = utcnow()
    soonest: float | None = None
    expired = False
    for iid in await awaited(store, run):
        question = await store.get_interaction(iid)
        if question.due(now):
            expired = True
        elif question.pending and question.expires_at is not None:
            left = (question.expires_at - now).total_seconds()
            soonest = left if soonest is None else min(soonest, left)
    if expired:
        await store.expire_due(run.id)
    return soonest


class AnswerService:
    """Answers questions of runs in ``store``; ``resumer`` resumes runs in this process."""

    def __init__(self, store: Store, resumer: Resumer | None = None) -> None:
        self.store = store
        self.resumer = resumer

    async def question(self, run_id: str, interaction_id: str) -> Interaction:
        """The question, checked to belong to the run and to be answerable by a person."""
        try:
            found = await self.store.get_interaction(interaction_id)
        except NotFoundError:
            await self.store.get_run(run_id)  # an unknown run is named as such
            raise
        if found.run_id != run_id:
            await self.store.get_run(run_id)
            raise NotFoundError("interaction", interaction_id).of_run(run_id)
        if found.kind == "await":
            waits = ", ".join(found.waits_on) or "none"
            raise InvalidAnswerError(
                f"'{interaction_id}' is the pause of an await_answers call, not a question:"
                f" answer the questions it waits on ({waits}); the run resumes by itself"
            )
        return found

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> AnswerOutcome:
        """Answer one question of a run (any kind but ``await``).

        Raises:
            NotFoundError: No such question in this run.
            AlreadyAnsweredError: It has an answer (carries it).
            QuestionClosedError: It expired, or its asker retracted it.
            InvalidAnswerError: Not an answer the question accepts (not one of its
                options, empty, not of its form), not JSON data, too large, or
                the ``await`` record. Nothing is written: the question stays open.
            BadTextError: U+0000 or a control character in the answer's text or in
                ``answered_by`` (checked first). Nothing is written.
        """
        check_answered_by(answered_by)
        check_answer_text(answer)
        found = await self.question(run_id, interaction_id)
        if found.pending:  # else the store says how it ended (answered, expired, retracted)
            await self._refuse_if_over(run_id, interaction_id)
            answer = lifecycle.check_fits(found, answer)
        try:
            result = await self.store.answer(interaction_id, answer, answered_by=answered_by)
        except QuestionClosedError as err:
            raise await self._closed(run_id, err) from None
        resumed = await self._resume_if_ready(run_id, interaction_id, answered_by)
        return await self._outcome(run_id, result.message is not None, *resumed)

    async def _refuse_if_over(self, run_id: str, interaction_id: str) -> None:
        """Refuse an answer to a run that ended for good: no agent would ever read it.

        Its open questions are withdrawn as it ends; one still open here (a run
        that ended before that was done, or whose process died doing it) is
        withdrawn now, and the refusal says why.

        Raises:
            QuestionClosedError: The run is ``finished`` or ``failed``.
        """
        run = await self.store.get_run(run_id)
        if run.status in lifecycle.OVER:
            await lifecycle.retire_questions(self.store, run_id, run.status)
            reason = lifecycle.run_ended_reason(run_id, run.status)
            raise QuestionClosedError(interaction_id, "retracted", reason)

    async def _closed(self, run_id: str, err: QuestionClosedError) -> QuestionClosedError:
        """The refusal, saying what goes on when an expired gate holds a run nothing keeps."""
        run = await self.store.get_run(run_id)
        if err.ended != "expired" or run.status != "paused_waiting_human" or run.lease:
            return err  # a session that keeps the run parked applies on_expire itself
        return QuestionClosedError(
            err.interaction_id, err.ended, err.reason,
            hint=f"run {run_id} stays paused until it is resumed, {RESUME_APPLIES_EXPIRY}",
        )  # fmt: skip

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> AnswerOutcome:
        """Answer what a paused run waits on (``""`` names its only question), then resume it.

        The text of every answer, and ``answered_by``, is checked as :meth:`answer`
        does, before anything is read or written.
        """
        check_answered_by(answered_by)
        for iid, value in answers.items():
            check_answer_text(value, _member("answers", iid) if iid else "answer")
        run = await self.store.get_run(run_id)
        if run.status != "paused_waiting_human":
            raise ResumeError(f"run '{run_id}' is {run.status}, not paused waiting for a person")
        if "" in answers:
            needed = [
                i for i in await awaited(self.store, run)
                if (await self.store.get_interaction(i)).pending
            ]  # fmt: skip
            if len(needed) != 1:
                raise RunError(f"run '{run_id}' waits on {len(needed)} questions: name them")
            answers = {needed[0]: answers[""]} | {k: v for k, v in answers.items() if k}
        checked = {}
        for iid, value in answers.items():  # every answer checked before any is written
            found = await self.question(run_id, iid)
            if found.pending:
                checked[iid] = lifecycle.check_fits(found, value)
            elif not _repeated(found, value, answered_by):  # a retry's repeat writes nothing
                raise lifecycle.not_pending(found)
        raced: IterionError | None = None
        for iid, value in checked.items():
            try:
                await self.store.answer(iid, value, answered_by=answered_by)
            except (AlreadyAnsweredError, QuestionClosedError) as err:  # settled meanwhile
                raced = err
                break
        resumed = await self._resume_if_ready(run_id, None, answered_by)  # what is in counts
        if raced is not None:
            raise raced
        return await self._outcome(run_id, False, *resumed)

    async def _outcome(
        self, run_id: str, queued: bool, resumed: bool, why_not: str | None = None
    ) -> AnswerOutcome:
        """The outcome, with the run's status now and whether someone must resume it."""
        run = await self.store.get_run(run_id)
        ready = not resumed and await ready_to_resume(self.store, run)
        cluster = is_cluster_run(run)
        stalled = ready and run.lease is None and not cluster
        if resumed or run.status != "paused_waiting_human":
            why_not = None  # it went on all the same (a worker's watcher took it up)
        # the workers' watchers take up a cluster's run that nobody holds and that can go on
        # (paused with every answer in, or interrupted); one a live owner keeps, that owner
        goes_on = ready or run.status == "interrupted"
        waits = not resumed and goes_on and cluster and run.lease is None
        return AnswerOutcome(queued, resumed, run.status, stalled, why_not, waits)

    async def _resume_if_ready(
        self, run_id: str, answered: str | None, by: str
    ) -> tuple[bool, str | None]:
        """Whether the run resumed, and why this process could not resume it, if it tried."""
        run = await self.store.get_run(run_id)
        if run.status != "paused_waiting_human":
            return False, None
        needed = await awaited(self.store, run)
        if answered is not None and answered not in needed:
            return False, None  # an answer the pause does not wait for: it changes nothing
        if not await ready_to_resume(self.store, run):
            return False, None
        if is_cluster_run(run):
            # only the cluster executes its runs: this process queues it there when it has
            # the cluster, else (or when its scheduler is away) a worker's watcher takes it
            # up (see session.cluster), now or when a worker comes up
            why_not = None
            if self.resumer is not None and self.resumer.on_cluster:
                resumed, why_not = await self._resume_here(run_id, by)
                if resumed:
                    return True, None
            taken = await self._handed_over(run_id, unowned_ok=True, since=run.updated_at)
            return taken, why_not
        parked_elsewhere = run.lease is not None and (
            self.resumer is None or run.lease.owner != self.resumer.claimant.id
        )
        if parked_elsewhere and await self._handed_over(run_id, unowned_ok=False):
            return True, None  # its owner heard the doorbell and resumed it
        # (why not is for a cluster's run, which a worker takes up; this one waits for a
        # resume, which resume_needed says)
        return (await self._resume_here(run_id, by))[0], None

    async def _handed_over(
        self, run_id: str, unowned_ok: bool, since: datetime | None = None
    ) -> bool:
        """Wait until whoever should resume a parked run does; False if nobody will.

        ``unowned_ok``: the run has no owner and something else (a cluster's
        watcher) takes it up. ``since``: the run's ``updated_at`` once answered —
        a run changed since was taken up, even one that paused again already.
        """
        deadline = time.monotonic() + HANDOFF_SECONDS
        while time.monotonic() < deadline:
            run = await self.store.get_run(run_id)
            if run.status != "paused_waiting_human":
                return True
            if since is not None and run.updated_at != since:
                return True  # resumed and paused again (at its next gate) between two looks
            if run.lease is None and not unowned_ok:
                return False  # its owner died or let go meanwhile
            await asyncio.sleep(0.02)
        return not unowned_ok  # still owned and alive: it resumes at its next look

    async def _resume_here(self, run_id: str, by: str) -> tuple[bool, str | None]:
        if self.resumer is None:
            return False, None
        try:
            await self.resumer.resume_answered(run_id, by)
        except RunOwnedError:
            return True, None  # another process took it first: it resumes there
        except ResumeError as err:  # its parked watcher was faster: it went on (maybe ended)
            latest = await self.store.get_run(run_id)  # already; or this process cannot
            went_on = latest.status in ("running", "finished", "failed", "failed_resumable")
            return went_on, None if went_on else str(err)
        return True, None
