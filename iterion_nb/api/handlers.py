"""The REST handlers (tornado). One set, mounted wherever the API is served.

Errors are JSON ``{"code", "message"}`` with a proper status: 400 bad
request, 401 missing or wrong token, 404 unknown route, run or question,
409 conflict (answered already, not resumable), 413 too large, 414/431 a
URL or headers too long, 415 a body that is not labelled JSON, 422 an
answer that cannot be recorded. Whatever a client sends, the answer is a
2xx or a 4xx: a request body must be labelled ``application/json`` (or a
``+json`` type) and is parsed strictly (UTF-8, no lone surrogates, no NaN
or infinities, integers within 64 bits, at most :data:`MAX_DEPTH` levels,
no key twice in an object, no field the route does not take), and no
message carries a filesystem path or a database's text. An unexpected
failure is a 500 with a generic message, logged as one line.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import tornado.httputil
import tornado.web

from iterion_nb import safe_data
from iterion_nb.api.errlog import ERRORS
from iterion_nb.api.service import (
    ID,
    RunService,
    event_json,
    interaction_json,
    run_json,
)
from iterion_nb.dsl.diagnostics import did_you_mean
from iterion_nb.errors import (
    AlreadyAnsweredError,
    BadTextError,
    ConflictError,
    InvalidAnswerError,
    IterionError,
    LeaseLostError,
    NotFoundError,
    QuestionClosedError,
    ResumeError,
    RunOwnedError,
    StoreError,
    StoreLockedError,
    StoreReadOnlyError,
)
from iterion_nb.view.text import MAX_LIST_LIMIT

#: Request bodies larger than this are refused (answers are at most 64 KB).
MAX_BODY = 256 * 1024
#: Deepest nesting of arrays and objects accepted in a request body (that of all run data).
MAX_DEPTH = safe_data.MAX_DEPTH
#: Integers (here: a ``limit`` or an ``after``) must lie below 2**63.
INT_BOUND = 2**63
#: The longest URL (path and query) answered; beyond, 414 (ours are a few hundred bytes).
MAX_URL = 8 * 1024
#: The most header bytes answered; beyond, 431. It is also what tornado reads by default
#: (a Jupyter server's limit): the holder reads up to :data:`HEADER_READ_LIMIT` to say so.
MAX_HEADERS = 64 * 1024
#: What the holder's server reads of a request's head before it drops the connection.
HEADER_READ_LIMIT = 1024 * 1024
#: Media types a body may be labelled with, besides any ``application/…+json``.
JSON_TYPES = frozenset({"application/json"})
# an absolute path in a message: two or more segments from the root (or from ~)
_PATH = re.compile(r"(?<![\w:/.-])~?(?:/[\w.~+@%=,-]+){2,}/?")


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
    #: Media types taken as JSON besides the JSON ones (none here; see the Jupyter mount).
    lenient_body_types: frozenset[str] = frozenset()
    #: The query arguments this route reads; any other is refused (a typo must not pass
    #: for a default), and so is one given twice.
    query_args: tuple[str, ...] = ()
    #: Query arguments any route takes without reading them (Jupyter's ``token`` on its mount).
    ambient_query: frozenset[str] = frozenset()
    #: Whether a bare number (``?1733540000000``, no value) is taken and not read: what
    #: JupyterLab's ``ServerConnection`` appends to a ``cache: 'no-store'`` request.
    cache_buster = False

    def initialize(self, service: RunService, token: str | None) -> None:
        self.service = service
        self.api_token = token

    def prepare(self) -> None:
        stopping = self.settings.get("iterion_stopping")
        if stopping is not None and stopping():
            # A request on a kept-alive connection after stop(): as for a new
            # connection, nobody answers, so the client looks for the file's next holder.
            self.request.connection.close()  # type: ignore[union-attr]
            raise tornado.web.Finish()
        refused = oversize(self.request)
        if refused is not None:  # before the token: headers that long are nobody's business
            self._fail(refused)
            return
        tracker = self.settings.get("iterion_in_flight")
        if tracker is not None:
            tracker.started()
            self._tracked = tracker
        if self.api_token is None:
            return
        header = self.request.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else ""
        # as bytes: compare_digest refuses str with non-ASCII characters
        sent = given.encode("utf-8", "surrogateescape")
        if not given or not hmac.compare_digest(sent, self.api_token.encode()):
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
        if self._finished:
            return
        self.set_status(err.status)
        self.set_header("Content-Type", "application/json")
        body = {"code": err.code, "message": scrub(str(err)), **err.extra}
        self.finish(json.dumps(body, ensure_ascii=False, default=str).encode("utf-8", "replace"))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Tornado's own refusals (405, a path that is not UTF-8, …) and 500s, as JSON."""
        if status_code >= 500:
            code, message = "internal_error", "internal error (logged by the server)"
        else:
            code, message = "http_error", self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": code, "message": message}))

    def log_exception(self, typ: Any, value: BaseException | None, tb: Any) -> None:
        """One line per unexpected error, through the bounded log (never a traceback here)."""
        if isinstance(value, tornado.web.HTTPError):
            return  # a refusal (405, bad unicode in the URL): the client's business
        where = f"{self.request.method} {self.request.path[:200]}"
        ERRORS.line(f"500 {where}: {typ.__name__ if typ else 'error'}: {scrub(str(value))}")

    def reply(self, payload: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(payload, ensure_ascii=False, default=str))

    def body(self, allowed: tuple[str, ...]) -> dict[str, Any]:
        """The JSON object sent, with no field but ``allowed`` (an empty body is ``{}``).

        Raises:
            ApiError: 415 a body not labelled JSON, 413 too large, 400 not a strict
                JSON object (``bad_json``, ``too_deep``) or a field the route does
                not take (``unknown_field``, naming it and the route's fields).
        """
        raw = self.request.body
        if raw:
            check_json_type(self.request.headers.get("Content-Type"), self.lenient_body_types)
        if len(raw) > MAX_BODY:
            raise ApiError(413, "too_large", f"request body over {MAX_BODY} bytes")
        data = parse_json(raw or b"{}")
        if not isinstance(data, dict):
            raise ApiError(400, "bad_request", "request body must be a JSON object")
        check_fields(data, allowed)
        return data

    def check_query(self) -> None:
        """Refuse a query argument the route does not read, or one given more than once.

        Raises:
            ApiError: 400 ``unknown_parameter`` naming it and the route's arguments,
                or 400 ``bad_request`` for an argument given twice.
        """
        for name, values in self.request.query_arguments.items():
            if name in self.ambient_query:
                continue
            if self.cache_buster and name.isascii() and name.isdigit() and values == [b""]:
                continue
            shown = json.dumps(name, ensure_ascii=False)[:80]
            if name not in self.query_args:
                takes = ", ".join(f"'{arg}'" for arg in self.query_args) or "no query argument"
                raise ApiError(
                    400, "unknown_parameter",
                    f"unknown query argument {shown} (this route takes {takes})"
                    f"{did_you_mean(name, self.query_args)}",
                    parameter=name[:200], allowed=list(self.query_args),
                )  # fmt: skip
            if len(values) > 1:
                raise ApiError(
                    400, "bad_request", f"query argument {shown} is given {len(values)} times",
                    parameter=name[:200],
                )  # fmt: skip

    def whole_number(self, name: str, default: int, low: int = 0, high: int = INT_BOUND - 1) -> int:
        """A query argument that must be a whole number in [``low``, ``high``]."""
        text = self.get_query_argument(name, None)
        if text is None:
            return default
        text = text.strip()
        if (
            not text.isdigit() or not text.isascii() or len(text) > 19
            or not low <= int(text) <= high
        ):  # fmt: skip
            within = f"{low:,} or more" if high == INT_BOUND - 1 else f"from {low:,} to {high:,}"
            raise ApiError(400, "bad_request", f"{name} must be a whole number {within}")
        return int(text)

    async def guarded(self, action: Callable[[], Awaitable[None]], *ids: str) -> None:
        """Run ``action``, translating our errors into JSON responses."""
        try:
            self.check_query()
            for ident in ids:
                if not ID.match(ident):
                    raise ApiError(400, "bad_id", f"'{ident[:80]}' is not a valid id")
            await action()
        except ApiError as err:
            self._fail(err)
        except IterionError as err:
            refused = api_error(err)
            if refused.code == "store_refused":
                ERRORS.line(f"{self.request.method} {self.request.path[:200]}: {scrub(str(err))}")
            self._fail(refused)


