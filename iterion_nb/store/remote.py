"""A Store in another process: calls go to the holder's ``/api/store`` routes.

Chosen automatically (:func:`open_store`) when a live process holds the
DuckDB file. Events and progress checkpoints are batched here and sent
together (at most ``batch_interval`` later, and always before any other
call), so a run executed through a remote store costs one request per batch,
not per event. The holder pushes its doorbell's rings to this process
(``/api/store/rings``), so waiters here wake the moment an answer commits
anywhere. If the holder dies, the next call finds it gone, opens the file
itself (becoming the holder of this process) and repeats the call there.
A repeated answer is safe: the same answer twice counts once, a different
one is a conflict.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from iterion_nb.errors import (
    AlreadyAnsweredError,
    ConflictError,
    InvalidAnswerError,
    LeaseLostError,
    NotFoundError,
    QuestionClosedError,
    ResumeError,
    RunOwnedError,
    StoreError,
    StoreLockedError,
)
from iterion_nb.runtime.doorbell import ANY, Doorbell, node_key
from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.ports import UNSET, Store
from iterion_nb.runtime.records import (
    RESUMABLE,
    AnswerResult,
    Interaction,
    InteractionKind,
    Run,
    check_answer,
    encode_json,
)
from iterion_nb.store.codec import decode, encode
from iterion_nb.store.duckdb_store import open_duckdb_store
from iterion_nb.store.holder_file import (
    HolderChannel,
    HolderInfo,
    UntrustedHolderError,
    alive,
    discard_stale_holder_file,
    find_holder,
    probe_holder,
)
from iterion_nb.store.location import open_url_store, resolve_store_path, store_url
from iterion_nb.store.rings import RingListener

#: How long one request may take before the holder is presumed stuck.
TIMEOUT = 60.0
#: How long a client keeps trying to reach a holder, its successor, or the
#: file itself after a request found nobody answering.
RECOVER_SECONDS = 30.0
#: How long events and progress checkpoints wait here before they are sent.
BATCH_INTERVAL = 0.05


class HolderUnreachable(Exception):  # noqa: N818 - a condition, handled by recovering
    """A request got no reply: the holder is stopping, dead, or (rarely) stuck."""


def _raise(status: int, body: dict[str, Any]) -> None:
    code, message = body.get("code", ""), body.get("message", "")
    if code == "not_found" and "kind" in body:
        raise NotFoundError(str(body["kind"]), str(body.get("key", "")))
    if code == "already_answered":
        raise AlreadyAnsweredError(str(body.get("interaction_id", "")), body.get("existing"))
    if code in ("expired", "retracted") and status == 410:
        reason = body.get("reason")
        raise QuestionClosedError(
            str(body.get("interaction_id", "")), code, str(reason) if reason else None
        )
    if code == "run_owned" and isinstance(body.get("owner"), dict):
        owner = body["owner"]
        try:
            since = datetime.fromisoformat(str(owner.get("since")))
            pid = int(owner["pid"])
        except (KeyError, TypeError, ValueError):
            raise ResumeError(str(message)) from None
        raise RunOwnedError(str(body.get("run_id", "")), pid, str(owner.get("host")), since,
                            queued=owner.get("queued") is True)  # fmt: skip
    if code == "lease_lost":
        raise LeaseLostError(body.get("run_id", ""))
    if code == "not_resumable":
        raise ResumeError(message)
    if code == "conflict":
        raise ConflictError(message)
    if code == "invalid_answer":
        raise InvalidAnswerError(message)
    raise StoreError(f"the store holder refused the call ({status}): {message}")


class _Batch:
    """Events and progress checkpoints waiting to be sent, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[list[Any]] = []
        self.checkpoints: dict[str, list[Any]] = {}
        self.sending: concurrent.futures.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.error: BaseException | None = None

    def take(self) -> tuple[list[list[Any]], list[list[Any]]]:
        events, self.events = self.events, []
        checkpoints, self.checkpoints = list(self.checkpoints.values()), {}
        return events, checkpoints


