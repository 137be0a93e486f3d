"""What the DuckDB store keeps in memory: questions and undelivered messages.

The process that holds the file alone adds and answers questions and queues
and drains messages, so it can answer the frequent questions — which
questions are pending, what did this run ask, is there anything for this
agent — without a trip to the database worker, where they would queue behind
commits. The mirror is loaded when the file is opened and updated right
after each commit (and, for a drain, before its write reaches the file).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime

from iterion_nb.runtime.records import Interaction, InteractionKind, QueuedMessage


class Mirror:
    """Pending questions, the questions of the runs read so far, undelivered messages."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._pending: dict[str, Interaction] = {}
        #: Pending questions an answer is being committed for (still pending to readers).
        self._claimed: set[str] = set()
        self._by_run: dict[str, dict[str, Interaction]] = {}
        self._inbox: dict[tuple[str, str], list[QueuedMessage]] = {}

    def load(self, pending: Iterable[Interaction], undelivered: Iterable[QueuedMessage]) -> None:
        """At open: what the file holds."""
        with self.lock:
            self._pending = {i.id: i for i in pending}
            for message in undelivered:
                self._inbox.setdefault((message.run_id, message.node_id), []).append(message)

    # -- questions -----------------------------------------------------------------
    def pending(
        self,
        run_id: str | None,
        node_id: str | None,
        kind: InteractionKind | None,
        *,
        now: datetime | None,
    ) -> list[Interaction]:
        """Unanswered questions matching the filters, oldest first.

        With ``now``, those past their expiry are left out (they expire at the
        next look); without, every question still recorded as pending.
        """
        with self.lock:
            found = [
                i
                for i in self._pending.values()
                if (run_id is None or i.run_id == run_id)
                and (node_id is None or i.node_id == node_id)
                and (kind is None or i.kind == kind)
                and (now is None or not i.due(now))
            ]
        return sorted(found, key=lambda i: i.requested_at)

    def get(self, interaction_id: str) -> Interaction | None:
        """A question this process knows, if it does."""
        with self.lock:
            found = self._pending.get(interaction_id)
            if found is not None:
                return found
            for questions in self._by_run.values():
                if interaction_id in questions:
                    return questions[interaction_id]
        return None

    def of_run(self, run_id: str) -> list[Interaction] | None:
        """Every question of a run read before (None: not read yet), oldest first."""
        with self.lock:
            questions = self._by_run.get(run_id)
            found = None if questions is None else list(questions.values())
        return None if found is None else sorted(found, key=lambda i: i.requested_at)

    def keep_run(self, run_id: str, questions: list[Interaction]) -> None:
        """The questions of a run, as just read from the file (in file order)."""
        with self.lock:
            self._by_run.setdefault(run_id, {i.id: i for i in questions})

    def stored(self, interaction: Interaction) -> None:
        """After a commit: a question was added or answered."""
        with self.lock:
            if interaction.pending:
                self._pending[interaction.id] = interaction
            else:
                self._pending.pop(interaction.id, None)
                self._claimed.discard(interaction.id)
            questions = self._by_run.get(interaction.run_id)
            if questions is not None:
                questions[interaction.id] = interaction

    def take_pending(self, interaction_id: str) -> Interaction | None:
        """Claim a question to answer it (the first answer claims it; later ones find it taken).

        It stays pending to every reader until its answer commits (:meth:`stored`):
        dropped earlier, a gate looking in between would pass on an answer that
        its read of the run's questions does not show yet.
        """
        with self.lock:
            if interaction_id in self._claimed:
                return None
            found = self._pending.get(interaction_id)
            if found is not None:
                self._claimed.add(interaction_id)
            return found

    def give_back(self, interaction: Interaction) -> None:
        """An answer that failed to commit (or came too late): no longer claimed."""
        with self.lock:
            self._claimed.discard(interaction.id)
            self._pending[interaction.id] = interaction

    # -- messages ----------------------------------------------------------------------
    def queued(self, message: QueuedMessage) -> None:
        """After a commit: one more message for its node."""
        with self.lock:
            self._inbox.setdefault((message.run_id, message.node_id), []).append(message)

    def take(self, run_id: str, node_id: str) -> list[QueuedMessage]:
        """The node's undelivered messages, each handed out once."""
        with self.lock:
            return self._inbox.pop((run_id, node_id), [])

    # -- a run replaced by a copy --------------------------------------------------------
    def replace_run(
        self, run_id: str, questions: Iterable[Interaction], messages: Iterable[QueuedMessage]
    ) -> None:
        """A run was replaced in the file (``store copy``): mirror what it holds now."""
        with self.lock:
            for iid in [i for i, q in self._pending.items() if q.run_id == run_id]:
                del self._pending[iid]
            self._by_run.pop(run_id, None)
            for key in [k for k in self._inbox if k[0] == run_id]:
                del self._inbox[key]
            for question in questions:
                if question.pending:
                    self._pending[question.id] = question
            for message in messages:
                if message.delivered_at is None:
                    self._inbox.setdefault((run_id, message.node_id), []).append(message)