def api_error(err: IterionError) -> ApiError:
    """Our error as the API's: its status, code and the fields a client needs."""
    if isinstance(err, NotFoundError):
        return ApiError(404, "not_found", str(err), kind=err.kind, key=err.key)
    if isinstance(err, AlreadyAnsweredError):
        return ApiError(409, "already_answered", str(err), existing=err.existing,
                        interaction_id=err.interaction_id)  # fmt: skip
    if isinstance(err, RunOwnedError):
        owner = {"pid": err.pid, "host": err.host, "since": err.since.isoformat(),
                 "queued": err.queued}  # fmt: skip
        return ApiError(409, "run_owned", str(err), run_id=err.run_id, owner=owner)
    if isinstance(err, LeaseLostError):
        return ApiError(409, "lease_lost", str(err), run_id=err.run_id)
    if isinstance(err, StoreReadOnlyError):  # 403: this process may only read the file
        return ApiError(403, "store_read_only", str(err))
    if isinstance(err, StoreLockedError):  # 503: try again once the file is free or served
        return ApiError(503, "store_locked", str(err), pid=err.pid)
    if isinstance(err, BadTextError):  # the request's text, refused before anything was read
        return ApiError(400, "bad_text", str(err), field=err.field)
    if isinstance(err, QuestionClosedError):  # 410 Gone: expired, or retracted by its asker
        return ApiError(410, err.ended, str(err), interaction_id=err.interaction_id,
                        reason=err.reason)  # fmt: skip
    simple: tuple[tuple[type[IterionError], int, str], ...] = (
        (ResumeError, 409, "not_resumable"),
        (ConflictError, 409, "conflict"),
        (InvalidAnswerError, 422, "invalid_answer"),
    )
    for kind, status, code in simple:
        if isinstance(err, kind):
            return ApiError(status, code, str(err))
    cause = err.__cause__
    if isinstance(err, StoreError) and cause is not None and not isinstance(cause, IterionError):
        # the database refused: its text (SQL, paths) is not for the client
        return ApiError(400, "store_refused", "the store could not apply this request")
    return ApiError(400, "bad_request", str(err))


