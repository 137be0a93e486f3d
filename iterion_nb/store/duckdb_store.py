"""The DuckDB Store: one file, one connection, one worker thread.

Durability contract:

- decision records — a run's creation and every status, error or checkpoint
  change, an interaction, an answer with its queued message, a message, a
  drain, an artifact — are each committed in their own transaction before
  the call returns;
- events are batched: written in one statement when 2,000 are waiting or
  the oldest has waited 50 ms (both configurable), and always before a read
  of events or runs and before any decision record. A crash loses at most
  the events of that last window; resume re-runs from the last checkpoint.

DuckDB lets one process hold a file. A second process gets
:class:`~iterion_nb.errors.StoreLockedError` naming the holder's pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from iterion_nb.errors import (
    ConflictError,
    LeaseLostError,
    NotFoundError,
    QuestionClosedError,
    StoreError,
    StoreFileError,
    StoreLockedError,
)
from iterion_nb.runtime import lifecycle
from iterion_nb.runtime.doorbell import Doorbell, node_key
from iterion_nb.runtime.records import (
    AnswerResult,
    Artifact,
    Event,
    Interaction,
    InteractionKind,
    QueuedMessage,
    answer_message,
    answered_event,
    check_answer,
    encode_json,
    utcnow,
)
from iterion_nb.store.duckdb_base import SEP
from iterion_nb.store.duckdb_mirror import Mirror
from iterion_nb.store.duckdb_questions import Questions
from iterion_nb.store.duckdb_rows import (
    INTERACTION_COLUMNS,
    INTERACTION_VALUES,
    MESSAGE_COLUMNS,
    interaction_from_row,
    interaction_params,
    message_from_row,
    to_db,
)
from iterion_nb.store.duckdb_schema import APP_MARK, LATEST, MIGRATIONS
from iterion_nb.store.location import (
    DEFAULT_FILE,
    file_in_the_way,
    make_private_dirs,
    names_store_dir,
    resolve_store_path,
    tighten_store_dir,
)

_LOCK_PID = re.compile(r"\(PID (\d+)\)")

_open_lock = threading.Lock()
_open_stores: dict[Path, DuckDBStore] = {}


def _check_header(path: Path) -> None:
    """Refuse, without touching it, a file that is not a DuckDB database."""
    if not path.exists():
        if path.is_symlink():
            raise StoreFileError(f"the store path {path} is a link to nothing; it was left alone")
        return
    if path.is_dir():
        raise StoreFileError(f"the store path {path} is a directory, not a DuckDB file")
    if not stat.S_ISREG(path.stat().st_mode):  # a FIFO or a device would block or lie
        raise StoreFileError(f"the store path {path} is not a regular file; it was left alone")
    try:
        with path.open("rb") as handle:
            header = handle.read(16)
    except OSError as err:  # another user's file, say: a line, not a traceback
        raise StoreFileError(f"cannot read the run store {path}: {err.strerror}") from None
    if header and header[8:12] != b"DUCK":
        raise StoreFileError(
            f"{path} is not an iterion_nb store (not a DuckDB database); it was left"
            " untouched — move it away or choose another store path"
        )


#: Never fetch extensions: a SQLite file at the path would otherwise make
#: DuckDB try to download its sqlite scanner. (Another connection to the same
#: file in this process must pass the same configuration.)
CONNECT_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


#: Why a file this process may read cannot be opened for writing (DuckDB's words).
_READ_ONLY_CAUSES = {
    "read-only file system": "a read-only file system",
    "permission denied": "no permission to write the file",
    "operation not permitted": "the file may not be written",  # e.g. immutable (chattr +i)
}


def _read_only_cause(text: str) -> str | None:
    lowered = text.lower()
    return next((why for words, why in _READ_ONLY_CAUSES.items() if words in lowered), None)


def _may_write_in(folder: Path) -> bool:
    """Whether this process may create files in ``folder``.

    Checked as the process is (effective ids and capabilities): a root that
    may not override file modes is refused as any user would be.
    """
    effective = os.access in os.supports_effective_ids
    return os.access(folder, os.W_OK | os.X_OK, effective_ids=effective)


def _connect(path: Path) -> tuple[duckdb.DuckDBPyConnection, str | None]:
    """A connection to ``path``, and why it is read-only (None: it is not).

    A store this process may read but not write (a read-only mount, another
    user's file) is opened read-only: its runs can be listed, shown and
    reported; whatever would write says why it cannot.
    """
    read_only = None
    try:
        con = duckdb.connect(str(path), config=CONNECT_CONFIG)
    except duckdb.IOException as err:
        text = str(err)
        if "lock" in text.lower():
            match = _LOCK_PID.search(text)
            raise StoreLockedError(str(path), int(match.group(1)) if match else None) from None
        read_only = _read_only_cause(text)
        if read_only is None or not path.exists():
            raise StoreFileError(f"cannot open the run store {path}: {text}") from None
        try:
            con = duckdb.connect(str(path), read_only=True, config=CONNECT_CONFIG)
        except duckdb.Error:  # not even readable: the first refusal says why
            raise StoreFileError(f"cannot open the run store {path}: {text}") from None
    except duckdb.Error as err:
        raise StoreFileError(f"cannot open the run store {path}: {err}") from None
    if read_only is None and not _may_write_in(path.parent):
        # the file may be written, its directory not: the first commit would fail on the
        # write-ahead log DuckDB keeps beside it (and no holder file could be published)
        con.close()
        read_only = f"its directory {path.parent} may not be written"
        try:
            con = duckdb.connect(str(path), read_only=True, config=CONNECT_CONFIG)
        except duckdb.Error as err:
            raise StoreFileError(f"cannot open the run store {path}: {err}") from None
    # DuckDB draws a progress bar on stdout for queries over 2 s: into a notebook
    # cell's output, or into `--json` output. Never (a setting of this connection).
    con.execute("SET enable_progress_bar = false")
    return con, read_only


def _migrate(con: duckdb.DuckDBPyConnection, path: Path, read_only: str | None) -> None:
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if tables and "iterion_meta" not in tables:
        raise StoreFileError(
            f"{path} is a DuckDB database of another application; it was left untouched"
        )
    if read_only is not None:  # nothing can be written: it must be of this schema already
        done = (
            {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
            if "schema_migrations" in tables
            else set()
        )
        if done != {version for version, _ in MIGRATIONS}:
            raise StoreFileError(
                f"the run store {path} can only be read here ({read_only}), and it was written"
                f" by {'an older' if max(done, default=0) < LATEST else 'a newer'} iterion_nb:"
                " open it once where it can be written (to update it), or with the version"
                " that wrote it"
            )
        return
    if "schema_migrations" not in tables:
        con.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)"
        )
    done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
    if done and max(done) > LATEST:
        raise StoreFileError(
            f"{path} was written by a newer iterion_nb (schema {max(done)}, this one knows"
            f" {LATEST}); upgrade iterion_nb to open it"
        )
    applied = False
    for version, sql in MIGRATIONS:
        if version in done:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(sql)
            if version == 1:
                con.execute("INSERT INTO iterion_meta VALUES ('app', ?)", [APP_MARK])
            con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [version, to_db(utcnow())])
            con.execute("COMMIT")
            applied = True
        except BaseException:
            con.execute("ROLLBACK")
            raise
    if applied:  # the new schema in the file itself, not only in the write-ahead log
        con.execute("CHECKPOINT")


def _create_private(target: Path) -> None:
    """Create a new, empty store file at ``target``: mode 0600, never through a link.

    DuckDB creates files with the umask's mode (0644) and refuses an empty
    file, so the database is made in a private (0700) temporary directory
    beside it, made 0600 there, then hard-linked into place: a link fails if
    anything (a file, a link) appeared at ``target`` meanwhile, and then
    that is what gets opened (and checked) instead.
    """
    if os.path.lexists(target):
        return
    scratch = tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        made = Path(scratch) / target.name
        duckdb.connect(str(made), config=CONNECT_CONFIG).close()
        os.chmod(made, 0o600)
        try:
            os.link(made, target)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not os.path.lexists(target):
                os.rename(made, target)
    except duckdb.Error as err:
        raise StoreFileError(f"cannot create the run store {target}: {err}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _tighten_files(target: Path) -> None:
    """The store file and its write-ahead log, if this user's: 0600 (none is followed)."""
    for path in (target, target.with_name(target.name + ".wal")):
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o077:
                os.chmod(path, 0o600)


def _prepare_file(target: Path, dedicated: bool) -> None:
    """Directory 0700 (if made here, or the store's own), file 0600, created without links."""
    make_private_dirs(target.parent)
    if dedicated:
        tighten_store_dir(target.parent, target.name)
    try:
        _create_private(target)
    except OSError as err:
        raise StoreFileError(f"cannot create the run store {target}: {err.strerror}") from None
    _tighten_files(target)


def _load_pending(con: duckdb.DuckDBPyConnection) -> list[Interaction]:
    rows = con.execute(
        f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE answered_at IS NULL"
        " AND ended IS NULL ORDER BY requested_at, n"
    ).fetchall()
    return [interaction_from_row(row) for row in rows]


def open_duckdb_store(
    path: str | os.PathLike[str] | None = None,
    *,
    doorbell: Doorbell | None = None,
    clock: Callable[[], datetime] = utcnow,
    new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    flush_rows: int = 2000,
    flush_interval: float = 0.05,
) -> DuckDBStore:
    """Open (creating if needed) the store at ``path``; see :func:`resolve_store_path`.

    Opening a path this process already holds returns that same store.

    Raises:
        StoreLockedError: Another live process holds the file.
        StoreFileError: The file is not an iterion_nb store (left untouched).
    """
    target = resolve_store_path(path)
    with _open_lock:
        existing = _open_stores.get(target)
        if existing is not None and not existing.closed:
            existing._users += 1
            return existing
        _check_header(target)
        in_the_way = file_in_the_way(target)
        if in_the_way is not None:
            raise StoreFileError(in_the_way)
        try:
            # the store's own directory: named as one, or the usual .../iterion.duckdb
            _prepare_file(target, names_store_dir(path) or target.name == DEFAULT_FILE)
        except OSError as err:
            raise StoreFileError(f"cannot create the run store {target}: {err.strerror}") from None
        con, read_only = _connect(target)
        try:
            _migrate(con, target, read_only)
            pending = _load_pending(con)
        except duckdb.Error as err:
            con.close()
            raise StoreFileError(
                f"the run store {target} is damaged or unreadable ({err}); it was left untouched"
            ) from None
        except BaseException:
            con.close()
            raise
        store = DuckDBStore(
            target, con, doorbell or Doorbell(), clock, new_id, flush_rows, flush_interval
        )
        store.read_only = read_only
        undelivered = [
            message_from_row(row)
            for row in con.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE delivered_at IS NULL ORDER BY n"
            ).fetchall()
        ]
        store.mirror.load(pending, undelivered)
        _open_stores[target] = store
        return store


