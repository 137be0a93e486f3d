"""Run ownership: a lease in the store, taken by one session and renewed by its heartbeat.

Every executing run has exactly one owner. The owner is a :class:`Claimant`
(one per :class:`~iterion_nb.session.Session`: a process id, a host and a
random id), and what the store records is a
:class:`~iterion_nb.runtime.records.Lease` that lapses ``ttl`` seconds after
its last renewal. A run whose status says ``running`` but whose lease lapsed
— or whose owner's process is gone from this host — reads as
``interrupted``: nothing executes it, and anyone may resume it.

The stores apply :func:`effective_status` to every run they return, so every
surface (lists, REST, widgets, reports) shows the same thing.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from iterion_nb.errors import ResumeError, RunOwnedError
from iterion_nb.runtime.records import QUEUE_PREFIX, Lease, Run, RunStatus, encode_json

#: How long a lease lasts without renewal (seconds).
DEFAULT_TTL = 10.0
#: Seconds after a store's server came back from an outage during which a run whose lease
#: lapsed meanwhile is left to its owner (which may be alive, and renews it first).
TAKEOVER_GRACE = DEFAULT_TTL
#: How often an owner renews its leases (a fraction of the TTL).
HEARTBEAT_SHARE = 0.25
#: How long cancelling a run executing elsewhere waits for its owner to stop it.
CANCEL_WAIT = 30.0
#: How long cancelling a run still queued for a cluster waits for a worker to take it
#: (and end it ``cancelled``): one that is up does so at once; none may be up for hours.
QUEUED_CANCEL_WAIT = 3.0


def cancel_wait(run: Run) -> float:
    """How long a cancel of ``run`` (still ``running``) waits for it to settle."""
    return QUEUED_CANCEL_WAIT if run.lease is not None and run.lease.queued else CANCEL_WAIT


_HOST = socket.gethostname()


def this_host() -> str:
    """This machine's host name, as recorded in leases."""
    return _HOST


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who asks to own runs: one session of one process.

    Attributes:
        id: Unique per session (two sessions of one process are two owners).
        pid: The process id.
        host: The host name.
        ttl: How long a lease lasts without renewal, in seconds.
    """

    id: str
    pid: int
    host: str
    ttl: float = DEFAULT_TTL

    @classmethod
    def here(cls, ttl: float = DEFAULT_TTL) -> Claimant:
        """A new claimant for this process."""
        return cls(uuid.uuid4().hex, os.getpid(), this_host(), ttl)

    @classmethod
    def queue(cls, ttl: float) -> Claimant:
        """A claimant that holds runs for a cluster until a worker takes them over.

        Its leases last their ``ttl`` whether or not this process (which queued
        the runs, and is named as who did) lives on: the runs wait in the
        scheduler's queue, not here — a detached ``run`` exits at once.
        """
        return cls(QUEUE_PREFIX + uuid.uuid4().hex, os.getpid(), this_host(), ttl)

    def lease(self, now: datetime, since: datetime | None = None) -> Lease:
        """The lease this claimant holds from ``now`` (kept ``since`` when renewing)."""
        return Lease(self.id, self.pid, self.host, since or now, now + timedelta(seconds=self.ttl))


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (a zombie does not)."""
    if pid <= 0:
        return False
    if pid == os.getpid():  # this very process: the common case, checked on every read
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    try:  # Linux: a killed process its parent has not reaped yet is a zombie
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def lease_alive(lease: Lease | None, now: datetime) -> bool:
    """Whether ``lease`` still holds at ``now``.

    A lease lapses at its expiry; on this host it also ends as soon as its
    process is gone (a restarted kernel's runs read as interrupted at once) —
    but for a cluster's queue, which outlives the process that queued the run.
    """
    if lease is None or lease.expires_at <= now:
        return False
    if lease.queued:
        return True
    return not (lease.host == _HOST and not pid_alive(lease.pid))