class RunsHandler(BaseHandler):
    """``GET /api/runs?status=S&limit=N``."""

    query_args = ("status", "limit")

    async def get(self) -> None:
        async def act() -> None:
            status = self.get_query_argument("status", None)
            limit = self.whole_number("limit", 100, 1, MAX_LIST_LIMIT)
            runs = await self.service.list_runs(status, limit)
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

    query_args = ("after",)

    async def get(self, run_id: str) -> None:
        async def act() -> None:
            after = self.whole_number("after", 0)
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


class AllPendingHandler(BaseHandler):
    """``GET /api/interactions/pending``: every run's unanswered questions, oldest first."""

    async def get(self) -> None:
        async def act() -> None:
            found = await self.service.pending_all()
            self.reply({"interactions": [interaction_json(i) for i in found]})

        await self.guarded(act)


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
    """``POST /api/runs/{id}/interactions/{iid}/answer`` ``{"answer": ..., "answered_by": ...}``."""

    async def post(self, run_id: str, interaction_id: str) -> None:
        async def act() -> None:
            data = self.body(("answer", "answered_by"))
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
            data = self.body(("answers", "answer", "answered_by"))
            if "answers" in data and "answer" in data:
                raise ApiError(400, "bad_request", "give 'answers' or 'answer', not both")
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


#: ``…/resume`` with ``"force": true`` and no ``source``: there is nothing to force.
FORCE_NEEDS_SOURCE = (
    "force needs source: without it the run resumes its recorded source"
    ' (send the edited workflow as "source", with "force": true)'
)


class ResumeHandler(BaseHandler):
    """``POST /api/runs/{id}/resume`` ``{"source": "...", "force": false}``: resume it here.

    Without ``source`` the run resumes on its recorded source; with it, on that
    workflow text (``force``: even though it is not the recorded one).
    409 ``run_owned`` (naming the owner) while another live process owns it,
    409 ``not_resumable`` when its status does not allow it, or the source
    changed and ``force`` is not set, or it is another workflow's; 400
    ``bad_request`` for ``force`` without ``source``, or a source with errors.
    """

    async def post(self, run_id: str) -> None:
        async def act() -> None:
            data = self.body(("force", "source"))
            force = data.get("force", False)
            if not isinstance(force, bool):
                raise ApiError(400, "bad_request", "force must be true or false")
            source = data.get("source")
            if "source" in data and not isinstance(source, str):
                raise ApiError(400, "bad_request", "source must be a workflow's text (a string)")
            if force and source is None:
                raise ApiError(400, "bad_request", FORCE_NEEDS_SOURCE)
            self.reply({"status": await self.service.resume(run_id, force, source)})

        await self.guarded(act, run_id)


