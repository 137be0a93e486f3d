"""The REST API's view of a session (see :class:`iterion_nb.api.service.RunService`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iterion_nb.errors import ResumeError, RunError
from iterion_nb.ir import compile_workflow
from iterion_nb.runtime.records import RUN_STATUSES, Event, Interaction, Run
from iterion_nb.session.core import SourceChangedError

if TYPE_CHECKING:
    from iterion_nb.session.core import Session


class SessionService:
    """Every REST operation, on a session: answers may resume runs here, resume runs here."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def list_runs(self, status: str | None, limit: int) -> list[Run]:
        """Runs, newest first."""
        if status is not None and status not in RUN_STATUSES:
            raise RunError(f"unknown status '{status}' (one of {', '.join(RUN_STATUSES)})")
        return await self.session.runs(status=status, limit=limit)

    async def get_run(self, run_id: str) -> Run:
        """One run."""
        return await self.session.store.get_run(run_id)

    async def events(self, run_id: str, after: int) -> list[Event]:
        """A run's events."""
        return await self.session.store.events(run_id, after=after)

    async def pending(self, run_id: str) -> list[Interaction]:
        """A run's unanswered questions."""
        await self.session.store.get_run(run_id)
        return await self.session.run(run_id).pending_questions()

    async def pending_all(self) -> list[Interaction]:
        """Every run's unanswered questions, oldest first."""
        return [i for i in await self.session.store.pending_interactions() if i.kind != "await"]

    async def interactions(self, run_id: str) -> list[Interaction]:
        """Every question of a run (not the synthetic ``await`` records)."""
        found = await self.session.store.interactions(run_id)
        return [i for i in found if i.kind != "await"]

    async def answer(
        self, run_id: str, interaction_id: str, answer: Any, answered_by: str
    ) -> dict[str, Any]:
        """Answer one question of a run."""
        outcome = await self.session.answers.answer(run_id, interaction_id, answer, answered_by)
        return outcome.to_dict()

    async def answer_human(
        self, run_id: str, answers: dict[str, Any], answered_by: str
    ) -> dict[str, Any]:
        """Answer what a paused run waits on, then resume it."""
        outcome = await self.session.answers.answer_human(run_id, answers, answered_by)
        return outcome.to_dict()

    async def resume(self, run_id: str, force: bool, source: str | None = None) -> str:
        """Resume a run in this process (on ``source``, a workflow's text, if given); its status.

        Raises:
            CompileError: ``source`` has errors (each as ``<source>:line:col``).
            ResumeError: As :meth:`Session.resume <iterion_nb.session.core.Session.resume>`;
                a changed source, not forced, says to send ``"force": true``.
        """
        workflow = None if source is None else compile_workflow(source, "<source>")
        try:
            handle = await self.session.resume(
                run_id, workflow=workflow, force=force, answered_by="api"
            )
        except SourceChangedError as err:
            said = err.refusal('send "force": true', "the source sent")
            raise ResumeError(f"{said}; nothing changed") from None
        return handle.status

    async def cancel(self, run_id: str) -> str:
        """Cancel a run."""
        return await self.session.run(run_id).cancel()
