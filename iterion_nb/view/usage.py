"""What a run has used — time, tokens, cost — against its workflow's budget.

Read from the events as they come (the checkpoint's count is only saved
after each node), so a live view moves with every model turn. Time is the
time the run was actually executing, as its budget counts it: from each
``run_started``/``run_resumed`` to the pause, stop or end that follows. A
run whose process died (kill -9, a kernel restart: it reads ``interrupted``)
wrote no stop: it executed until the last event its execution wrote — not an
answer or an expiry, which anyone writes at any time — and not while nothing
ran it, until it was resumed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from iterion_nb.ir import model as m
from iterion_nb.runtime.records import Event

_STARTS = ("run_started", "run_resumed")
_STOPS = ("run_paused", "run_finished", "run_failed", "run_cancelled")
#: Events any process writes at any time, running the run or not.
_FROM_ANYONE = ("interaction_answered", "interaction_expired")


@dataclass(frozen=True)
class Usage:
    """Seconds executing (``since``: the start of the stretch still under way), tokens, cost."""

    seconds: float
    tokens: int
    cost_usd: float
    since: datetime | None = None

    def as_json(self, budget: m.Budget | None) -> dict[str, Any]:
        """For the widget: the numbers, and the limits the workflow sets (None: no limit)."""
        return {
            "seconds": round(self.seconds, 3),
            "since": self.since.isoformat() if self.since else None,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "max_seconds": budget.max_duration_seconds if budget else None,
            "max_tokens": budget.max_tokens if budget else None,
            "max_cost_usd": budget.max_cost_usd if budget else None,
        }


def usage(
    events: Iterable[Event], run_status: str, saved: Mapping[str, Any] | None = None
) -> Usage:
    """The run's usage from its events (never below what its checkpoint ``saved``)."""
    seconds, tokens, cost = 0.0, 0, 0.0
    since: datetime | None = None
    last: datetime | None = None  # the last event the stretch under way wrote
    for event in events:
        if event.type in _STARTS:
            if since is not None and last is not None:  # its process died: it ran until `last`
                seconds += (last - since).total_seconds()
            since = last = event.at
        elif event.type in _STOPS and since is not None:
            seconds += (event.at - since).total_seconds()
            since = None
        elif since is not None and event.type not in _FROM_ANYONE:
            last = event.at
        if event.type == "llm_step_finished":
            data = event.data or {}
            tokens += int(data.get("tokens_in") or 0) + int(data.get("tokens_out") or 0)
            cost += float(data.get("cost_usd") or 0.0)
    if since is not None and run_status != "running" and last is not None:
        seconds += (last - since).total_seconds()  # it stopped without saying so
        since = None
    saved = saved or {}
    tokens = max(tokens, int(saved.get("tokens") or 0))
    cost = max(cost, float(saved.get("cost_usd") or 0.0))
    return Usage(seconds, tokens, cost, since)