class CancelHandler(BaseHandler):
    """``POST /api/runs/{id}/cancel`` (no body, or ``{}``)."""

    async def post(self, run_id: str) -> None:
        async def act() -> None:
            self.body(())
            self.reply({"status": await self.service.cancel(run_id)})

        await self.guarded(act, run_id)


class NotFoundHandler(BaseHandler):
    """Any route the API does not have: a JSON 404 (after the token check)."""

    def initialize(self, service: Any = None, token: str | None = None) -> None:
        super().initialize(service, token)

    def prepare(self) -> None:
        super().prepare()
        if not self._finished:
            self._fail(ApiError(404, "not_found", "no such route"))


def oversize(request: tornado.httputil.HTTPServerRequest) -> ApiError | None:
    """414 for a URL over :data:`MAX_URL`, 431 for headers over :data:`MAX_HEADERS`, else None."""
    if len(request.uri or "") > MAX_URL:
        return ApiError(414, "uri_too_long", f"the URL is over {MAX_URL} bytes")
    size = sum(len(name) + len(value) + 4 for name, value in request.headers.get_all())
    if size > MAX_HEADERS:
        message = f"the request headers are over {MAX_HEADERS} bytes"
        return ApiError(431, "headers_too_large", message)
    return None


def check_json_type(header: str | None, lenient: frozenset[str] = frozenset()) -> None:
    """A body labelled JSON: ``application/json`` or ``application/…+json``, in UTF-8.

    Raises:
        ApiError: 415 ``unsupported_media_type`` saying what was sent.
    """
    media, _, params = (header or "").partition(";")
    media = media.strip().lower()
    charset = ""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    is_json = media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))
    if (is_json or media in lenient) and charset in ("", "utf-8", "utf8"):
        return
    sent = f"'{header.strip()[:80]}'" if header and header.strip() else "no Content-Type"
    raise ApiError(415, "unsupported_media_type",
                   f"a request body must be JSON in UTF-8 (Content-Type: application/json),"
                   f" not {sent}")  # fmt: skip


def check_fields(data: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse a field the route does not take (a typo must not pass for a default).

    Raises:
        ApiError: 400 ``unknown_field`` naming the first unknown field and the route's fields.
    """
    unknown = [key for key in data if key not in allowed]
    if not unknown:
        return
    takes = ", ".join(f"'{name}'" for name in allowed) if allowed else "no field"
    first = unknown[0]
    raise ApiError(
        400, "unknown_field",
        f"unknown field {json.dumps(first)[:80]} (this route takes {takes})"
        f"{did_you_mean(first, allowed)}",
        unknown=unknown[:20], allowed=list(allowed),
    )  # fmt: skip


def parse_records(raw: bytes) -> Any:
    """A store call's body: strict JSON held to what a run may record (not to typed input).

    Raises:
        ApiError: 400 ``bad_json`` or ``too_deep`` saying what is wrong.
    """
    try:
        return safe_data.loads(raw.decode("utf-8"), "request body", typed=False)
    except UnicodeDecodeError as err:
        raise ApiError(400, "bad_json", f"request body is not UTF-8 (byte {err.start})") from None
    except safe_data.DataError as err:
        raise ApiError(
            400, "too_deep" if err.code == "too_deep" else "bad_json", str(err)
        ) from None


def parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no lone surrogates, no NaN or infinities, bounded numbers and depth.

    No object may hold a key twice (``{"a": 1, "a": 2}``: which one counts is
    up to each parser, so neither does). The bounds are those of all recorded
    data (:mod:`iterion_nb.safe_data`).

    Raises:
        ApiError: 400 ``bad_json`` (or ``too_deep``) saying what is wrong.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ApiError(400, "bad_json", f"request body is not UTF-8 (byte {err.start})") from None
    try:
        return safe_data.loads(text, "request body")
    except safe_data.DataError as err:
        code = "too_deep" if err.code == "too_deep" else "bad_json"
        raise ApiError(400, code, str(err)) from None


def scrub(message: str) -> str:
    """A message without filesystem paths (shown as ``<path>``), cut to a sane length."""
    return _PATH.sub("<path>", message)[:2000]


def routes(
    service: RunService, token: str | None, prefix: str = ""
) -> list[tuple[str, type[BaseHandler], dict[str, Any]]]:
    """The API's routes under ``prefix`` (``""`` for the holder, ``/iterion`` in Jupyter)."""
    args = {"service": service, "token": token}
    seg = r"([^/]+)"
    table: list[tuple[str, type[BaseHandler]]] = [
        (r"/api/runs", RunsHandler),
        (r"/api/interactions/pending", AllPendingHandler),
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
