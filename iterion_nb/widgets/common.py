"""What the widgets share: where their ES modules are, who clicked, answering a question."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterion_nb.errors import AlreadyAnsweredError, IterionError
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.wire import interaction_json
from iterion_nb.view.text import already_answered, clean_text

STATIC = Path(__file__).resolve().parent.parent / "static"

#: ``answer(run_id, interaction_id, answer, answered_by) -> {"queued", "resumed", "run_status"}``
AnswerFn = Callable[[str, str, Any, str], Awaitable[dict[str, Any]]]

#: Names a front-end may send that name nobody: empty, classic Notebook's
#: placeholder, or the random id JupyterLab gives an anonymous user.
_NOBODY = re.compile(r"^(|username|anonymous|[0-9a-f]{32})$", re.IGNORECASE)
#: The longest name a front-end may give for who answered (as the REST API takes).
MAX_NAME = 200


def _front_end_user() -> str | None:
    """The user named in the header of the message being handled, if a kernel has one."""
    with contextlib.suppress(Exception):
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        if kernel is not None:
            name = str(kernel.get_parent().get("header", {}).get("username") or "")
            if not _NOBODY.match(name):
                return name
    return None


def who_clicked(named: Any = None) -> str:
    """Who answers with a click: the Jupyter user where known, else the OS user.

    ``named`` is the identity the front-end sent with the click (JupyterLab's
    user, the name its questions sidebar records too); else JupyterHub's user
    (``JUPYTERHUB_USER`` in the kernel's environment); else a name in the
    message header; else the account the kernel runs as.
    """
    given = front_end_identity(named)
    if given:
        return given
    hub = os.environ.get("JUPYTERHUB_USER", "").strip()
    if hub:
        return hub
    header = _front_end_user()
    if header:
        return header
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container): still say it was a click
        return "notebook"


def front_end_identity(named: Any) -> str | None:
    """The identity a widget's front-end sent with a click, if it names somebody."""
    if not isinstance(named, str):
        return None
    name = " ".join(named.split())  # one line: it is shown in tables and sentences
    if len(name) > MAX_NAME or _NOBODY.match(name) or not clean_text(name):
        return None  # (the store refuses a name with control characters: the click would fail)
    return name


#: Statuses in which something executes the run, or keeps it parked and resumes it on an answer.
LIVE = ("running", "paused_waiting_human")
#: Statuses after which no agent will read an answer.
OVER = ("finished", "failed")
#: A status in words, where its name does not read as one (as the JupyterLab sidebar says it).
STATUS_WORDS = {
    "paused_waiting_human": "waiting for an answer",
    "failed_resumable": "failed (resumable)",
    "interrupted": "interrupted (nothing executes it)",
}
#: Since an answer was given, the run has ... (what the banner says once the run moved on).
SINCE = {
    "running": "resumed",
    "paused_waiting_human": "paused, waiting for an answer",
    "finished": "finished",
    "failed": "failed",
    "failed_resumable": "failed (resumable)",
    "cancelled": "been cancelled",
    "interrupted": "been interrupted",
}


def status_words(status: str) -> str:
    """A run's status as a person reads it."""
    return STATUS_WORDS.get(status, status)


def outcome_text(outcome: dict[str, Any], run_id: str | None = None) -> str:
    """What an answer did, in words: the agent reads it later, the run goes on, or it waits.

    A run that nothing executes (``interrupted``, ``failed_resumable``,
    ``cancelled``, or paused with every answer in while its process is gone:
    ``resume_needed``) keeps the answer until it is resumed, which this says,
    with the command that resumes it (the JupyterLab sidebar says the same). A
    cluster this session could not reach (``resume_error``) is named; a cluster's
    run that no worker took up yet (``awaiting_worker``: paused with every answer
    in, or interrupted) waits for the first free one.
    """
    status = str(outcome.get("run_status") or "")
    run = f"run {run_id}" if run_id else "the run"
    if outcome.get("resumed"):
        return "Answered — the run goes on"
    if outcome.get("resume_error"):  # this session's cluster should have taken it up
        return (
            f"Saved — every answer {run} waits for is in, but this session could not send it"
            f" to its cluster ({outcome['resume_error']}): the first worker that comes up"
            " takes it"
        )
    # a cluster's run no worker took up (none up, or all busy): one does, else a resume
    fallback = f" (with no worker up: %iterion resume {run_id or 'RUN'})"
    if outcome.get("awaiting_worker") and status == "interrupted":  # its worker was lost
        return (
            f"Saved — {run} is interrupted; the first worker of its cluster free to take it up"
            f" resumes it, and the agent gets your answer then{fallback}"
        )
    if outcome.get("awaiting_worker"):
        return (
            f"Saved — every answer {run} waits for is in; no worker of its cluster has taken it"
            f" up yet: the first one free resumes it{fallback}"
        )
    if outcome.get("resume_needed"):  # paused, answered, and its process is gone
        return (
            f"Saved — every answer {run} waits for is in, but nothing executes it:"
            f" resume it (%iterion resume {run_id or 'RUN'})"
        )
    if status in OVER:
        return f"Saved — but {run} has ended ({status}): no agent will read it"
    if status and status not in LIVE:
        return (
            f"Saved — {run} is {status_words(status)}, so the agent gets your answer when"
            f" the run is resumed (%iterion resume {run_id or 'RUN'})"
        )
    if outcome.get("queued"):
        return "Sent — the agent reads it at its next turn"
    return "Answered"


def since_text(status: str) -> str:
    """The banner of an answer once its run moved on (finished, paused, resumed, ...)."""
    return f"Answered — the run has since {SINCE.get(status, status)}"


@dataclass
class Banner:
    """What the banner under a widget's forms speaks of, to keep it true as the run moves on."""

    run_id: str
    interaction_id: str
    #: The run's status the banner describes (None: not read yet).
    status: str | None
    #: Whether the question was pending when the answer was refused.
    was_pending: bool
    error: bool
    #: The answer resumes a paused run, which its owner may take up a moment later.
    resuming: bool = False


class Answering:
    """Answers from a widget's front-end: ``{"type": "answer", run_id, interaction_id, answer}``.

    Messages may arrive on a subshell thread; who clicked is read there (the
    identity the front-end sent, else the message's header), the answer is
    given on the loop the widget was made on. The outcome goes to
    ``last_result``, which :meth:`keep_banner_true` keeps true afterwards.
    """

    last_result: dict[str, Any]
    run_id: str | None
    store: Store
    _answer: AnswerFn | None
    _tasks: set[asyncio.Task[Any]]
    answered_by: str | None
    _banner: Banner | None = None

    def _loop(self) -> asyncio.AbstractEventLoop | None:
        raise NotImplementedError

    async def refresh(self) -> bool:  # noqa: D102 - the widget's own
        raise NotImplementedError

    def _known_run(self, interaction_id: str) -> str | None:
        return self.run_id

    def _pending_ids(self) -> set[str]:
        """The questions the widget shows as pending."""
        return set()

    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "answer":
            self._on_other_msg(content)
            return
        who = self.answered_by or who_clicked(content.get("answered_by"))
        from iterion_nb.widgets.live import on_loop

        on_loop(self._loop(), lambda: self._spawn(self.submit(content, who)))

    def _on_other_msg(self, content: Any) -> None:
        """Messages other than answers (a widget may use some)."""

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)  # a strong reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def submit(self, content: dict[str, Any], who: str | None = None) -> dict[str, Any]:
        """Answer one question as the front-end asked; the outcome goes to ``last_result``."""
        sent = content.get("interaction_id")
        iid = sent if isinstance(sent, str) else ""
        run_id = ""
        who = who or self.answered_by or who_clicked(content.get("answered_by"))
        was_pending = iid in self._pending_ids()
        try:
            run_id = self._run_of(iid, content.get("run_id"))
            if self._answer is None:
                raise IterionError("this view cannot answer: use the inbox (%iterion inbox)")
            outcome = await self._answer(run_id, iid, content.get("answer"), who)
            result: dict[str, Any] = {"interaction_id": iid, "run_id": run_id, **outcome}
            result["text"] = outcome_text(outcome, run_id)
            resuming = bool(outcome.get("resumed"))
            status = "running" if resuming else outcome.get("run_status")
            self._banner = Banner(run_id, iid, status, was_pending, False, resuming)
        except IterionError as err:
            result = {"interaction_id": iid, "error": await self._refusal(err, iid)}
            # answered by another meanwhile: that is why it left the list, so the refusal stays
            was_pending = was_pending and not isinstance(err, AlreadyAnsweredError)
            self._banner = Banner(run_id, iid, None, was_pending, error=True)
        except Exception as err:  # shown in the widget, never lost
            result = {"interaction_id": iid, "error": f"{type(err).__name__}: {err}"}
            self._banner = Banner(run_id, iid, None, was_pending, error=True)
        self.last_result = result
        await self.refresh()
        return result

    def _run_of(self, iid: str, sent: Any) -> str:
        """The run of the question a message answers: the one the widget shows it in, else as sent.

        Raises:
            IterionError: The message names no question, or another run than
                the one this widget answers the question for.
        """
        if not iid or not clean_text(iid):
            raise IterionError("the answer names no question")
        known = self._known_run(iid)
        if sent is None or sent == "":
            if not known:
                raise IterionError("the answer names no question")
            return known
        if not clean_text(sent):
            raise IterionError("the answer names no run")
        if known and sent != known:
            raise IterionError(
                f"the answer names run '{sent}', but this view answers question '{iid}'"
                f" for run '{known}': nothing sent"
            )
        return str(sent)

    async def _refusal(self, err: IterionError, iid: str) -> str:
        """Why an answer was refused; a second answer says who gave the first, and what."""
        if isinstance(err, AlreadyAnsweredError):
            with contextlib.suppress(IterionError):
                return already_answered(interaction_json(await self.store.get_interaction(iid)))
        return str(err)

    def keep_banner_true(self, status: str | None, pending: set[str]) -> None:
        """Once the run moved on, say so in the banner; a refusal goes once it is moot.

        ``status`` is the status of the banner's run now, ``pending`` the
        questions pending now. An answer's banner ("Sent — the agent reads it at
        its next turn") becomes "Answered — the run has since finished" (or
        paused, resumed, ...); a refusal leaves once its question left the list
        or its run moved on.
        """
        banner = self._banner
        if banner is None or status is None:
            return
        if banner.resuming:  # "the run goes on" holds while its owner takes it up
            if status == "paused_waiting_human":
                return
            banner.resuming = False
        if banner.status is None:
            banner.status = status
        if banner.error:
            left = banner.was_pending and banner.interaction_id not in pending
            if left or status != banner.status:
                self._banner = None
                self.last_result = {}
        elif status != banner.status:
            banner.status = status
            self.last_result = {**self.last_result, "text": since_text(status)}


def ended_text(ended: str, reason: str | None) -> str:
    """How a question ended without an answer, in words (as the widgets' script says it)."""
    if ended == "retracted":
        return "withdrawn by its agent" + (f": {reason}" if reason else "")
    return "expired unanswered"
