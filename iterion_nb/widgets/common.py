"""What the widgets share: where their ES modules are, who clicked, answering a question."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from iterion_nb.errors import IterionError

STATIC = Path(__file__).resolve().parent.parent / "static"

#: ``answer(run_id, interaction_id, answer, answered_by) -> {"queued", "resumed"}``
AnswerFn = Callable[[str, str, Any, str], Awaitable[dict[str, Any]]]

#: Names a front-end may send that name nobody: empty, classic Notebook's
#: placeholder, or the random id JupyterLab gives an anonymous user.
_NOBODY = re.compile(r"^(|username|anonymous|[0-9a-f]{32})$", re.IGNORECASE)


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


def who_clicked() -> str:
    """Who answers with a click: the Jupyter user where known, else the OS user.

    JupyterHub names its user in the kernel's environment
    (``JUPYTERHUB_USER``); a front-end may name one in the message header;
    else the account the kernel runs as.
    """
    hub = os.environ.get("JUPYTERHUB_USER", "").strip()
    if hub:
        return hub
    named = _front_end_user()
    if named:
        return named
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container): still say it was a click
        return "notebook"


def outcome_text(outcome: dict[str, Any]) -> str:
    """What an answer did, in words: the agent reads it later, or the run goes on."""
    if outcome.get("resumed"):
        return "Answered — the run goes on"
    if outcome.get("queued"):
        return "Sent — the agent reads it at its next turn"
    return "Answered"


class Answering:
    """Answers from a widget's front-end: ``{"type": "answer", run_id, interaction_id, answer}``.

    Messages may arrive on a subshell thread; who clicked is read there (the
    message's header), the answer is given on the loop the widget was made on.
    The outcome goes to ``last_result``.
    """

    last_result: dict[str, Any]
    run_id: str | None
    _answer: AnswerFn | None
    _tasks: set[asyncio.Task[Any]]
    answered_by: str | None

    def _loop(self) -> asyncio.AbstractEventLoop | None:
        raise NotImplementedError

    async def refresh(self) -> bool:  # noqa: D102 - the widget's own
        raise NotImplementedError

    def _known_run(self, interaction_id: str) -> str | None:
        return self.run_id

    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "answer":
            self._on_other_msg(content)
            return
        who = self.answered_by or who_clicked()
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
        iid = str(content.get("interaction_id", ""))
        run_id = str(content.get("run_id") or self._known_run(iid) or "")
        who = who or self.answered_by or who_clicked()
        try:
            if not iid or not run_id:
                raise IterionError("the answer names no question")
            if self._answer is None:
                raise IterionError("this view cannot answer: use the inbox (%iterion inbox)")
            outcome = await self._answer(run_id, iid, content.get("answer"), who)
            result: dict[str, Any] = {"interaction_id": iid, **outcome}
            result["text"] = outcome_text(outcome)
        except IterionError as err:
            result = {"interaction_id": iid, "error": str(err)}
        except Exception as err:  # shown in the widget, never lost
            result = {"interaction_id": iid, "error": f"{type(err).__name__}: {err}"}
        self.last_result = result
        await self.refresh()
        return result


def ended_text(ended: str, reason: str | None) -> str:
    """How a question ended without an answer, in words (as the widgets' script says it)."""
    if ended == "retracted":
        return "withdrawn by its agent" + (f": {reason}" if reason else "")
    return "expired unanswered"
