"""The exception tree of iterion_nb.

User mistakes are :class:`IterionError` subclasses carrying what a surface
needs to show them (the CLI, the magics and the REST API translate them once,
at the edge). Control-flow signals of the runtime will derive from
:class:`ControlSignal`, a ``BaseException``, so that agent or tool code that
catches ``Exception`` cannot swallow a pause or a cancellation.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import datetime

from iterion_nb.dsl.diagnostics import Diagnostic, Severity, more_not_shown, render_all
from iterion_nb.dsl.source import Source


class IterionError(Exception):
    """Base of every error iterion_nb raises on purpose."""


class CompileError(IterionError):
    """A workflow source has errors. ``diagnostics`` holds all of them.

    ``str(err)`` is the rendered report: ``file:line:col``, the line, a caret.
    """

    def __init__(
        self, diagnostics: Sequence[Diagnostic], source: Source, truncated: int = 0
    ) -> None:
        self.diagnostics = tuple(diagnostics)
        self.source = source
        errors = [d for d in self.diagnostics if d.severity is Severity.ERROR]
        count = f"{len(errors)} error{'s' if len(errors) != 1 else ''}" + more_not_shown(
            len(self.diagnostics), truncated
        )
        super().__init__(f"{source.name}: {count}\n{render_all(self.diagnostics, source)}")


class ControlSignal(BaseException):
    """Base of the runtime's control flow (pause, cancel, budget exhausted)."""


class StoreError(IterionError):
    """A problem with the run store."""


class NotFoundError(StoreError):
    """A run, interaction or artifact that does not exist.

    Attributes:
        kind: What was looked for (``run``, ``interaction``, ``artifact``).
        key: The id or name that was not found.
    """

    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind
        self.key = key
        super().__init__(f"no {self._said} '{key}'")

    @property
    def _said(self) -> str:
        # an interaction is a question to a person wherever a person reads about it
        return "question" if self.kind == "interaction" else self.kind

    def of_run(self, run_id: str) -> NotFoundError:
        """The same, looked for in one run: says so (``no question 'q1' in run 'r1'``)."""
        self.args = (f"no {self._said} '{self.key}' in run '{run_id}'",)
        return self


class ConflictError(StoreError):
    """An operation that contradicts what is already recorded."""


class AlreadyAnsweredError(ConflictError):
    """A second answer to an interaction. ``existing`` is the recorded one."""

    def __init__(self, interaction_id: str, existing: object) -> None:
        self.interaction_id = interaction_id
        self.existing = existing
        super().__init__(f"question '{interaction_id}' is already answered")


#: How the refusal of a late answer ends when only a resume can take its run on (each
#: surface adds its own way to resume: a command, a magic).
RESUME_APPLIES_EXPIRY = "which applies the gate's on_expire"


#: How the reason of a question withdrawn because its run ended begins (not by its asker).
RUN_ENDED = "its run "


def withdrawn_by(reason: str | None) -> str:
    """Who withdrew a question: its run, by ending (``RUN_ENDED``), else its asker."""
    return "its run" if (reason or "").startswith(RUN_ENDED) else "its asker"


class QuestionClosedError(ConflictError):
    """The question ended without an answer: it ``expired``, or its asker ``retracted`` it.

    Attributes:
        interaction_id: The question.
        ended: ``expired`` or ``retracted``.
        reason: Why (a retraction's reason), if given.
    """

    def __init__(
        self, interaction_id: str, ended: str, reason: str | None = None, hint: str = ""
    ) -> None:
        self.interaction_id = interaction_id
        self.ended = ended
        self.reason = reason
        why = f": {reason}" if reason else ""
        by = "" if withdrawn_by(reason) == "its run" else " by its asker"  # the reason says
        what = "expired unanswered" if ended == "expired" else f"was withdrawn{by}{why}"
        then = f"; {hint}" if hint else ""
        super().__init__(f"question '{interaction_id}' {what}; it takes no answer{then}")


class InvalidAnswerError(StoreError):
    """An answer that cannot be recorded (too large, not JSON data)."""