class RemoteStore:
    """A :class:`~iterion_nb.runtime.ports.Store` served by another process."""

    def __init__(
        self,
        path: Path,
        holder: HolderInfo,
        *,
        doorbell: Doorbell | None = None,
        on_take_over: Callable[[Store], None] | None = None,
        batch_interval: float = BATCH_INTERVAL,
        take_over: bool = True,
    ) -> None:
        self.path = path
        #: Whether this process may open the file itself when its holder is gone
        #: (a cluster worker may not: it only ever uses a holder's store).
        self.take_over = take_over
        self.holder = holder
        self.doorbell = doorbell or Doorbell()
        self.doorbell.on_arm = self._listen
        self.on_take_over = on_take_over
        self.batch_interval = batch_interval
        self._local: Store | None = None
        self._lock = threading.Lock()
        self._batch = _Batch()
        #: The claimant each run this process took is held under (see _send_batch).
        self._held: dict[str, str] = {}
        self._rings: RingListener | None = None
        self._pending_reads: dict[str, tuple[tuple[int, Any], asyncio.Future[Any]]] = {}
        self._channel: HolderChannel | None = None
        self.closed = False

    @property
    def took_over(self) -> bool:
        """Whether this process opened the file itself after the holder died."""
        return self._local is not None

    # -- pushed rings --------------------------------------------------------
    def _listen(self) -> None:
        """Start hearing the holder's rings (on first arming of the doorbell)."""
        if self._rings is None and not self.closed and self._local is None:
            with self._lock:
                if self._rings is None:
                    self._rings = RingListener(
                        self._connection, self.doorbell, lambda: self._local is None
                    )
                    self._rings.start()

    # -- requests ------------------------------------------------------------
    def _holder_channel(self) -> HolderChannel:
        """Verified connections to the current holder (new ones when it changed)."""
        holder = self.holder
        with self._lock:
            channel = self._channel
            if channel is None or channel.holder != holder:
                if channel is not None:
                    channel.close()
                channel = self._channel = HolderChannel(holder, self.path, TIMEOUT)
        return channel

    def _connection(self) -> tuple[HolderInfo, http.client.HTTPConnection]:
        """A new verified connection to the current holder (for the rings stream)."""
        channel = self._holder_channel()
        return channel.holder, channel.connect()

    def _request(self, method: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        body = json.dumps({"args": encode(args), "kwargs": encode(kwargs)}).encode()
        try:
            status, raw = self._holder_channel().request("POST", f"/api/store/{method}", body)
        except UntrustedHolderError as err:  # not the holder any more (or never was)
            raise HolderUnreachable(str(err)) from None
        except (OSError, http.client.HTTPException) as err:
            raise HolderUnreachable(str(err) or type(err).__name__) from None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise HolderUnreachable(f"a garbled reply (HTTP {status})") from None
        if status >= 400:
            _raise(status, data if isinstance(data, dict) else {})
        try:
            return decode(data["result"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise HolderUnreachable(f"a garbled reply (HTTP {status})") from None

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        await self._send_batch()
        result, _ = await self._invoke(method, list(args), kwargs)
        return result

    async def _invoke(
        self, method: str, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[Any, bool]:
        """Call ``method`` wherever the file is now; also say whether it had to be repeated."""
        if self.closed:
            raise StoreError(f"the run store {self.path} is closed")
        give_up: float | None = None
        while self._local is None:
            holder = self.holder
            try:
                result = await asyncio.to_thread(self._request, method, args, kwargs)
                return result, give_up is not None
            except ConflictError as err:
                err.repeated = give_up is not None  # type: ignore[attr-defined]
                raise
            except HolderUnreachable as err:
                if method == "drain_messages":
                    kwargs = {**kwargs, "repeated": True}
                # Nobody answered: the holder is stopping, was killed, or is stuck.
                # Find where the file is now (a successor, or here) and repeat the
                # call there. Repeating is safe for what matters: the same answer
                # twice counts once (see answer()).
                now = time.monotonic()
                give_up = give_up or now + RECOVER_SECONDS
                if now > give_up:
                    raise StoreError(
                        f"the store holder (pid {holder.pid}) of {self.path} did not answer"
                        f" for {RECOVER_SECONDS:.0f} s: {err}"
                    ) from None
                await self._recover(holder)
        try:
            if method == "write_batch":
                await _write_batch(self._local, *args)
                return None, give_up is not None
            return await getattr(self._local, method)(*args, **kwargs), give_up is not None
        except ConflictError as err:
            err.repeated = give_up is not None  # type: ignore[attr-defined]
            raise

    async def _recover(self, failed: HolderInfo) -> None:
        """After ``failed`` did not answer: use its successor, or open the file here.

        Returns with ``self.holder`` changed, the file opened here, or (if
        the same holder still has the file and still publishes itself) after a
        short pause so the caller retries it.
        """
        with self._lock:
            if self._local is not None or self.holder != failed:
                return  # another call of ours already recovered
        successor = await asyncio.to_thread(find_holder, self.path)
        if successor is not None and successor != failed:
            with self._lock:
                self.holder = successor  # another process took over: use it
            return
        if not self.take_over:
            await asyncio.sleep(0.2)  # wait for a successor to publish itself
            return
        try:
            local = open_duckdb_store(self.path, doorbell=self.doorbell)
        except StoreLockedError:
            # the old holder is still exiting, or a new one has the file but
            # has not published itself yet: look again shortly
            await asyncio.sleep(0.05 if alive(failed.pid) else 0.1)
            return
        with self._lock:
            raced = self._local is not None
            if not raced:
                self._local = local
        if raced:  # another call of ours opened it first: drop our extra handle
            await local.close()
            return
        discard_stale_holder_file(self.path)  # we hold the file: any other holder file is stale
        self.doorbell.ring(ANY)  # waiters re-check against the file itself
        if self.on_take_over is not None:
            self.on_take_over(local)

    # -- batched writes ------------------------------------------------------
    def _queue(self, add: Callable[[_Batch], None]) -> None:
        """Add to the batch; start the timer that sends it if it was empty."""
        batch = self._batch
        with batch.lock:
            add(batch)
            if batch.timer is not None or batch.sending is not None:
                return
            loop = asyncio.get_running_loop()
            batch.timer = loop.call_later(self.batch_interval, self._send_later, loop)

    def _send_later(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._batch.lock:
            self._batch.timer = None
        loop.create_task(self._send_quietly())

    async def _send_quietly(self) -> None:
        try:
            await self._send_batch()
        except Exception as err:  # kept, raised by the next call
            self._batch.error = err

    async def _send_batch(self) -> None:
        """Send what waits, after any batch already on its way (order is kept)."""
        batch = self._batch
        while True:
            with batch.lock:
                if batch.error is not None:  # a background send failed: say so now
                    err, batch.error = batch.error, None
                    raise err
                if batch.sending is None:
                    events, checkpoints = batch.take()
                    if not events and not checkpoints:
                        return
                    sending: concurrent.futures.Future[None] = concurrent.futures.Future()
                    batch.sending = sending
                    break
                waiting = batch.sending
            # shielded: a waiter cancelled (a cell interrupted) must not cancel the batch's
            # future under its sender and the other waiters
            await asyncio.shield(asyncio.wrap_future(waiting))
        # the runs this process holds, with their claimant: the holder drops the events
        # of one taken over meanwhile (written late, after a new owner's)
        held = [[r, self._held[r]] for r in sorted({e[0] for e in events}) if r in self._held]
        try:
            await self._invoke("write_batch", [events, checkpoints, held], {})
        finally:
            with batch.lock:
                batch.sending = None
            if not sending.done():
                sending.set_result(None)

    # -- the Store protocol ------------------------------------------------------
    async def _add(self, method: str, record: Any, fetch: str, **kwargs: Any) -> Any:
        """Insert ``record``; a repeat of our own insert that had landed is not a conflict."""
        await self._send_batch()
        try:
            stored, _ = await self._invoke(method, [record], kwargs)
        except ConflictError as err:
            # A call repeated after its holder vanished may find its own record:
            # the first attempt landed. Anything else is a real conflict.
            if not getattr(err, "repeated", False):
                raise
            existing = await self._call(fetch, record.id)
            if _comparable(existing) != _comparable(record):
                raise
            stored = existing
        return stored

    async def create_run(self, run: Any, *, owner: Claimant | None = None) -> Any:
        created = await self._add("create_run", run, "get_run", owner=owner)
        if owner is not None:
            self._held[run.id] = owner.id
        return created

    async def get_run(self, run_id: str) -> Any:
        return await self._call("get_run", run_id)

    async def update_run(self, run_id: str, **changes: Any) -> Any:
        given = {k: v for k, v in changes.items() if v is not UNSET}
        return await self._call("update_run", run_id, **given)

    async def list_runs(self, **kwargs: Any) -> Any:
        return await self._call("list_runs", **kwargs)

    async def acquire_run(
        self,
        run_id: str,
        owner: Claimant,
        *,
        statuses: tuple[str, ...] = RESUMABLE,
        take_from: str | None = None,
    ) -> Any:
        taken = await self._call(
            "acquire_run", run_id, owner, statuses=list(statuses), take_from=take_from
        )
        self._held[run_id] = owner.id
        return taken

    async def renew_leases(self, owner: Claimant, run_ids: list[str]) -> Any:
        return await self._call("renew_leases", owner, run_ids)

    async def settle_run(self, run_id: str, owner: str, **kwargs: Any) -> Any:
        settled = await self._call("settle_run", run_id, owner, **kwargs)
        if not kwargs.get("keep_lease") or settled.status == "cancelled":  # (cancel_wins)
            self._held.pop(run_id, None)
        return settled

    async def release_runs(self, owner: str, run_ids: list[str]) -> None:
        await self._call("release_runs", owner, run_ids)
        for run_id in run_ids:
            if self._held.get(run_id) == owner:
                del self._held[run_id]

    async def cancel_run(self, run_id: str) -> Any:
        run = await self._call("cancel_run", run_id)
        self.doorbell.ring(run_id)
        return run

    async def save_checkpoint(
        self,
        run_id: str,
        checkpoint: dict[str, Any],
        *,
        owner: str | None = None,
        durable: bool = False,
    ) -> None:
        entry = [run_id, checkpoint, owner, durable]

        def add(batch: _Batch) -> None:
            batch.checkpoints[run_id] = entry

        self._queue(add)
        if durable:
            await self._send_batch()

    async def append_event(
        self,
        run_id: str,
        event_type: str,
        data: Any = None,
        *,
        node_id: str | None = None,
        branch_id: str | None = None,
    ) -> None:
        # as JSON text now: the caller may change ``data`` once this returns
        entry = [run_id, event_type, encode_json(data or {}), node_id, branch_id]
        self._queue(lambda batch: batch.events.append(entry))

    async def events(self, run_id: str, **kwargs: Any) -> Any:
        return await self._call("events", run_id, **kwargs)

    async def put_artifact(self, run_id: str, node_id: str, name: str, value: Any) -> Any:
        return await self._call("put_artifact", run_id, node_id, name, value)

    async def get_artifact(self, run_id: str, name: str, version: int | None = None) -> Any:
        return await self._call("get_artifact", run_id, name, version)

    async def list_artifacts(self, run_id: str) -> Any:
        return await self._call("list_artifacts", run_id)

    async def add_interaction(self, interaction: Interaction, *, owner: str | None = None) -> Any:
        stored = await self._add("add_interaction", interaction, "get_interaction", owner=owner)
        self.doorbell.ring(node_key(interaction.run_id, interaction.node_id))
        return stored

    async def get_interaction(self, interaction_id: str) -> Any:
        return await self._call("get_interaction", interaction_id)

    async def pending_interactions(
        self,
        run_id: str | None = None,
        *,
        node_id: str | None = None,
        kind: InteractionKind | None = None,
    ) -> Any:
        # Many waiters re-check one run when a ring wakes them (every parked gate of a
        # fan-out): those that ask while a request for it is on its way, with no ring
        # since it left, share it.
        key = run_id if run_id is not None else ANY
        seen = (self.doorbell.count(key), asyncio.get_running_loop())
        with self._lock:
            shared = self._pending_reads.get(key)
            if shared is None or shared[0] != seen or shared[1].done():
                read = asyncio.ensure_future(self._call("pending_interactions", run_id))
                shared = self._pending_reads[key] = (seen, read)
        found: list[Interaction] = await asyncio.shield(shared[1])
        return [
            i for i in found
            if (node_id is None or i.node_id == node_id) and (kind is None or i.kind == kind)
        ]  # fmt: skip

    async def interactions(self, run_id: str) -> Any:
        return await self._call("interactions", run_id)

    async def answer(
        self, interaction_id: str, answer: Any, *, answered_by: str = "unknown"
    ) -> Any:
        check_answer(answer)  # refuse what cannot travel, before sending anything
        try:
            result: AnswerResult = await self._call(
                "answer", interaction_id, answer, answered_by=answered_by
            )
        except AlreadyAnsweredError as err:
            if err.existing != json.loads(json.dumps(answer)):
                raise
            recorded = await self.get_interaction(interaction_id)
            if recorded.answered_by != answered_by:
                raise
            # our own answer, committed by a holder that died before replying and
            # retried here: the same answer twice is one delivery
            result = AnswerResult(recorded, None)
        self.doorbell.ring(node_key(result.interaction.run_id, result.interaction.node_id))
        return result

    async def expire_due(self, run_id: str | None = None) -> Any:
        ended: list[Interaction] = await self._call("expire_due", run_id)
        for question in ended:
            self.doorbell.ring(node_key(question.run_id, question.node_id))
        return ended

    async def retract(self, interaction_id: str, reason: str) -> Any:
        question: Interaction = await self._call("retract", interaction_id, reason)
        self.doorbell.ring(node_key(question.run_id, question.node_id))
        return question

    async def amend(self, interaction_id: str, **changes: Any) -> Any:
        question: Interaction = await self._call("amend", interaction_id, **changes)
        self.doorbell.ring(node_key(question.run_id, question.node_id))
        return question

    async def queue_message(self, run_id: str, node_id: str, text: str) -> Any:
        message = await self._call("queue_message", run_id, node_id, text)
        self.doorbell.ring(node_key(run_id, node_id))
        return message

    async def drain_messages(
        self, run_id: str, node_id: str, *, token: str | None = None, repeated: bool = False
    ) -> Any:
        # a drain repeated after its holder died finds, by its token, what it took
        await self._send_batch()
        kwargs: dict[str, Any] = {"token": token or uuid.uuid4().hex, "repeated": repeated}
        result, _ = await self._invoke("drain_messages", [run_id, node_id], kwargs)
        return result

    async def export_run(self, run_id: str) -> Any:
        return await self._call("export_run", run_id)

    async def import_run(self, bundle: Any, *, force: bool = False) -> Any:
        result = await self._call("import_run", bundle, force=force)
        self.doorbell.ring(bundle.run.id)
        return result

    async def flush(self) -> None:
        await self._call("flush")

    async def close(self) -> None:
        if self.closed:
            return
        try:
            await self._send_batch()
        finally:
            self.closed = True
            with self._batch.lock:
                if self._batch.timer is not None:
                    self._batch.timer.cancel()
                    self._batch.timer = None
            if self._rings is not None:
                self._rings.stop()
            if self._channel is not None:
                self._channel.close()
            if self._local is not None:
                await self._local.close()


def _comparable(record: Any) -> Any:
    """A record without what the store sets itself (a run's lease), to spot our own insert."""
    if isinstance(record, Run):
        return replace(record, lease=None, status="running")
    return record


async def _write_batch(
    store: Store,
    events: list[list[Any]],
    checkpoints: list[list[Any]],
    held: list[list[Any]] | None = None,
) -> None:
    """Apply one batch sent by a remote store: its events in order, then its checkpoints.

    ``held`` names, for runs the sender executes, the claimant it holds them
    under: the events of a run another owner has taken (or settled) since are
    void, as a lost owner's checkpoints are. A record that cannot be applied
    (an unknown run, a lost lease) does not stop the others; the first such
    error is raised at the end.
    """
    first: StoreError | None = None
    void = await _taken_over(store, held or [])
    for run_id, event_type, data, node_id, branch_id in events:
        if run_id in void:
            continue
        try:
            await store.append_event(
                run_id, event_type, json.loads(data), node_id=node_id, branch_id=branch_id
            )
        except StoreError as err:
            first = first or err
    for run_id, checkpoint, owner, durable in checkpoints:
        try:
            await store.save_checkpoint(run_id, checkpoint, owner=owner, durable=durable)
        except StoreError as err:
            first = first or err
    try:  # written now: a row the database refuses is this batch's error, not the next reader's
        await store.flush()
    except StoreError as err:
        first = first or err
    if first is not None:
        raise first


async def _taken_over(store: Store, held: list[list[Any]]) -> set[str]:
    """Which of the ``[run id, claimant]`` pairs no longer hold: another owner came since.

    A DuckDB store says whom each run is stored under, lapsed or not: a run
    another owner took (even one that died since), or that was settled or
    released, is not the sender's any more; a lease of the sender's own that
    lapsed, nobody taking the run since, still is. Through another Store a run
    whose lease lapsed reads ``interrupted`` whoever held it, and its events
    are written.
    """
    stored = getattr(store, "stored_owners", None)
    if stored is not None:
        owners: dict[str, str | None] = await stored([run_id for run_id, _ in held])
        # a run missing here is unknown: the event's own write says so
        return {run_id for run_id, owner in held if run_id in owners and owners[run_id] != owner}
    void = set()
    for run_id, owner in held:
        try:
            run = await store.get_run(run_id)
        except StoreError:
            continue  # the event's own write says what is wrong
        ours = run.lease is not None and run.lease.owner == owner
        if not ours and run.status != "interrupted":  # lapsed and not taken yet: still ours
            void.add(run_id)
    return void


def open_store(
    path: str | os.PathLike[str] | None = None,
    *,
    on_take_over: Callable[[Store], None] | None = None,
    on_open: Callable[[Store], None] | None = None,
) -> Store:
    """The store at ``path``: through its live holder if another process has one, else the file.

    ``on_take_over`` is called with the local store when a remote one had to
    open the file itself later, ``on_open`` when the file is opened here at
    once (both to start serving it, typically). A URL (``path``, else
    ``ITERION_NB_STORE``) opens the store it names: ``postgresql://…`` the
    PostgreSQL store, which needs no holder (neither callback is called).

    Raises:
        StoreError: A URL whose scheme names no store this build can open.
    """
    url = store_url(path)
    if url is not None:
        return open_url_store(url)
    target = resolve_store_path(path)
    deadline = time.monotonic() + 15
    while True:
        # a holder is used only once it proved, on loopback, that it holds this file
        holder, why = probe_holder(target)
        if holder is not None:
            return RemoteStore(target, holder, on_take_over=on_take_over)
        try:
            local = open_duckdb_store(target)
        except StoreLockedError as err:
            # a process that just opened the file publishes its holder file next
            if time.monotonic() > deadline:
                if why is not None:
                    err.args = (f"{err}; no usable holder: {why}",)
                raise
            time.sleep(0.05)
            continue
        discard_stale_holder_file(target)  # we hold the file: any other holder file is stale
        if on_open is not None:
            on_open(local)
        return local


__all__ = ["RemoteStore", "open_store", "write_batch"]

#: Applying a batch sent by a remote store (the holder's RPC route uses it too).
write_batch = _write_batch