def owner_may_live(lease: Lease, now: datetime) -> bool:
    """Whether ``lease`` lapsed by time alone: its process is not known to be gone."""
    if lease.queued:
        return True
    return lease_alive(replace(lease, expires_at=max(lease.expires_at, now) + timedelta(1)), now)


def owned_error(run_id: str, lease: Lease) -> RunOwnedError:
    """The refusal to take a run ``lease`` holds, naming its owner (or its cluster queue)."""
    return RunOwnedError(run_id, lease.pid, lease.host, lease.since, queued=lease.queued)


def effective_status(run: Run, now: datetime) -> Run:
    """``run`` as every surface should see it: ``interrupted`` when nothing executes it.

    A lapsed lease is dropped from the record too, so nobody is named as the
    owner of a run that has none.
    """
    if lease_alive(run.lease, now):
        return run
    if run.status == "running":
        return replace(run, status="interrupted", lease=None)
    if run.lease is not None:
        return replace(run, lease=None)
    return run


def check_acquire(
    run: Run,
    owner: Claimant,
    statuses: tuple[RunStatus, ...],
    take_from: str | None = None,
) -> datetime | None:
    """Whether ``owner`` may take ``run`` (seen with its effective status); the lease's ``since``.

    Returns the ``since`` to keep (the owner re-taking a run it keeps
    parked), or None for a new lease. ``take_from`` names a claimant whose
    lease may be taken over as if the run had no owner — a hand-over, such as
    a notebook that queued a run letting the cluster worker that executes it
    take it (the run is then ``running`` under that claimant).

    Raises:
        RunOwnedError: Another live owner holds it.
        ResumeError: Its status is not one of ``statuses``.
    """
    held = run.lease
    handed = held is not None and take_from is not None and held.owner == take_from
    if held is not None and held.owner != owner.id and not handed:
        raise owned_error(run.id, held)
    allowed = (*statuses, "running") if handed else statuses
    if run.status not in allowed:
        raise ResumeError(f"run '{run.id}' is {run.status} and cannot be resumed")
    return held.since if held is not None and not handed else None


def keeps_cancel(stored: Run, take_from: str | None) -> bool:
    """Whether a take of ``stored`` (as stored, lease and all) keeps its cancel request.

    Taking a run clears a cancel request (a resume starts afresh), except on a
    hand-over from ``take_from``: a cancel asked while a run waits in a cluster's
    queue reaches the worker that takes it.
    """
    held = stored.lease
    return stored.cancel_requested and held is not None and held.owner == take_from


def check_import(current: Run | None, now: datetime) -> None:
    """Refuse to replace a run that a live owner executes (or keeps parked) in the target.

    Raises:
        RunOwnedError: Its lease is alive.
    """
    if current is None:
        return
    held = effective_status(current, now).lease
    if held is not None:
        raise owned_error(current.id, held)


#: What a run that pauses while a cancel of it is pending records instead.
CANCELLED_EVENT: tuple[str, dict[str, Any]] = ("run_cancelled", {})


def cancel_wins(stored: Run, status: RunStatus) -> bool:
    """Whether a stop settles as ``cancelled``: it pauses, and a cancel of the run is pending.

    A cancel asked while the run was on its way to a pause (a resume that
    reaches the same gate again at once, say) reaches its owner at the next
    heartbeat, after the pause is recorded: recording the pause would drop
    it, and the run would go on at the next answer. The cancel wins.
    """
    return stored.cancel_requested and status == "paused_waiting_human"


def settled_already(
    stored: Run, status: RunStatus, error: str | None, checkpoint: dict[str, Any]
) -> bool:
    """Whether a stop is already recorded as asked: a repeat (its reply was lost) writes nothing.

    A pause recorded as ``cancelled`` (:func:`cancel_wins`) counts as recorded.
    """
    recorded = stored.status == status or (
        status == "paused_waiting_human" and stored.status == "cancelled"
    )
    if not recorded or stored.error != error:
        return False
    expected: Any = json.loads(encode_json(checkpoint))
    return bool(stored.checkpoint == expected)
