"""Who goes on while an async question waits: what its card says.

An async question is asked by one visit of its node. While that visit runs,
the agent keeps working meanwhile. Once an ``await_answers`` step that waits
on the node's questions has started (and not ended), or a paused run's
``await`` record lists the question (:func:`iterion_nb.runtime.wire.waited_on`),
the run waits for its answer. Once the asking visit has finished with no such
step open, the agent went on without the answer (a later step may still read
it). Every surface that shows pending questions says the same: the run widget,
the inbox widget, JupyterLab's sidebar.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iterion_nb.runtime.records import Event, Interaction
from iterion_nb.view.states import Visit, ended_as

#: What an ``await_answers`` step's ``from`` is when it waits on every question of the run.
ALL = "*"


@dataclass
class _Run:
    after: int = 0
    visits: list[Visit] = field(default_factory=list)
    open: dict[tuple[str | None, str], Visit] = field(default_factory=dict)
    #: Open ``await_answers`` steps: whose questions each waits on (:data:`ALL`: every one).
    gates: dict[tuple[str | None, str], str] = field(default_factory=dict)


def asked_in_finished_visit(question: Interaction, visits: Iterable[Visit]) -> bool:
    """Whether the visit of its node that asked ``question`` has finished.

    A visit stopped by a pause, a cancel or a crash goes on in the next visit of
    its node (the run resumed it): that one's state is the asker's.
    """
    same = [v for v in visits if v.node == question.node_id and v.branch == question.branch_id]
    at = max((i for i, v in enumerate(same) if v.started <= question.requested_at), default=None)
    if at is None:
        return False
    while same[at].state == "stopped" and at + 1 < len(same):
        at += 1
    return same[at].state == "finished"


def gated(question: Interaction, gates: Mapping[Any, str]) -> bool:
    """Whether an open ``await_answers`` step waits on ``question`` (``gates``: their ``from``)."""
    return any(source in (ALL, question.node_id) for source in gates.values())


class Askers:
    """Node visits and open ``await_answers`` steps of runs with pending async questions.

    One per reader that shows questions again and again (a sidebar's stream, a
    widget): each run's events are read once, then only the new ones. Runs with
    no pending async question left are forgotten.
    """

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def feed(self, run_id: str, events: Iterable[Event]) -> None:
        """Take a run's next events (in order, none twice)."""
        run = self._runs.setdefault(run_id, _Run())
        for event in events:
            run.after = event.seq
            if event.node_id is None:
                continue
            key = (event.branch_id, event.node_id)
            if event.type == "node_started":
                run.gates.pop(key, None)
                left = run.open.get(key)
                if left is not None:  # stopped (a pause, a cancel, a crash), then run again
                    left.ended, left.state = event.at, "stopped"
                run.open[key] = Visit(event.node_id, event.branch_id, event.at)
                run.visits.append(run.open[key])
                data = event.data or {}
                if data.get("kind") == "await_answers" and "from" in data:
                    # (a run recorded before steps named it: not known to wait on anything)
                    run.gates[key] = str(data["from"] or ALL)
                continue
            how = ended_as(event)
            if how is not None and key in run.open:
                visit = run.open.pop(key)
                visit.ended, visit.state = event.at, how
                run.gates.pop(key, None)

    def waits(self, question: Interaction) -> tuple[bool, bool]:
        """(an open ``await_answers`` step waits on it, the visit that asked it has finished)."""
        run = self._runs.get(question.run_id)
        if run is None or question.kind != "async":
            return False, False
        return gated(question, run.gates), asked_in_finished_visit(question, run.visits)

    async def read(self, store: Any, questions: Sequence[Interaction]) -> None:
        """Read the new events of the runs of the pending async ``questions``; forget the rest.

        Visits that ended before the oldest of a run's pending questions was asked
        cannot have asked one: they are let go.
        """
        asked = [q for q in questions if q.kind == "async" and q.pending]
        oldest = {q.run_id: q.requested_at for q in sorted(asked, key=lambda q: q.requested_at,
                                                           reverse=True)}  # fmt: skip
        for gone in set(self._runs) - oldest.keys():
            del self._runs[gone]
        for run_id in sorted(oldest):
            after = self._runs[run_id].after if run_id in self._runs else 0
            self.feed(run_id, await store.events(run_id, after=after))
            run = self._runs[run_id]
            run.visits = [v for v in run.visits if v.ended is None or v.ended >= oldest[run_id]]


__all__ = ["ALL", "Askers", "asked_in_finished_visit", "gated"]
