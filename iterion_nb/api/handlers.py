"""The REST handlers (tornado). One set, mounted wherever the API is served.

Errors are JSON ``{"code", "message"}`` with a proper status: 400 bad
request, 401 missing or wrong token, 404 unknown run or question, 409
conflict (answered already, not resumable), 422 an answer that cannot be
recorded. A user mistake never becomes a 500 or a partial write.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

import tornado.web

from iterion_nb.api.service import ID, RunService, event_json, interaction_json, run_json
from iterion_nb.errors import (
    AlreadyAnsweredError,
    ConflictError,
    InvalidAnswerError,
    IterionError,
    LeaseLostError,
    NotFoundError,
    QuestionClosedError,
    ResumeError,
    RunOwnedError,
)

#: Request bodies larger than this are refused (answers are at most 64 KB).
MAX_BODY = 256 * 1024


class ApiError(Exception):
    """An HTTP error with its JSON body."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.extra = extra


class BaseHandler(tornado.web.RequestHandler):
    """JSON in and out, bearer-token auth, one error translation."""

    service: RunService
    api_token: str | None

    def initialize(self, service: RunService, token: str | None) -> None:
        self.service = service
        self.api_token = token

    def prepare(self) -> None:
        tracker = self.settings.get("iterion_in_flight")
        if tracker is not None:
            tracker.started()
            self._tracked = tracker
        if self.api_token is None:
            return
        header = self.request.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else ""
        if not given or not hmac.compare_digest(given, self.api_token):
            self._fail(ApiError(401, "unauthorized", "missing or wrong bearer token"))

    def on_finish(self) -> None:
        tracker = getattr(self, "_tracked", None)
        if tracker is not None:
            self._tracked = None
            tracker.finished()

    def on_connection_close(self) -> None:
        self.on_finish()

    def check_xsrf_cookie(self) -> None:
        """No cookies with a bearer token (the holder); otherwise tornado's XSRF check (Jupyter)."""
        if self.api_token is not None:
            return
        super().check_xsrf_cookie()

    def _fail(self, err: ApiError) -> None:
        self.set_status(err.status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": err.code, "message": str(err), **err.extra}))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason if status_code < 500 else "internal error"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": "http_error", "message": reason}))

    def reply(self, payload: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(payload, ensure_ascii=False, default=str))

    def body(self) -> dict[str, Any]:
        """The JSON object sent (400 when it is not one)."""
        if len(self.request.body) > MAX_BODY:
            raise ApiError(413, "too_large", f"request body over {MAX_BODY} bytes")
        try:
            data = json.loads(self.request.body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ApiError(400, "bad_json", f"request body is not JSON: {err}") from None
        if not isinstance(data, dict):
            raise ApiError(400, "bad_request", "request body must be a JSON object")
        return data

    async def guarded(self, action: Callable[[], Awaitable[None]], *ids: str) -> None:  # noqa: C901
        """Run ``action``, translating our errors into JSON responses."""
        try:
            for ident in ids:
                if not ID.match(ident):
                    raise ApiError(400, "bad_id", f"'{ident[:80]}' is not a valid id")
            await action()
        except ApiError as err:
            self._fail(err)
        except NotFoundError as err:
            self._fail(ApiError(404, "not_found", str(err), kind=err.kind, key=err.key))
        except AlreadyAnsweredError as err:
            self._fail(ApiError(409, "already_answered", str(err), existing=err.existing,
                                interaction_id=err.interaction_id))  # fmt: skip
        except RunOwnedError as err:
            owner = {"pid": err.pid, "host": err.host, "since": err.since.isoformat()}
            self._fail(ApiError(409, "run_owned", str(err), run_id=err.run_id, owner=owner))
        except LeaseLostError as err:
            self._fail(ApiError(409, "lease_lost", str(err), run_id=err.run_id))
        except QuestionClosedError as err:  # 410 Gone: expired, or retracted by its asker
            self._fail(ApiError(410, err.ended, str(err), interaction_id=err.interaction_id,
                                reason=err.reason))  # fmt: skip
        except ResumeError as err:
            self._fail(ApiError(409, "not_resumable", str(err)))
        except ConflictError as err:
            self._fail(ApiError(409, "conflict", str(err)))
        except InvalidAnswerError as err:
            self._fail(ApiError(422, "invalid_answer", str(err)))
        except IterionError as err:
            self._fail(ApiError(400, "bad_request", str(err)))


class RunsHandler(BaseHandler):
    """``GET /api/runs``."""

    async def get(self) -> None:
        async def act() -> None:
            status = self.get_query_argument("status", None)
            try:
                limit = int(self.get_query_argument("limit", "100"))
            except ValueError:
                raise ApiError(400, "bad_request", "limit must be a whole number") from None
            runs = await self.service.list_runs(status, max(1, min(limit, 1000)))
            self.reply({"runs": [run_json(r) for r in runs]})

        await self.guarded(act)


class RunHandler(BaseHandler):
    """``GET /api/runs/{id}``."""

    async def get(self, run_id: str) -> None:
        async def act() -> None:
            self.reply(run_json(await self.service.get_run(run_id), full=True))

        await self.guarded(act, run_id)


class EventsHandler(BaseHandler):
    """``GET /api/runs/{id}/events?after=N``."""

    async def get(self, run_id: str) -> None:
        async def act() -> None:
            try:
                after = int(self.get_query_argument("after", "0"))
            except ValueError:
                raise ApiError(400, "bad_request", "after must be a whole number") from None
            events = await self.service.events(run_id, after)
            self.reply({"events": [event_json(e) for e in events]})

        await self.guarded(act, run_id)


class PendingHandler(BaseHandler):
    """``GET /api/runs/{id}/interactions/pending``."""

    async def get(self, run_id: str) -> None:
        async def act() -> None:
            found = await self.service.pending(run_id)
            self.reply({"interactions": [interaction_json(i) for i in found]})

        await self.guarded(act, run_id)


class InteractionsHandler(BaseHandler):
    """``GET /api/runs/{id}/interactions``: every question, answered or not."""

    async def get(self, run_id: str) -> None:
        async def act() -> None:
            found = await self.service.interactions(run_id)
            self.reply({"interactions": [interaction_json(i) for i in found]})

        await self.guarded(act, run_id)


def _answered_by(data: dict[str, Any]) -> str:
    who = data.get("answered_by", "rest")
    if not isinstance(who, str) or not who or len(who) > 200:
        raise ApiError(400, "bad_request", "answered_by must be a short string")
    return who


class AnswerHandler(BaseHandler):
    """``POST /api/runs/{id}/interactions/{iid}/answer`` ``{"answer": ...}``."""

    async def post(self, run_id: str, interaction_id: str) -> None:
        async def act() -> None:
            data = self.body()
            if "answer" not in data:
                raise ApiError(400, "bad_request", "the body needs an 'answer'")
            outcome = await self.service.answer(
                run_id, interaction_id, data["answer"], _answered_by(data)
            )
            self.reply(outcome)

        await self.guarded(act, run_id, interaction_id)


class AnswerHumanHandler(BaseHandler):
    """``POST /api/runs/{id}/answer-human``: answer what a paused run waits on, resume it.

    Body: ``{"answers": {interaction_id: answer, ...}}``, or ``{"answer": ...}``
    when the run waits on exactly one question.
    """

    async def post(self, run_id: str) -> None:
        async def act() -> None:
            data = self.body()
            answers = data.get("answers")
            if answers is None and "answer" in data:
                answers = {"": data["answer"]}
            if not isinstance(answers, dict) or not answers:
                raise ApiError(400, "bad_request", "the body needs 'answers' (or 'answer')")
            for key in answers:
                if key and not ID.match(key):
                    raise ApiError(400, "bad_id", f"'{key[:80]}' is not a valid id")
            self.reply(await self.service.answer_human(run_id, answers, _answered_by(data)))

        await self.guarded(act, run_id)


class ResumeHandler(BaseHandler):
    """``POST /api/runs/{id}/resume`` ``{"force": false}``: resume the run in the serving process.

    409 ``run_owned`` (naming the owner) while another live process owns it,
    409 ``not_resumable`` when its status does not allow it.
    """

    async def post(self, run_id: str) -> None:
        async def act() -> None:
            data = self.body()
            force = data.get("force", False)
            if not isinstance(force, bool):
                raise ApiError(400, "bad_request", "force must be true or false")
            self.reply({"status": await self.service.resume(run_id, force)})

        await self.guarded(act, run_id)


class CancelHandler(BaseHandler):
    """``POST /api/runs/{id}/cancel``."""

    async def post(self, run_id: str) -> None:
        async def act() -> None:
            self.reply({"status": await self.service.cancel(run_id)})

        await self.guarded(act, run_id)


def routes(
    service: RunService, token: str | None, prefix: str = ""
) -> list[tuple[str, type[BaseHandler], dict[str, Any]]]:
    """The API's routes under ``prefix`` (``""`` for the holder, ``/iterion`` in Jupyter)."""
    args = {"service": service, "token": token}
    seg = r"([^/]+)"
    table: list[tuple[str, type[BaseHandler]]] = [
        (r"/api/runs", RunsHandler),
        (rf"/api/runs/{seg}", RunHandler),
        (rf"/api/runs/{seg}/events", EventsHandler),
        (rf"/api/runs/{seg}/interactions", InteractionsHandler),
        (rf"/api/runs/{seg}/interactions/pending", PendingHandler),
        (rf"/api/runs/{seg}/interactions/{seg}/answer", AnswerHandler),
        (rf"/api/runs/{seg}/answer-human", AnswerHumanHandler),
        (rf"/api/runs/{seg}/resume", ResumeHandler),
        (rf"/api/runs/{seg}/cancel", CancelHandler),
    ]
    return [(prefix + path, handler, args) for path, handler in table]
