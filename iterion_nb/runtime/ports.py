"""The ports the runtime talks to. Implementations live in ``store/`` and ``backends/``.

Every Store implementation must pass the conformance suite in
``tests/conformance/``; that suite is the precise contract, this protocol
its signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from iterion_nb.ir.model import McpServer, Node, Schema
from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.records import (
    RESUMABLE,
    AnswerResult,
    Artifact,
    Event,
    Interaction,
    InteractionKind,
    LeaseReport,
    Option,
    QueuedMessage,
    Run,
    RunBundle,
    RunStatus,
)

#: Marks an argument that was not given (so ``None`` can mean "clear it").
UNSET: Any = object()


class Store(Protocol):
    """Durable storage of runs and everything they record.

    All methods are coroutines and may be awaited from any event loop on any
    thread. Methods that read or change status flush pending events first,
    so a reader never sees a status newer than the events that led to it.

    Every run returned has its *effective* status (see
    :func:`~iterion_nb.runtime.ownership.effective_status`): a ``running``
    run whose owner's lease lapsed reads as ``interrupted``.
    """

    async def create_run(self, run: Run, *, owner: Claimant | None = None) -> Run:
        """Record a new run, owned by ``owner`` when given (committed before returning)."""
        ...

    async def get_run(self, run_id: str) -> Run:
        """The run; raises ``NotFoundError`` if there is none."""
        ...

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | None = None,
        error: str | None = UNSET,
        checkpoint: dict[str, Any] | None = UNSET,
        source_hash: str | None = None,
        source: str | None = None,
        launch: dict[str, Any] | None = None,
    ) -> Run:
        """Change a run's status, error, checkpoint, source or launch options; committed at once.

        ``launch`` replaces the launch options whole (a run moved to a cluster).
        """
        ...

    async def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[Run]:
        """Runs, newest first, optionally only those whose effective status is ``status``."""
        ...

    # -- ownership -------------------------------------------------------------
    async def acquire_run(
        self,
        run_id: str,
        owner: Claimant,
        *,
        statuses: tuple[RunStatus, ...] = RESUMABLE,
        take_from: str | None = None,
    ) -> Run:
        """Take the run to execute it, atomically; it becomes ``running``, owned by ``owner``.

        The owner that already holds the run may take it again (to resume a
        run it keeps parked). A run ``take_from`` holds is handed over, even
        ``running`` (see :func:`~iterion_nb.runtime.ownership.check_acquire`).

        Raises:
            NotFoundError: No such run.
            RunOwnedError: Another live owner holds it (names that owner).
            ResumeError: Its status is not one of ``statuses``.
        """
        ...

    async def renew_leases(self, owner: Claimant, run_ids: list[str]) -> LeaseReport:
        """Extend ``owner``'s leases on ``run_ids``; report the ones it lost or must cancel."""
        ...

    async def settle_run(
        self,
        run_id: str,
        owner: str,
        *,
        status: RunStatus,
        error: str | None,
        checkpoint: dict[str, Any],
        event: tuple[str, dict[str, Any]] | None,
        keep_lease: bool = False,
    ) -> Run:
        """Record where a run stopped: status, error, checkpoint and its event, in one commit.

        The lease is released unless ``keep_lease`` (a paused run its owner
        keeps parked, to resume it when answered).

        Raises:
            LeaseLostError: ``owner`` no longer holds the run (nothing is written).
        """
        ...

    async def release_runs(self, owner: str, run_ids: list[str]) -> None:
        """Give up ``owner``'s leases on ``run_ids`` (status unchanged)."""
        ...

    async def cancel_run(self, run_id: str) -> Run:
        """Cancel a run, atomically.

        A run that is executing is asked to stop (``cancel_requested``; its
        owner stops it within a heartbeat and records ``cancelled``); a paused,
        failed-resumable or interrupted one becomes ``cancelled`` at once, with
        its ``run_cancelled`` event. A finished, failed or cancelled run is
        returned unchanged.
        """
        ...

    async def save_checkpoint(
        self,
        run_id: str,
        checkpoint: dict[str, Any],
        *,
        owner: str | None = None,
        durable: bool = False,
    ) -> None:
        """Record a progress checkpoint of the run.

        The latest checkpoint of a run wins. A progress checkpoint reaches the
        file with the next batch of events (at most the batch interval later,
        whatever else is going on); ``durable`` commits it, with the events
        before it, before returning. With ``owner``, a run that owner no
        longer holds keeps its checkpoint (a durable save then raises
        ``LeaseLostError``). The caller must not change ``checkpoint`` afterwards.
        """
        ...

    async def append_event(
        self,
        run_id: str,
        event_type: str,
        data: dict[str, Any] | None = None,
        *,
        node_id: str | None = None,
        branch_id: str | None = None,
    ) -> None:
        """Append an event; it gets the run's next ``seq`` (1, 2, …).

        Events are written in batches: one may reach the file a short,
        bounded time after this returns (see the implementation's docs).
        """
        ...

    async def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        """The run's events with ``seq > after``, in order."""
        ...

    async def put_artifact(self, run_id: str, node_id: str, name: str, value: Any) -> Artifact:
        """Publish a new version of artifact ``name``."""
        ...

    async def get_artifact(self, run_id: str, name: str, version: int | None = None) -> Artifact:
        """The latest (or a given) version of an artifact; ``NotFoundError`` if none."""
        ...

    async def list_artifacts(self, run_id: str) -> list[Artifact]:
        """Every version of every artifact of a run, by name then version."""
        ...

    async def add_interaction(
        self, interaction: Interaction, *, owner: str | None = None
    ) -> Interaction:
        """Record a question (committed before returning; rings the doorbell).

        With ``owner``, the question is recorded only while the run is stored
        under that owner (its lease lapsed or not): a process that lost the
        run to another asks nobody a question nobody would read.

        Raises:
            ConflictError: A question with this id exists.
            LeaseLostError: ``owner`` no longer holds the run (nothing is written).
        """
        ...

    async def get_interaction(self, interaction_id: str) -> Interaction:
        """The interaction; ``NotFoundError`` if there is none."""
        ...

    async def pending_interactions(
        self,
        run_id: str | None = None,
        *,
        node_id: str | None = None,
        kind: InteractionKind | None = None,
    ) -> list[Interaction]:
        """Unanswered interactions, oldest first, filtered by run, node and kind."""
        ...

    async def interactions(self, run_id: str) -> list[Interaction]:
        """Every interaction of a run, answered or not, oldest first."""
        ...

    async def answer(
        self, interaction_id: str, answer: Any, *, answered_by: str = "unknown"
    ) -> AnswerResult:
        """Answer a pending interaction, atomically.

        In one transaction: sets the answer, the time and ``answered_by``;
        appends the ``interaction_answered`` event; and for an ``async``
        question queues ``[Answer to question <id>] Q: "…" — A: …`` for the
        asking node. Then rings the doorbell.

        Raises:
            NotFoundError: No such interaction.
            AlreadyAnsweredError: It was answered before (carries that answer).
            QuestionClosedError: It expired (now, or before) or was retracted.
            InvalidAnswerError: Not JSON data, or over 64 KB.
        """
        ...

    async def expire_due(self, run_id: str | None = None) -> list[Interaction]:
        """Record the expiry of the pending questions past their ``expires_at`` (of one run).

        Each, in one transaction: the question ends ``expired`` (at its
        ``expires_at``), its ``interaction_expired`` event, and for an async
        question ``[Question <id> expired unanswered]`` queued for its asker.
        An expired question is never listed pending, even before this runs.
        Returns the questions it expired.
        """
        ...

    async def retract(self, interaction_id: str, reason: str) -> Interaction:
        """Withdraw a pending question, atomically, with its ``interaction_retracted`` event.

        Returns the question as it ends: retracted — or, when an answer (or its
        expiry) came first, as it was, unchanged: the caller tells which.

        Raises:
            NotFoundError: No such question.
        """
        ...

    async def amend(
        self,
        interaction_id: str,
        *,
        questions: tuple[str, ...] | None = None,
        options: tuple[Option, ...] | None = None,
        allow_free_text: bool | None = None,
    ) -> Interaction:
        """Rewrite a pending question in place (``revision`` + 1, ``interaction_amended``).

        Raises:
            NotFoundError: No such question.
            AlreadyAnsweredError: It was answered first.
            QuestionClosedError: It expired or was retracted.
        """
        ...

    async def queue_message(self, run_id: str, node_id: str, text: str) -> QueuedMessage:
        """Queue a message for one node of a run (rings the doorbell)."""
        ...

    async def drain_messages(
        self, run_id: str, node_id: str, *, token: str | None = None, repeated: bool = False
    ) -> list[QueuedMessage]:
        """Take the node's undelivered messages, oldest first; each is returned once ever.

        ``token`` marks the messages this drain takes; a drain ``repeated``
        with the same token (its first reply was lost) returns what the first
        attempt took, if it landed, and drains as usual otherwise.
        """
        ...

    async def export_run(self, run_id: str) -> RunBundle:
        """Everything of one run (its record as stored), to copy it elsewhere."""
        ...

    async def import_run(self, bundle: RunBundle, *, force: bool = False) -> str:
        """Make this store hold exactly ``bundle``'s run, atomically; idempotent.

        Returns ``"created"``, ``"updated"`` (the run was here, an earlier state
        of ``bundle``'s: it is replaced) or ``"unchanged"``; or, leaving the
        copy here as it is, ``"newer"`` (it recorded more than ``bundle``, which
        has nothing it lacks) or ``"diverged"`` (each recorded something the
        other lacks): see :func:`~iterion_nb.runtime.lineage.import_outcome`.
        ``force`` replaces those too. A run that a live owner executes here is
        left alone, forced or not (``RunOwnedError``).
        """
        ...

    async def flush(self) -> None:
        """Write buffered events now."""
        ...

    async def close(self) -> None:
        """Flush and release the store."""
        ...


