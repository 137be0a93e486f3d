"""What JupyterLab's questions sidebar and runs panel show: one snapshot of the store.

The server extension pushes it (:mod:`iterion_nb.server.routes`) each time it
changes: every pending question of every run, the questions answered most
recently (with who answered and when) or that ended unanswered (expired, or
withdrawn by their agent, with the reason), and the newest runs with their status.

Each question carries its run's status (``run_status``, effective: a run
nothing executes reads ``interrupted``), so the sidebar can say when an answer
will only reach the agent once the run is resumed — unless ``run_cluster``:
a Dask cluster executes the run, and its workers take it up again by
themselves; ``waited_on``: the run
waits for its answer at a sync point (an ``await_answers`` step, or the
agent's ``await_answers`` pause) — an async question then no longer reads as
one its agent works beside; and ``asker_finished``: the node visit that asked
it has finished (see :mod:`iterion_nb.view.askers`).
"""

from __future__ import annotations

from collections.abc import Set
from datetime import UTC, datetime
from typing import Any

from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.answers import is_cluster_run
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Interaction, Run
from iterion_nb.runtime.wire import interaction_json, run_json, waited_on
from iterion_nb.view.askers import Askers

#: The newest runs listed in the runs panel.
RUNS_SHOWN = 50
#: Answered questions listed, newest first, taken from this many of the newest runs.
ANSWERED_SHOWN = 30
ANSWERED_RUNS = 20


def _question(
    item: Interaction, runs: dict[str, Run], waited: Set[str] = frozenset(),
    askers: Askers | None = None,
) -> dict[str, Any]:  # fmt: skip
    run = runs.get(item.run_id)
    gate, finished = askers.waits(item) if askers is not None else (False, False)
    return interaction_json(item) | {
        "workflow": run.workflow if run is not None else None,
        "run_status": run.status if run is not None else None,
        "run_cluster": run is not None and is_cluster_run(run),
        "expires_at": item.expires_at.isoformat() if item.expires_at is not None else None,
        "waited_on": item.id in waited or gate,
        "asker_finished": finished,
    }


def _closed_at(item: Interaction) -> datetime:
    closed = item.answered_at or item.ended_at
    assert closed is not None
    return closed


async def snapshot(store: Store, askers: Askers | None = None) -> dict[str, Any]:
    """Pending questions (oldest first), answered ones (newest first) and the newest runs.

    ``askers`` keeps what was read of the asking runs' events for the next snapshot
    (a stream's); without, they are read whole.

    ``await`` records (a run's synthetic pause) are not questions and are
    left out, as the REST routes do.
    """
    runs = await store.list_runs(limit=RUNS_SHOWN)
    known = {run.id: run for run in runs}
    every = await store.pending_interactions()
    waited = waited_on(every)
    pending = [i for i in every if i.kind != "await"]
    askers = askers or Askers()
    await askers.read(store, pending)
    for run_id in {i.run_id for i in pending} - known.keys():  # older runs still asking
        known[run_id] = await store.get_run(run_id)
    answered: list[Interaction] = []
    for run in runs[:ANSWERED_RUNS]:
        found = await store.interactions(run.id)
        now = datetime.now(UTC)  # one past its expiry shows as expired, recorded or not yet
        current = (lifecycle.expire(i) if i.due(now) else i for i in found if i.kind != "await")
        answered.extend(i for i in current if not i.pending)
    answered.sort(key=_closed_at, reverse=True)  # answered, expired or withdrawn
    return {
        "pending": [_question(i, known, waited, askers) for i in pending],
        "answered": [_question(i, known) for i in answered[:ANSWERED_SHOWN]],
        "runs": [run_json(run) for run in runs],
    }


__all__ = ["snapshot"]
