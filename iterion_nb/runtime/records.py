"""The records the run store keeps: runs, events, artifacts, interactions, messages.

Plain frozen data shared by every Store implementation. Times are timezone-
aware UTC datetimes; JSON payloads are plain Python data (dict, list, str,
int, float, bool, None) and round-trip exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from iterion_nb import safe_data
from iterion_nb.errors import InvalidAnswerError

#: Claimant ids of a cluster's queue (``ownership.Claimant.queue``).
QUEUE_PREFIX = "queue-"

RunStatus = Literal[
    "running",
    "paused_waiting_human",
    "finished",
    "failed",
    "failed_resumable",
    "cancelled",
    "interrupted",
]
RUN_STATUSES: tuple[RunStatus, ...] = (
    "running", "paused_waiting_human", "finished", "failed", "failed_resumable", "cancelled",
    "interrupted",
)  # fmt: skip
#: Statuses a resume may start from. ``interrupted`` is never stored: it is how
#: a ``running`` run reads once its owner's lease has lapsed (see ``ownership``).
RESUMABLE: tuple[RunStatus, ...] = (
    "paused_waiting_human", "failed_resumable", "cancelled", "interrupted"
)  # fmt: skip
InteractionKind = Literal["human", "ask_user", "async", "await"]
INTERACTION_KINDS: tuple[InteractionKind, ...] = ("human", "ask_user", "async", "await")

#: An answer larger than this (as UTF-8 JSON) is refused.
MAX_ANSWER_BYTES = 64 * 1024


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the default clock)."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Option:
    """A choice offered with a question."""

    id: str
    label: str


@dataclass(frozen=True, slots=True)
class Lease:
    """Who owns a run: one process (one session in it), until ``expires_at`` unless renewed.

    Attributes:
        owner: The owning session's claimant id (unique per session).
        pid: The owner's process id.
        host: The owner's host name.
        since: When this owner took the run.
        expires_at: When the lease lapses unless the owner's heartbeat renews it.
    """

    owner: str
    pid: int
    host: str
    since: datetime
    expires_at: datetime

    @property
    def queued(self) -> bool:
        """Whether a cluster's queue holds the run (no process executes it yet)."""
        return self.owner.startswith(QUEUE_PREFIX)


@dataclass(frozen=True, slots=True)
class Run:
    """A run of a workflow.

    ``lease`` names the process that executes it (or keeps it parked, paused,
    to resume it when answered); ``launch`` records what it was started with
    (``backend``, ``scenario``) so another process can resume it the same way.
    """

    id: str
    workflow: str
    source_hash: str
    status: RunStatus
    created_at: datetime
    updated_at: datetime
    source: str = ""
    vars: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    checkpoint: dict[str, Any] | None = None
    lease: Lease | None = None
    launch: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's append-only event log, ordered by ``seq``."""

    run_id: str
    seq: int
    type: str
    at: datetime
    data: dict[str, Any] = field(default_factory=dict)
    node_id: str | None = None
    branch_id: str | None = None


@dataclass(frozen=True, slots=True)
class Artifact:
    """A published value; each publish of a name adds a version (1, 2, …)."""

    run_id: str
    name: str
    version: int
    node_id: str
    value: Any
    created_at: datetime


#: How a question ended without an answer.
EndKind = Literal["expired", "retracted"]


@dataclass(frozen=True, slots=True)
class Interaction:
    """A question to a person. Pending until answered, expired or retracted.

    ``kind`` is ``human`` (a gate), ``ask_user`` (blocking tool), ``async``
    (asked without stopping) or ``await`` (a synthetic pause listing the
    ``waits_on`` ids it waits for). ``expires_at``: when it ends unanswered
    if nobody answers. ``ended`` says how it ended without an answer
    (``expired``, or ``retracted`` by its asker, with ``end_reason``);
    ``revision`` counts the asker's amendments. ``accepts`` describes what an
    answer must be (a human gate with an output schema: its fields).
    """

    id: str
    run_id: str
    node_id: str
    kind: InteractionKind
    questions: tuple[str, ...]
    requested_at: datetime
    branch_id: str | None = None
    options: tuple[Option, ...] = ()
    allow_free_text: bool = True
    waits_on: tuple[str, ...] = ()
    answered_at: datetime | None = None
    answers: Any = None
    answered_by: str | None = None
    expires_at: datetime | None = None
    ended: EndKind | None = None
    ended_at: datetime | None = None
    end_reason: str | None = None
    revision: int = 0
    accepts: dict[str, Any] | None = None

    @property
    def pending(self) -> bool:
        """Whether it still waits for an answer (nobody answered; not expired or retracted)."""
        return self.answered_at is None and self.ended is None

    def due(self, now: datetime) -> bool:
        """Whether it is pending past its expiry (it expires at the next look)."""
        return self.pending and self.expires_at is not None and self.expires_at <= now

    @property
    def question(self) -> str:
        """The questions as one text."""
        return "\n".join(self.questions)


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """A message for one node of a run, delivered once at its next turn."""

    id: str
    run_id: str
    node_id: str
    text: str
    created_at: datetime
    delivered_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RunBundle:
    """Everything a store keeps of one run, to copy it to another store.

    ``run`` is the record as stored (its status not derived from the lease).
    """

    run: Run
    events: tuple[Event, ...]
    artifacts: tuple[Artifact, ...]
    interactions: tuple[Interaction, ...]
    messages: tuple[QueuedMessage, ...]


@dataclass(frozen=True, slots=True)
class LeaseReport:
    """What renewing an owner's leases found: runs it lost, runs it must cancel."""

    lost: tuple[str, ...] = ()
    cancel: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AnswerResult:
    """What answering recorded: the answered interaction and its queued message."""

    interaction: Interaction
    message: QueuedMessage | None


def answer_text(answer: Any) -> str:
    """How an answer reads inside a message: text as is, anything else as JSON."""
    if isinstance(answer, str):
        return answer
    return json.dumps(answer, ensure_ascii=False, sort_keys=True)


def answer_message(interaction: Interaction, answer: Any) -> str:
    """The text queued for the asking node when its question is answered."""
    question = json.dumps(interaction.question, ensure_ascii=False)
    return f"[Answer to question {interaction.id}] Q: {question} — A: {answer_text(answer)}"


def answered_event(interaction: Interaction) -> dict[str, Any]:
    """The data of the ``interaction_answered`` event an answer records."""
    return {
        "interaction_id": interaction.id,
        "kind": interaction.kind,
        "answered_by": interaction.answered_by,
    }


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def encode_json(value: Any) -> str:
    """Serialise JSON data exactly (unicode kept, key order kept)."""
    return _ENCODER.encode(value)


def check_answer(answer: Any) -> str:
    """Validate an answer and return its JSON text.

    Raises:
        InvalidAnswerError: If it is not JSON data or exceeds :data:`MAX_ANSWER_BYTES`.
    """
    unfit = safe_data.problem(answer)
    if unfit is not None:
        raise InvalidAnswerError(
            f"an answer must be JSON data (text, numbers, lists, objects): the answer {unfit}"
        )
    text = encode_json(answer)
    size = len(text.encode("utf-8"))
    if size > MAX_ANSWER_BYTES:
        raise InvalidAnswerError(
            f"the answer is {size:,} bytes; answers are limited to {MAX_ANSWER_BYTES:,} bytes"
        )
    return text
