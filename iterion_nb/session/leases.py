"""A session's leases: the heartbeat that renews them, and what it learns when it does.

Each renewal also reports the runs this session lost (another process took
them after the lease lapsed — their engines stop at once, writing nothing)
and the runs someone asked to cancel from elsewhere (their engines stop as
``cancelled``). Before a costly node the engine asks :meth:`LeaseKeeper.guard`:
if the last renewal is older than half the lease, it renews first, so a
process whose loop was blocked for long never starts a node on a run it no
longer owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable

from iterion_nb.errors import LeaseLostError
from iterion_nb.runtime.doorbell import ANY
from iterion_nb.runtime.ownership import HEARTBEAT_SHARE, Claimant
from iterion_nb.runtime.ports import Store

log = logging.getLogger("iterion_nb.session")


class LeaseKeeper:
    """Renews ``claimant``'s leases on the runs it holds, every ``ttl * HEARTBEAT_SHARE``."""

    def __init__(
        self,
        store: Store,
        claimant: Claimant,
        *,
        on_lost: Callable[[str], None],
        on_cancel: Callable[[str], None],
    ) -> None:
        self.store = store
        self.claimant = claimant
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self.runs: set[str] = set()
        self.lost: set[str] = set()
        #: How many times each run was taken here: a renewal's report on a run taken again
        #: while it was on its way (a cancel, then a resume) is about the earlier take.
        self._takes: dict[str, int] = {}
        self._count = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._renewed = time.monotonic()
        #: Set (from any thread) when a held run's doorbell rings: renew now, not at the
        #: next beat — a cancel asked from elsewhere rings it, and stops a short run too.
        self._poke: asyncio.Event | None = None
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def interval(self) -> float:
        """Seconds between renewals."""
        return self.claimant.ttl * HEARTBEAT_SHARE

    def hold(self, run_id: str) -> None:
        """Keep ``run_id``'s lease renewed (call once the store granted it)."""
        self.runs.add(run_id)
        self.lost.discard(run_id)
        self._takes[run_id] = next(self._count)
        if self._task is None or self._task.done():
            self._renewed = time.monotonic()
            loop = asyncio.get_running_loop()
            self._poke = asyncio.Event()
            self._listen(loop, self._poke)
            self._task = loop.create_task(self._beat())

    def _listen(self, loop: asyncio.AbstractEventLoop, poke: asyncio.Event) -> None:
        if self._unsubscribe is not None:  # a beat that ended: its poke is stale
            self._unsubscribe()
            self._unsubscribe = None
        bell = getattr(self.store, "doorbell", None)
        if bell is None:
            return

        def rung(key: str) -> None:  # on the ringing thread: quick, never raises
            if key == ANY or key in self.runs:  # a run's own ring (a cancel), not a node's
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(poke.set)

        self._unsubscribe = bell.subscribe(rung)

    def drop(self, run_id: str) -> None:
        """Stop renewing ``run_id`` (it settled and released its lease)."""
        self.runs.discard(run_id)
        self._takes.pop(run_id, None)

    async def renew(self) -> None:
        """Renew every held lease now; act on what the store reports."""
        held = sorted(self.runs)
        if not held:
            self._renewed = time.monotonic()
            return
        started = time.monotonic()
        takes = {run_id: self._takes.get(run_id, 0) for run_id in held}
        report = await self.store.renew_leases(self.claimant, held)
        self._renewed = started
        for run_id in report.lost:
            if run_id in self.runs and self._takes.get(run_id, 0) == takes[run_id]:
                self.runs.discard(run_id)
                self.lost.add(run_id)
                self._on_lost(run_id)
        for run_id in report.cancel:
            if self._takes.get(run_id, 0) == takes.get(run_id):
                self._on_cancel(run_id)

    async def guard(self, run_id: str) -> None:
        """Raise LeaseLostError unless this session still owns ``run_id``."""
        if time.monotonic() - self._renewed > self.claimant.ttl / 2:
            await self.renew()
        if run_id in self.lost or run_id not in self.runs:
            raise LeaseLostError(run_id)

    async def _beat(self) -> None:
        poke = self._poke
        assert poke is not None
        while self.runs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(poke.wait(), self.interval)
            poke.clear()
            try:
                await self.renew()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the store is away: try again next beat
                log.warning("iterion_nb: renewing run leases failed: %s", err)

    async def stop(self) -> None:
        """Stop the heartbeat (the leases lapse, or were released)."""
        task, self._task = self._task, None
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
