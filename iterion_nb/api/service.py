"""What the REST API needs from the process that serves it, and how data looks on the wire.

The handlers talk to a :class:`RunService` (implemented by the session, the
composition root), so the same handlers serve the store holder's loopback
server and, later, the Jupyter server extension.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from iterion_nb.runtime.records import Event, Interaction, Run
from iterion_nb.runtime.wire import event_json, interaction_json, run_json

#: Ids in URLs: what our ids look like, and nothing that could be a path trick.
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,199}\Z")


class RunService(Protocol):
    """The operations behind the REST routes."""

    async def list_runs(self, status: str | None, limit: int) -> list[Run]:
        """Runs, newest first."""
        ...

    async def get_run(self, run_id: str) -> Run:
        """One run (NotFoundError if none)."""
        ...

    async def events(self, run_id: str, after: int) -> list[Event]:
        """A run's events after ``after``."""
        ...

    async def pending(self, run_id: str) -> list[Interaction]:
        """A run's unanswered questions."""
        ...

    async def interactions(self, run_id: str) -> list[Interaction]:
        """Every question of a run, answered or not, with its answer and who gave it."""
        ...

    async def pending_all(self) -> list[Interaction]:
        """Every run's unanswered questions, oldest first."""
        ...

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> dict[str, Any]:
        """Answer one question: ``{"queued", "resumed"}``."""
        ...

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> dict[str, Any]:
        """Answer what a paused run waits on and resume it."""
        ...

    async def resume(self, run_id: str, force: bool, source: str | None = None) -> str:
        """Resume a run in the serving process; returns its status.

        With ``source`` (a workflow's text) the run resumes on it: refused
        (ResumeError) when it is not the run's recorded source unless ``force``,
        and when it is another workflow's; a CompileError when it has errors.
        Raises RunOwnedError while another live process owns the run.
        """
        ...

    async def cancel(self, run_id: str) -> str:
        """Cancel a run; returns its status."""
        ...


__all__ = ["ID", "RunService", "event_json", "interaction_json", "run_json"]
