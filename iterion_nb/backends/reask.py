"""Questions a re-run node asks again, recognised by what they ask rather than by their call's id.

A question's id is ``<run id>-<tool call id>``. A scripted model's call ids
are deterministic, so a node re-run (resumed after a failure, or after its
process died) asks its questions again under the same ids and the store's
id conflict hands back the records it posted before. Real models (Anthropic,
OpenAI, the claude CLI) mint a fresh call id every time: without this module
the same question would be posted a second time, and the first left pending
for ever.

:class:`Reasks` maps an ask whose id is new onto the question the same node
posted before in the same visit: same run, node and branch, asked since the
node last finished (a later loop iteration asks anew), of the same kind,
with the same text and options (the key answer replay uses,
:func:`iterion_nb.runtime.replay.key_of`). The k-th such ask of an execution
takes the k-th earlier record it has not taken yet. The caller then posts the
record under the earlier id, and the store's conflict path reuses it exactly
as for a deterministic id: no second record, no second announcement, the
answer included.

Only an execution that may be a re-run looks (``BackendRequest.rerun``): the
first node execution of a frontier a resume restored from the checkpoint.
Every other one (the next node, a loop's next visit, a run that never
stopped) is new and costs nothing here: no question or event is read. There,
the node's earlier questions are read once (at its first ask), and the event
log once, only when one of them could be re-asked.

Which earlier questions belong to this visit is read from the questions
themselves: those asked (``requested_at``) after the node's last
``node_finished`` on the branch (an announced one: announced after it). The
announcements (``human_input_requested``) cannot decide alone: a question
commits at once, its announcement rides the store's next batch, and a
process killed in between leaves a question nobody announced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from iterion_nb.runtime import replay
from iterion_nb.runtime.ports import NodeContext
from iterion_nb.runtime.records import Interaction

#: The question kinds an agent asks (``await`` pauses are not questions).
ASKED = ("async", "ask_user")
#: Where a paused conversation keeps the ids its asks resolved to.
STATE_KEY = "asked"


class Reasks:
    """One node execution's asks, matched with the questions its earlier runs posted.

    Args:
        ctx: The node's context (its store, run, node and branch).
        resume: The state the conversation paused with, when it continues one:
            the questions it had asked (``asked``) are its own, not to be
            taken again. A state without them (an older checkpoint) turns
            the matching off: every new id is a new question, as before.
        rerun: Whether this execution may re-run one begun before
            (``BackendRequest.rerun``); without it the matching is off, and
            nothing is read.
    """

    def __init__(
        self, ctx: NodeContext, resume: Mapping[str, Any] | None = None, *, rerun: bool = False
    ) -> None:
        self._ctx = ctx
        self._taken: set[str] = {str(i) for i in (resume or {}).get(STATE_KEY, ())}
        self._enabled = rerun and (not resume or STATE_KEY in resume)
        self._bound: dict[str, str] = {}
        self._earlier: list[Interaction] | None = None
        self._this_visit: set[str] | None = None

    def asked(self) -> list[str]:
        """The ids this execution's asks resolved to, for the state of a pause."""
        return sorted(self._taken)

    def bind(self, call_id: str, interaction_id: str) -> None:
        """Say that the call ``call_id`` asked the question ``interaction_id``."""
        self._bound[call_id] = interaction_id
        self._taken.add(interaction_id)

    def id_for(self, call_id: str) -> str | None:
        """The id of the question the call ``call_id`` resolved to, if it was reused."""
        return self._bound.get(call_id)

    async def resolve(self, record: Interaction, call_id: str) -> Interaction:
        """``record``, or ``record`` under the id of the question it asks again."""
        bound = self._bound.get(call_id)
        if bound is not None:
            return replace(record, id=bound)
        earlier = await self._load() if self._enabled else []
        if earlier and all(e.id != record.id for e in earlier):
            found = await self._match(record, earlier)
            if found is not None:
                self.bind(call_id, found.id)
                return replace(record, id=found.id)
        self._taken.add(record.id)
        return record

    async def _match(self, record: Interaction, earlier: list[Interaction]) -> Interaction | None:
        """The first question of ``earlier`` that ``record`` asks again and nobody took."""
        key = (record.kind, replay.key_of(record))
        same = [e for e in earlier if e.id not in self._taken and (e.kind, replay.key_of(e)) == key]
        if not same:
            return None
        visit = await self._visit(earlier)
        return next((e for e in same if e.id in visit), None)

    async def _load(self) -> list[Interaction]:
        """The questions this node posted on its branch before this execution (read once)."""
        if self._earlier is None:
            ctx = self._ctx
            self._earlier = sorted(
                (q for q in await ctx.store.interactions(ctx.run_id)
                 if q.node_id == ctx.node_id and q.branch_id == ctx.branch_id
                 and q.kind in ASKED),
                key=lambda q: q.requested_at,
            )  # fmt: skip
        return self._earlier

    async def _visit(self, earlier: list[Interaction]) -> set[str]:
        """The ids of ``earlier``'s questions asked since this node last finished on its branch.

        Those asked (``requested_at``) after its last ``node_finished`` there. That
        event is in the log once the node finished: every node that asks (an agent, a
        judge, an llm human or router) is costly, and the engine commits a costly
        node's next checkpoint, the events before it first (``save_checkpoint(...,
        durable=True)``: DuckDB and PostgreSQL flush the event buffer in it, the remote
        store sends its batch), before the branch goes on. A question's announcement,
        when there is one, decides by its place in the log instead, with no clock
        compared (an event's time is the store's clock, a question's the asker's);
        a question with none (its process was killed before its announcement was
        written) is placed by its time.
        """
        if self._this_visit is None:
            ctx = self._ctx
            finished = 0  # the seq of its last node_finished here
            finished_at: datetime | None = None  # (its time; None: it never finished)
            announced: dict[str, int] = {}  # question id -> its announcement's seq
            for e in await ctx.store.events(ctx.run_id):
                if e.node_id != ctx.node_id or e.branch_id != ctx.branch_id:
                    continue
                if e.type == "node_finished":
                    finished, finished_at = e.seq, e.at
                elif e.type == "human_input_requested":
                    announced[str(e.data.get("interaction_id"))] = e.seq
            self._this_visit = {
                q.id for q in earlier
                if finished_at is None
                or (announced[q.id] > finished if q.id in announced
                    else q.requested_at > finished_at)
            }  # fmt: skip
        return self._this_visit
