"""The doorbell: wakes waiters the moment an answer commits or a message is queued.

A waiter *arms* before it checks the store, then waits::

    with doorbell.arm(run_id) as ticket:
        if not await store.pending_interactions(run_id, kind="async"):
            ...  # nothing to wait for
        await ticket.wait(timeout=5.0)   # returns at once if rung since arm()

A ring that lands between the check and the wait is therefore never lost:
arming records the ring count, and ``wait`` returns immediately when it has
moved. Ringing is thread-safe and wakes waiters on whatever event loop they
wait on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from types import TracebackType

#: Ring this key to wake every waiter, whatever run it armed on.
ANY = "*"


def node_key(run_id: str, node_id: str) -> str:
    """The key of one node of a run: ringing it wakes the node's waiters and the run's."""
    return f"{run_id}/{node_id}"


class Ticket:
    """One armed waiter. Use as a context manager so it is always disarmed."""

    def __init__(self, bell: Doorbell, key: str, seen: int) -> None:
        self._bell = bell
        self.key = key
        self._seen = seen
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    @property
    def rung(self) -> bool:
        """Whether the bell rang for this key since arming (or the last wait)."""
        return self._bell.count(self.key) != self._seen

    def consume(self) -> bool:
        """Whether it rang since arming (or the last wait or consume); forget those rings."""
        count = self._bell.count(self.key)
        rung, self._seen = count != self._seen, count
        return rung

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until a ring; True if rung, False on timeout.

        Each call consumes the rings seen so far, so a loop of
        check-then-wait with one ticket also never misses one.
        """
        if not self.rung:
            self._loop = asyncio.get_running_loop()
            self._event = asyncio.Event()
            if not self.rung:  # a ring between the check above and the event
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._event.wait(), timeout)
            self._event = None
        rung = self.rung
        self._seen = self._bell.count(self.key)
        return rung

    def _wake(self) -> bool:
        """Set the waiter's event; True if that meant waking another thread's loop."""
        loop, event = self._loop, self._event
        if loop is None or event is None or loop.is_closed():
            return False
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
            return False
        loop.call_soon_threadsafe(event.set)
        return True

    def close(self) -> None:
        """Disarm."""
        self._bell._disarm(self)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Doorbell:
    """An in-process notifier keyed by run id.

    Listeners (see :meth:`subscribe`) hear every ring: that is how the store
    holder pushes rings to the processes it serves. ``on_arm`` is called at
    each arming (a remote store starts listening to its holder's rings there).
    """

    def __init__(self, on_arm: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._tickets: dict[str, set[Ticket]] = {}
        self._listeners: list[Callable[[str], None]] = []
        self.on_arm = on_arm

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(key)`` on every ring, from the ringing thread; returns the unsubscriber.

        A listener must be quick and must not raise.
        """
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def count(self, key: str) -> int:
        """How many times ``key`` has rung (rings of a run also count for ANY)."""
        with self._lock:
            return self._counts.get(key, 0)

    def arm(self, key: str = ANY) -> Ticket:
        """Arm a waiter on a run id (or on :data:`ANY`) before checking the store."""
        if self.on_arm is not None:
            self.on_arm()
        with self._lock:
            ticket = Ticket(self, key, self._counts.get(key, 0))
            self._tickets.setdefault(key, set()).add(ticket)
        return ticket

    def ring(self, key: str) -> None:
        """Wake the waiters of ``key`` and those armed on ANY (ANY wakes every waiter).

        A key ``RUN/NODE`` (see :func:`node_key`) also wakes the waiters of
        ``RUN``: a waiter arms on what concerns it (a gate on the node whose
        questions it waits for), and a ring of one node wakes nobody else's
        node waiters. Any thread may ring.
        """
        with self._lock:
            keys = {key, ANY}
            run, sep, _ = key.partition("/")
            if sep:
                keys.add(run)
            if key == ANY:  # something may have changed anywhere: everyone re-checks
                keys |= set(self._counts) | set(self._tickets)
            woken: list[Ticket] = []
            for k in keys:
                self._counts[k] = self._counts.get(k, 0) + 1
                woken.extend(self._tickets.get(k, ()))
            listeners = list(self._listeners)
        for listener in listeners:
            listener(key)
        crossed = [ticket._wake() for ticket in woken]
        if any(crossed):
            # Hand the GIL over now so the woken loop runs at once, instead of
            # after this thread's switch interval (5 ms by default).
            time.sleep(0)

    def _disarm(self, ticket: Ticket) -> None:
        with self._lock:
            tickets = self._tickets.get(ticket.key)
            if tickets is not None:
                tickets.discard(ticket)
                if not tickets:
                    del self._tickets[ticket.key]
