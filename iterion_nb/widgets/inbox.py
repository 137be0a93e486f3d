"""The inbox: every pending question of a run (or of the whole store) as an answer form."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anywidget
import traitlets

from iterion_nb.errors import IterionError
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.wire import interaction_json
from iterion_nb.widgets.common import STATIC
from iterion_nb.widgets.live import Live, on_loop

#: ``answer(run_id, interaction_id, answer, answered_by) -> {"queued", "resumed"}``
AnswerFn = Callable[[str, str, Any, str], Awaitable[dict[str, bool]]]

#: How many answered questions the history keeps.
HISTORY = 50


class InboxWidget(anywidget.AnyWidget):
    """Pending questions with their forms, and the ones answered since (live).

    ``run_id`` limits it to one run; without it, every run of the store.
    Submitting calls ``answer`` (the same path as the API: ``RunHandle.answer``)
    and shows what it did, ``{queued, resumed}``. Widget messages may arrive
    on a subshell thread; the work is always done on the loop it was made on.
    """

    _esm = STATIC / "inbox.js"
    scope = traitlets.Unicode("").tag(sync=True)
    pending: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    history: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    last_result = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        store: Store,
        answer: AnswerFn,
        run_id: str | None = None,
        *,
        answered_by: str = "notebook",
        interval: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope=f"run {run_id}" if run_id else "all runs", **kwargs)
        self.store = store
        self.run_id = run_id
        self.answered_by = answered_by
        self._answer = answer
        self._known: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.live = Live(store, run_id, self.refresh, interval)
        self.on_msg(self._on_msg)
        self.live.start()

    # -- store -> state ------------------------------------------------------
    async def refresh(self) -> bool:
        """Read pending questions (and what left the list) from the store."""
        if getattr(self.store, "closed", False):
            return False
        records = await self.store.pending_interactions(self.run_id)
        pending = [interaction_json(q) for q in records if q.kind != "await"]
        ids = {q["id"] for q in pending}
        gone = [iid for iid in self._known if iid not in ids]
        history = list(self.history)
        if self.run_id is not None and not self._known and not history:
            # a run's inbox starts with the run's answered questions
            answered = [q for q in await self.store.interactions(self.run_id) if not q.pending]
            history = [interaction_json(q) for q in answered if q.kind != "await"][::-1]
        for iid in gone:
            record = await self.store.get_interaction(iid)
            history.insert(0, interaction_json(record))
        self._known = {q["id"]: q for q in pending}
        if pending != self.pending:
            self.pending = pending
        if history[:HISTORY] != self.history:
            self.history = history[:HISTORY]
        return True

    # -- front-end -> answer ---------------------------------------------------
    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "answer":
            return
        on_loop(self.live.loop, lambda: self._spawn(self.submit(content)))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)  # a strong reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def submit(self, content: dict[str, Any]) -> dict[str, Any]:
        """Answer one question as the front-end asked; the outcome goes to ``last_result``."""
        iid = str(content.get("interaction_id", ""))
        known = self._known.get(iid)
        run_id = str(content.get("run_id") or (known or {}).get("run_id") or self.run_id or "")
        try:
            if not iid or not run_id:
                raise IterionError("the answer names no question")
            outcome = await self._answer(run_id, iid, content.get("answer"), self.answered_by)
            result: dict[str, Any] = {"interaction_id": iid, **outcome}
        except IterionError as err:
            result = {"interaction_id": iid, "error": str(err)}
        except Exception as err:  # shown in the widget, never lost
            result = {"interaction_id": iid, "error": f"{type(err).__name__}: {err}"}
        self.last_result = result
        await self.refresh()
        return result

    def close(self) -> None:
        """Stop following the store and close the widget."""
        self.live.stop()
        super().close()
