"""Whether one copy of a run is an earlier state of another (``iterion-nb store copy``).

A run's history only grows: events are appended, artifacts gain versions,
questions are added, then answered, expired or retracted (a pending one may
be amended, which bumps its revision), and messages are queued, then
delivered. So a copy ``a`` of a run *precedes* a copy ``b`` when everything
``a`` recorded is in ``b`` as ``a`` has it, or as a later state of it:

- ``a``'s events are the first ``len(a.events)`` events of ``b`` (same seqs,
  times, types and data);
- each of ``a``'s artifact versions is in ``b`` with the same value;
- each of ``a``'s questions is in ``b``, equal, or ``a``'s is still pending
  and ``b``'s is the same question later on (answered, ended, or amended);
- each of ``a``'s messages is in ``b``, equal, or ``a``'s is undelivered and
  ``b``'s is the same message, delivered.

The run's record (status, checkpoint, lease) is the head of that history,
not history itself: it goes with the copy that is further on.

Importing ``incoming`` over ``current`` then replaces it when ``current``
precedes ``incoming`` (the source went on), and leaves it alone otherwise:
``"newer"`` when ``incoming`` precedes ``current`` (the destination went
on; the source has nothing it lacks), ``"diverged"`` when each has
something the other lacks (say, one question answered differently in each).
Both copies are at hand in the importing transaction already (it compares
them to say ``"unchanged"``), so the check reads nothing more, and it costs
one pass over each copy's records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from iterion_nb.runtime.records import Artifact, Interaction, QueuedMessage, RunBundle

#: What importing a run does: ``diverged`` and ``newer`` leave the store's copy as it was.
ImportOutcome = Literal["created", "updated", "unchanged", "diverged", "newer"]
#: The outcomes that leave a different copy in place, because replacing it would lose data.
KEPT: tuple[ImportOutcome, ...] = ("diverged", "newer")


def import_outcome(
    current: RunBundle | None, incoming: RunBundle, *, force: bool = False
) -> ImportOutcome:
    """What importing ``incoming`` over the store's ``current`` copy does.

    ``force`` replaces a copy that diverged or is newer as well.
    """
    if current is None:
        return "created"
    if current == incoming:
        return "unchanged"
    if force or precedes(current, incoming):
        return "updated"
    return "newer" if precedes(incoming, current) else "diverged"


def precedes(a: RunBundle, b: RunBundle) -> bool:
    """Whether everything copy ``a`` of a run recorded is in copy ``b`` (as is, or later on)."""
    return (
        a.events == b.events[: len(a.events)]
        and _artifacts_within(a.artifacts, b.artifacts)
        and _all_later(a.interactions, b.interactions, _question_precedes)
        and _all_later(a.messages, b.messages, _message_precedes)
    )


def _artifacts_within(a: tuple[Artifact, ...], b: tuple[Artifact, ...]) -> bool:
    """Whether each artifact version of ``a`` is in ``b``, with the same value."""
    by_key = {(x.name, x.version): x for x in b}
    return all(by_key.get((x.name, x.version)) == x for x in a)


def _all_later(
    earlier: tuple[Any, ...], later: tuple[Any, ...], step: Callable[[Any, Any], bool]
) -> bool:
    """Whether each record of ``earlier`` is, by id, in ``later``: equal, or a later state."""
    by_id = {x.id: x for x in later}
    return all(x.id in by_id and (x == by_id[x.id] or step(x, by_id[x.id])) for x in earlier)


def _question_precedes(a: Interaction, b: Interaction) -> bool:
    """A pending question, then the same one answered, ended or amended."""
    if not a.pending:
        return False
    if b.revision != a.revision:
        return b.revision > a.revision
    asked = replace(
        b, answered_at=None, answers=None, answered_by=None,
        ended=None, ended_at=None, end_reason=None,
    )  # fmt: skip
    return asked == a


def _message_precedes(a: QueuedMessage, b: QueuedMessage) -> bool:
    """An undelivered message, then the same one delivered."""
    return a.delivered_at is None and replace(b, delivered_at=None) == a