@dataclass(frozen=True)
class BackendRequest:
    """What a node asks of an LLM backend.

    ``purpose`` says which answer is expected in :attr:`BackendResult.output`:

    - ``agent`` (agents and judges): the node's output — an object matching
      ``output_schema`` when there is one, else text;
    - ``route`` (``mode: llm`` routers): the list of chosen ``choices``;
    - ``human`` (human nodes with ``interaction: llm`` or ``llm_or_human``):
      the answer, or None to hand the question to a person.
    """

    purpose: Literal["agent", "route", "human"]
    run_id: str
    node: Node
    branch_id: str
    system: str
    user: str
    input: Any
    output_schema: Schema | None = None
    model: str | None = None
    choices: tuple[str, ...] = ()
    context: NodeContext | None = None
    #: What the node saved when it paused (its conversation, the pending call).
    resume: dict[str, Any] | None = None
    #: How many times this node finished before in this run.
    visit: int = 0
    #: Whether the node runs inside a fan-out branch (a run-wide pause is refused there).
    in_branch: bool = False
    #: The run's working directory (where file tools and commands act).
    workdir: str = "."
    #: The conversation this node continues (``session: inherit``) or starts from a
    #: copy of (``session: fork``): what the parent's backend returned as its session.
    session: dict[str, Any] | None = None
    #: Whether :attr:`session` is forked (a copy) rather than continued.
    fork: bool = False
    #: The MCP servers the node's ``mcp:`` names (their tools are the model's too).
    mcp_servers: tuple[McpServer, ...] = ()
    #: The user prompt as text and image blocks, when it shows an ``image`` attachment
    #: (``{"type": "image", "path": ..., "media_type": ...}`` between text blocks);
    #: empty otherwise (then :attr:`user` is the whole prompt).
    user_blocks: tuple[dict[str, Any], ...] = ()
    #: The node's ``reasoning_effort`` (an agent's, a judge's or an llm router's), its
    #: ``${ENV}`` read: one of ``minimal`` … ``max``, or None.
    reasoning_effort: str | None = None
    #: Whether this execution may re-run one a stopped or dead process began: the first
    #: node execution of a frontier a resume restored. Only then do its asks look for
    #: the questions an earlier run of it posted (:mod:`iterion_nb.backends.reask`).
    rerun: bool = False


@dataclass(frozen=True)
class BackendResult:
    """A backend's answer and what it cost."""

    output: Any
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    #: The node's conversation as it ended, for a later node to inherit or fork
    #: (JSON data, kept in the run's checkpoint): ``{"backend": ..., ...}``.
    session: dict[str, Any] | None = None


class NodeContext(Protocol):
    """What a backend may do on behalf of the node it serves."""

    store: Store
    run_id: str
    node_id: str
    branch_id: str
    #: The claimant whose lease the run executes under: questions are recorded under it.
    owner: str | None

    async def emit(self, event_type: str, data: dict[str, Any] | None = None) -> None:
        """Append an event to the run, attributed to this node and branch."""
        ...

    def charge(self, tokens: int, cost_usd: float) -> None:
        """Count model usage against the run's budget as it happens."""
        ...


class Backend(Protocol):
    """Runs LLM work for agent, judge, llm-router and llm-human nodes.

    A backend that emits ``llm_request`` / ``llm_step_finished`` itself, one
    pair per model turn, and charges usage through its context, sets
    ``reports_steps = True``; the engine then does neither for it.
    """

    async def call(self, request: BackendRequest) -> BackendResult:
        """Answer ``request``; raise an exception to fail the node (resumably)."""
        ...