class BadTextError(IterionError):
    """Text holding a character it may not: U+0000 anywhere, other control characters in places.

    Refused before anything is written (REST: 400 ``bad_text``). ``field``
    names where: ``answered_by``, ``answer``, ``answer.note``, ``answer[2]``.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field} {message}")


class StoreLockedError(StoreError):
    """Another live process holds the store file. ``pid`` is that process, if known."""

    def __init__(self, path: str, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"the run store {path} is held by {holder}; stop it or use another store path"
        )


class StoreFileError(StoreError):
    """The file at the store path is not an iterion_nb store (it is left untouched)."""


class StoreReadOnlyError(StoreFileError):
    """A write to a store this process could open for reading only (it is left untouched)."""


class RunError(IterionError):
    """A run cannot start or go on because of how it was asked for."""


class VarsError(RunError):
    """Run variables that are missing, unknown or of the wrong type (checked before start)."""


class ResumeError(RunError):
    """A run that cannot be resumed (finished, still running, or its source changed)."""


class RunOwnedError(ResumeError):
    """The run is owned by a live process (another one, or another session of this one).

    Only its owner executes it; a paused run it owns resumes there once its
    questions are answered. Attributes name the owner.
    """

    def __init__(
        self, run_id: str, pid: int, host: str, since: datetime, *, queued: bool = False
    ) -> None:
        self.run_id = run_id
        self.pid = pid
        self.host = host
        self.since = since
        #: Held for a cluster's worker (``pid``/``host``: the process that queued it).
        self.queued = queued
        when = since.strftime("%Y-%m-%d %H:%M:%S UTC")
        if queued:
            super().__init__(
                f"run '{run_id}' waits in a cluster's queue since {when} (queued by process"
                f" {pid} on host '{host}'): the first worker that takes it up runs it; if"
                " no worker is up to take it within a minute, it reads interrupted and can be"
                " resumed"
            )
            return
        if pid == os.getpid() and host == socket.gethostname():
            super().__init__(
                f"run '{run_id}' is owned by another session of this process ({pid} on host"
                f" '{host}') since {when}: that session runs it (a paused run resumes there"
                " once its questions are answered); answer its questions, or close that"
                " session to resume the run here"
            )
            return
        super().__init__(
            f"run '{run_id}' is owned by process {pid} on host '{host}' since {when}: that"
            " process runs it (a paused run resumes there once its questions are answered);"
            " answer its questions, or stop that process to resume the run elsewhere"
        )


class OwnerMayRenewError(RunOwnedError):
    """The run's lease lapsed while the store's server was away: its owner may renew it.

    Every lease lapses during an outage longer than a lease, though their
    owners may be alive and executing; for a while after the server is back,
    only they may take their runs (they renew first), nobody else.
    """

    def __init__(
        self, run_id: str, pid: int, host: str, since: datetime, *, wait: float,
        queued: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(run_id, pid, host, since, queued=queued)
        self.wait = wait
        again = f"Try again in {max(wait, 0.1):.0f} s: then the run is yours if nobody"
        if queued:
            self.args = (
                f"run '{run_id}' waited in a cluster's queue (queued by process {pid} on host"
                f" '{host}') when the run store's server went away; it is back, and a worker"
                f" may take the run up first. {again} took it",
            )
            return
        self.args = (
            f"run '{run_id}' was executing (process {pid} on host '{host}') when the run"
            " store's server went away; it is back, and that process may still be alive:"
            f" it renews its hold first. {again} renewed it",
        )


class LeaseLostError(ConflictError):
    """This process no longer owns the run (its lease lapsed and another owner took it)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"this process no longer owns run '{run_id}' (its lease lapsed)")


class NodeError(IterionError):
    """A node failed; the run becomes ``failed_resumable`` and resume re-runs the node.

    Attributes:
        node: The failing node's name.
    """

    def __init__(self, node: str, message: str) -> None:
        self.node = node
        super().__init__(f"node '{node}': {message}")


class PauseRun(ControlSignal):
    """Raised where a run must wait for a person (a human gate, ``ask_user``).

    Attributes:
        interaction_id: The blocking interaction the run waits on.
        state: What the node needs to continue on resume (JSON data).
    """

    def __init__(self, interaction_id: str, state: dict[str, object] | None = None) -> None:
        super().__init__(interaction_id)
        self.interaction_id = interaction_id
        self.state = state or {}