class DuckDBStore(Questions):
    """A Store in one DuckDB file. Create with :func:`open_duckdb_store`."""

    def __init__(
        self,
        path: Path,
        con: duckdb.DuckDBPyConnection,
        doorbell: Doorbell,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
        flush_rows: int,
        flush_interval: float,
    ) -> None:
        super().__init__(path, con, doorbell, clock, new_id, flush_rows, flush_interval)
        self._users = 1
        self._closers: list[Callable[[], None]] = []
        # This process holds the file, so it alone adds and answers questions and
        # queues and drains messages: what is asked most often is answered from
        # memory, never waiting behind commits on the worker (see duckdb_mirror).
        self.mirror = Mirror()

    # -- events ----------------------------------------------------------
    async def append_event(
        self,
        run_id: str,
        event_type: str,
        data: dict[str, Any] | None = None,
        *,
        node_id: str | None = None,
        branch_id: str | None = None,
    ) -> None:
        if self.closed:
            raise StoreError(f"the run store {self.path} is closed")
        if run_id not in self._next_seq:
            if SEP in run_id:
                raise StoreError("run, node and branch ids and event types cannot hold U+001F")
            await self._seq_for(run_id)
        with self._seq_lock:
            seq = self._next_seq[run_id]
            line = self._line(run_id, seq, event_type, node_id, branch_id, data)
            self._next_seq[run_id] = seq + 1
            due = self._buffer.add((line,))
        if due:
            self._worker.nudge()

    async def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        def body() -> list[Event]:
            self._flushed(checkpoints=False)
            self._require_run(run_id)
            rows = self._con.execute(
                "SELECT run_id, seq, type, occurred_at, data, node_id, branch_id FROM events"
                " WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                [run_id, after, limit if limit is not None else 2**62],
            ).fetchall()
            return [
                Event(r[0], r[1], r[2], r[3].replace(tzinfo=UTC), json.loads(r[4]), r[5], r[6])
                for r in rows
            ]

        return await self._call(body)

    # -- artifacts -------------------------------------------------------
    async def put_artifact(self, run_id: str, node_id: str, name: str, value: Any) -> Artifact:
        payload = encode_json(value)
        now = self._clock()

        def body() -> Artifact:
            self._require_run(run_id)
            row = self._con.execute(
                "SELECT coalesce(max(version), 0) FROM artifacts WHERE run_id = ? AND name = ?",
                [run_id, name],
            ).fetchone()
            version = (int(row[0]) if row else 0) + 1
            self._con.execute(
                "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?)",
                [run_id, name, version, node_id, payload, to_db(now)],
            )
            return Artifact(run_id, name, version, node_id, json.loads(payload), now)

        return await self._call(lambda: self._transaction(body))

    async def get_artifact(self, run_id: str, name: str, version: int | None = None) -> Artifact:
        def body() -> Artifact:
            self._require_run(run_id)
            query = (
                "SELECT run_id, name, version, node_id, value, created_at FROM artifacts"
                " WHERE run_id = ? AND name = ?"
            )
            params: list[Any] = [run_id, name]
            if version is not None:
                query += " AND version = ?"
                params.append(version)
            row = self._con.execute(query + " ORDER BY version DESC LIMIT 1", params).fetchone()
            if row is None:
                label = name if version is None else f"{name} v{version}"
                raise NotFoundError("artifact", label)
            return Artifact(row[0], row[1], row[2], row[3], json.loads(row[4]),
                            row[5].replace(tzinfo=UTC))  # fmt: skip

        return await self._call(body)

    async def list_artifacts(self, run_id: str) -> list[Artifact]:
        def body() -> list[Artifact]:
            self._require_run(run_id)
            rows = self._con.execute(
                "SELECT run_id, name, version, node_id, value, created_at FROM artifacts"
                " WHERE run_id = ? ORDER BY name, version",
                [run_id],
            ).fetchall()
            return [
                Artifact(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5].replace(tzinfo=UTC))
                for r in rows
            ]

        return await self._call(body)

    # -- interactions ----------------------------------------------------
    async def add_interaction(
        self, interaction: Interaction, *, owner: str | None = None
    ) -> Interaction:
        i = interaction

        def body() -> Interaction:
            self._require_run(i.run_id)
            if owner is not None:
                row = self._con.execute("SELECT owner_id FROM runs WHERE id = ?", [i.run_id])
                if row.fetchone() != (owner,):
                    raise LeaseLostError(i.run_id)
            if self._con.execute("SELECT 1 FROM interactions WHERE id = ?", [i.id]).fetchone():
                raise ConflictError(f"interaction '{i.id}' already exists")
            self._con.execute(
                f"INSERT INTO interactions ({INTERACTION_COLUMNS}) VALUES ({INTERACTION_VALUES})",
                interaction_params(i),
            )
            return self._fetch_interaction(i.id)

        def job() -> Interaction:
            stored = self._transaction(body)
            self.mirror.stored(stored)
            return stored

        stored = await self._call(job)
        self.doorbell.ring(node_key(i.run_id, i.node_id))
        return stored

    async def get_interaction(self, interaction_id: str) -> Interaction:
        known = self.mirror.get(interaction_id)
        if known is not None and not self.closed:
            return known
        return await self._call(lambda: self._fetch_interaction(interaction_id))

    async def pending_interactions(
        self,
        run_id: str | None = None,
        *,
        node_id: str | None = None,
        kind: InteractionKind | None = None,
    ) -> list[Interaction]:
        if self.closed:
            raise StoreError(f"the run store {self.path} is closed")
        return self.mirror.pending(run_id, node_id, kind, now=self._clock())

    async def interactions(self, run_id: str) -> list[Interaction]:
        known = self.mirror.of_run(run_id)
        if known is not None and not self.closed:
            return known

        def body() -> list[Interaction]:
            self._require_run(run_id)
            rows = self._con.execute(
                f"SELECT {INTERACTION_COLUMNS} FROM interactions WHERE run_id = ?"
                " ORDER BY requested_at, n",
                [run_id],
            ).fetchall()
            found = [interaction_from_row(r) for r in rows]
            self.mirror.keep_run(run_id, found)  # on the worker: no commit can slip between
            return found

        return await self._call(body)

    async def answer(
        self, interaction_id: str, answer: Any, *, answered_by: str = "unknown"
    ) -> AnswerResult:
        payload = check_answer(answer)
        now = self._clock()

        def body(current: Interaction) -> AnswerResult:
            self._con.execute(
                "UPDATE interactions SET answered_at = ?, answers = ?, answered_by = ?"
                " WHERE id = ? AND answered_at IS NULL",
                [to_db(now), payload, answered_by, interaction_id],
            )
            message = None
            if current.kind == "async":
                message = self._insert_message(
                    current.run_id, current.node_id, answer_message(current, answer), now
                )
            answered = replace(
                current, answered_at=now, answers=json.loads(payload), answered_by=answered_by
            )
            self._event_now(
                current.run_id, "interaction_answered", answered_event(answered),
                current.node_id, current.branch_id,
            )  # fmt: skip
            return AnswerResult(answered, message)

        def job() -> AnswerResult:
            # On the worker, so answers are decided one at a time: the first
            # takes the question out of the pending set, later ones find it gone.
            current = self.mirror.take_pending(interaction_id)
            if current is None:  # answered already, ended, or unknown: the file says which
                raise lifecycle.not_pending(self._fetch_interaction(interaction_id))
            if current.due(now):  # an answer at (or after) the expiry instant: too late
                self.mirror.give_back(current)
                raise lifecycle.not_pending(self._expire_now(current))
            try:
                result = self._transaction(lambda: body(current))
            except BaseException:
                self.mirror.give_back(current)
                raise
            self.mirror.stored(result.interaction)
            if result.message is not None:
                self.mirror.queued(result.message)
            return result

        try:
            result = await self._call(job)
        except QuestionClosedError:
            self.doorbell.ring(interaction_id)  # nothing else rang for an expiry found here
            raise
        self.doorbell.ring(node_key(result.interaction.run_id, result.interaction.node_id))
        return result

    # -- messages --------------------------------------------------------

    def _insert_message(self, run_id: str, node_id: str, text: str, now: datetime) -> QueuedMessage:
        message = QueuedMessage(self._new_id(), run_id, node_id, text, now)
        self._con.execute(
            f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL)",
            [message.id, run_id, node_id, text, to_db(now)],
        )
        return message

    async def queue_message(self, run_id: str, node_id: str, text: str) -> QueuedMessage:
        now = self._clock()

        def body() -> QueuedMessage:
            self._require_run(run_id)
            return self._insert_message(run_id, node_id, text, now)

        def job() -> QueuedMessage:
            message = self._transaction(body)
            self.mirror.queued(message)
            return message

        message = await self._call(job)
        self.doorbell.ring(node_key(run_id, node_id))
        return message

    async def drain_messages(
        self, run_id: str, node_id: str, *, token: str | None = None, repeated: bool = False
    ) -> list[QueuedMessage]:
        if self.closed:
            raise StoreError(f"the run store {self.path} is closed")
        if repeated and token:
            taken = await self._call(lambda: self._drained_by(token))
            if taken:
                return taken  # the first attempt landed; its reply was lost
        waiting = self.mirror.take(run_id, node_id)
        if not waiting:
            return []  # the common case at every turn: nothing to write
        # Handed out now, from memory (each once); marked delivered in the file by
        # the worker in order, not awaited. After a crash before that write lands
        # the messages are delivered again: the conversation that saw them is lost.
        now = self._clock()
        delivered = [replace(m, delivered_at=now) for m in waiting]
        ids = [m.id for m in waiting]
        self._worker.submit(lambda: self._mark_delivered(ids, now, token))
        return delivered

    def _mark_delivered(self, ids: list[str], now: datetime, token: str | None) -> None:
        """On the worker: record a drain in the file."""
        marks = ", ".join("?" for _ in ids)
        self._con.execute(
            f"UPDATE messages SET delivered_at = ?, drain_token = ? WHERE id IN ({marks})"
            " AND delivered_at IS NULL",
            [to_db(now), token, *ids],
        )

    def _drained_by(self, token: str) -> list[QueuedMessage]:
        """On the worker: the messages the drain marked with ``token`` took."""
        rows = self._con.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE drain_token = ? ORDER BY n", [token]
        ).fetchall()
        return [message_from_row(r) for r in rows]

    # -- lifecycle -------------------------------------------------------
    async def flush(self) -> None:
        await self._call(self._flushed)

    def add_closer(self, closer: Callable[[], None]) -> None:
        """Call ``closer`` first when the store finally closes (to stop serving it)."""
        self._closers.append(closer)

    async def close(self) -> None:
        """Flush, and release the file when the last user of this store closes it."""
        if self._users == 1:
            for closer in self._closers:
                closer()
            self._closers.clear()
        with _open_lock:
            if self.closed:
                return
            self._users -= 1
            if self._users > 0:
                return
            self.closed = True
            _open_stores.pop(self.path, None)
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        self._worker.stop()
        self._con.close()
