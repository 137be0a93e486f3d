"""Whatever a client sends, a holder answers 2xx or 4xx with ``{code, message}``: never a 500.

A real holder process on loopback; Hypothesis generates request bodies, ids,
query arguments and headers for every route (the ``/api/store/*`` RPC
included, with records both plausible and malformed). Each route gets a
bounded number of examples so the whole file runs in seconds. The inputs of
issue 15 that crashed the API are fixed regression cases.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import typing
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal, Union
from urllib.parse import quote, unquote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from iterion_nb.api.handlers import routes
from iterion_nb.api.store_rpc import METHODS
from iterion_nb.runtime.ports import Store
from iterion_nb.store.codec import encode
from tests.jupyter_procs import stop as stop_server
from tests.jupyter_procs import wait_serving

from .holders import Raw, holder_of, start_holder, stop

#: Examples per route: a few hundred milliseconds each on loopback.
EXAMPLES = 120
STORE_EXAMPLES = 40
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
#: What a message must never show: the database's text.
SQL = re.compile(
    r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|Binder Error|Catalog Error|Conversion"
    r" Error|Parser Error|Constraint Error|Invalid Input Error|LINE \d+:)",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Raw, Path]]:
    folder = tmp_path_factory.mktemp("hostile")
    db = folder / "h.duckdb"
    proc = start_holder(db)
    raw = Raw(holder_of(db))
    try:
        yield raw, folder
    finally:
        raw.close()
        stop(proc)


def check(status: int, data: bytes, folder: Path, sent: str = "") -> Any:
    """A 2xx or 4xx, JSON, with ``{code, message}`` on errors and nothing private in them.

    A message may quote what the request itself ``sent`` (an unknown query
    argument's name, say ``?SELECT``): that is not the database's text.
    """
    assert status < 500, data[:500]
    body = json.loads(data)
    if status >= 400:
        assert isinstance(body, dict), body
        assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), body
        message = body["message"]
        assert str(folder) not in message and "/tmp/" not in message, message
        ours = message
        for quoted in re.findall(r'"([^"]+)"', message):
            if quoted in sent:
                ours = ours.replace(f'"{quoted}"', '""')
        assert not SQL.search(ours), message
    return body


# -- values -------------------------------------------------------------------------
NASTY_TEXT = ["\ud800", "\udfff", "a\ud83d", "\x00", "\x1f", "", " ", "é" * 3, "9" * 5000,
              "../../etc/passwd", "/tmp/x.duckdb", "'; DROP TABLE runs; --", "\u2028"]  # fmt: skip
TEXT = st.one_of(st.text(st.characters(exclude_categories=()), max_size=20),
                 st.sampled_from(NASTY_TEXT))  # fmt: skip
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**70), 2**70),
    st.floats(), TEXT,
)  # fmt: skip
JSON = st.recursive(
    LEAVES,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(TEXT, kids, max_size=4),
    max_leaves=12,
)


def dumps(value: Any) -> bytes:
    """JSON text as a sloppy client writes it: NaN, Infinity and surrogate escapes pass."""
    return json.dumps(value).encode()


FIXED = [
    b"", b"{}", b"[]", b"null", b"0", b'"x"', b"{not json", b"\xff\xfe", b"\xed\xa0\x80",
    b'{"answer": "\\ud800"}', b'{"answer": ' + b"9" * 5000 + b"}",
    b'{"answer": 1e400}', b'{"answer": NaN}', b'{"answer": -Infinity}',
    b"[" * 1000 + b"]" * 1000, b'{"a":' * 1000 + b"1" + b"}" * 1000,
    b"[" * 100_000, b'{"answer": "x"}\x00', b"\xef\xbb\xbf{}",
]  # fmt: skip
RAW_BODY = st.one_of(
    st.sampled_from(FIXED),
    st.binary(max_size=64),
    st.integers(1, 3000).map(lambda n: b'{"args": ' + b"[" * n + b"]" * n + b"}"),
    st.integers(4000, 6000).map(lambda n: b'{"answer": -' + b"7" * n + b"}"),
)


def body_of(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return st.one_of(RAW_BODY, JSON.map(dumps), shape.map(dumps))


def segment(ids: list[str]) -> st.SearchStrategy[str]:
    """A path segment: a known id, or any text percent-encoded (surrogates as bad UTF-8)."""
    return st.one_of(
        st.sampled_from(ids), TEXT.map(lambda t: quote(t, safe="", errors="surrogatepass") or "x")
    )


QUERY = st.one_of(
    st.just(""), TEXT.map(lambda t: quote(t, safe="", errors="surrogatepass")),
    st.sampled_from(["-1", "0", "1", "9" * 30, "9" * 5000, "1e3", "nan", "%205", "%00", "%FF"]),
)  # fmt: skip
ANSWER_SHAPE = st.fixed_dictionaries({}, optional={"answer": JSON, "answered_by": JSON})
HUMAN_SHAPE = st.fixed_dictionaries(
    {}, optional={"answers": st.one_of(JSON, st.dictionaries(TEXT, JSON, max_size=3)),
                  "answer": JSON, "answered_by": JSON},
)  # fmt: skip
RESUME_SHAPE = st.fixed_dictionaries({}, optional={"force": JSON})


# -- the run routes ---------------------------------------------------------------------
RUNS = ["r1", "nope"]
QUESTIONS = [f"q{n}" for n in range(20)]


@FUZZ
@given(status=QUERY, limit=QUERY)
def test_list_runs(served: tuple[Raw, Path], status: str, limit: str) -> None:
    raw, folder = served
    check(*raw.send("GET", f"/api/runs?status={status}&limit={limit}"), folder)


@FUZZ
@given(run=segment(RUNS), after=QUERY, tail=st.sampled_from(
    ["", "/events", "/interactions", "/interactions/pending"]))  # fmt: skip
def test_run_reads(served: tuple[Raw, Path], run: str, after: str, tail: str) -> None:
    raw, folder = served
    check(*raw.send("GET", f"/api/runs/{run}{tail}?after={after}"), folder)


@FUZZ
@given(query=QUERY)
@example(query="SELECT")  # an argument named like SQL is the client's text, not the database's
def test_every_runs_pending_questions(served: tuple[Raw, Path], query: str) -> None:
    raw, folder = served
    sent = unquote(query, errors="replace")  # the message names it decoded
    answer = check(*raw.send("GET", f"/api/interactions/pending?{query}"), folder, sent)
    if query:  # the route reads no query argument
        assert answer["code"] == "unknown_parameter", answer
    else:  # the seeded run's questions, each naming its run
        assert {q["run_id"] for q in answer["interactions"]} == {"r1"}, answer


@FUZZ
@given(run=segment(RUNS), question=segment(QUESTIONS), body=body_of(ANSWER_SHAPE))
def test_answer(served: tuple[Raw, Path], run: str, question: str, body: bytes) -> None:
    raw, folder = served
    check(*raw.send("POST", f"/api/runs/{run}/interactions/{question}/answer", body), folder)


@FUZZ
@given(run=segment(RUNS), body=body_of(HUMAN_SHAPE))
def test_answer_human(served: tuple[Raw, Path], run: str, body: bytes) -> None:
    raw, folder = served
    check(*raw.send("POST", f"/api/runs/{run}/answer-human", body), folder)


@FUZZ
@given(run=segment(RUNS), body=body_of(RESUME_SHAPE),
       verb=st.sampled_from(["resume", "cancel"]))  # fmt: skip
def test_resume_and_cancel(served: tuple[Raw, Path], run: str, body: bytes, verb: str) -> None:
    raw, folder = served
    check(*raw.send("POST", f"/api/runs/{run}/{verb}", body), folder)


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
    path=st.one_of(
        st.sampled_from(["/", "/api", "/api/", "/api/runs/", "/api/store", "/api/store/",
                         "/api/store/close", "/api/store/__init__", "/api/store/Create_run",
                         "/api/runs/r1/nope", "/favicon.ico", "//", "/api/runs/r1/"]),
        TEXT.map(lambda t: "/" + quote(t, safe="/", errors="surrogatepass")),
    ),
    # any header value HTTP allows (visible latin-1, spaces); control characters are below
    token=st.one_of(st.none(), st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                                     exclude_characters="\x7f"), max_size=40)),
)  # fmt: skip
def test_any_route_any_method_any_token(
    served: tuple[Raw, Path], method: str, path: str, token: str | None
) -> None:
    raw, folder = served
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    status, data = raw.send(method, path, b"{}", headers=headers, auth=token is None)
    if method == "HEAD":
        assert status < 500
        return
    check(status, data, folder)


# -- the store RPC -----------------------------------------------------------------------
IDS = st.sampled_from(["r1", "r2", "q1", "q2", "ask", "x" * 300, "a\x1fb"]) | TEXT
TIMES = st.one_of(
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=14))])),
    st.datetimes(),  # naive
)


def plausible(hint: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values that mostly fit an annotation (so calls reach the store), sometimes not."""
    origin = typing.get_origin(hint)
    if hint is Any or depth > 4:
        return JSON
    if origin is Literal:
        return st.sampled_from(typing.get_args(hint)) | TEXT
    if origin in (Union, __import__("types").UnionType):
        return st.one_of(*(plausible(h, depth + 1) for h in typing.get_args(hint)))
    if origin in (list, tuple):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return st.lists(plausible(args[0] if args else Any, depth + 1), max_size=3)
    if origin is dict:
        return st.dictionaries(TEXT, JSON, max_size=3)
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        fields = {f.name: plausible(hints[f.name], depth + 1) for f in dataclasses.fields(hint)}
        return st.fixed_dictionaries(fields).map(lambda kw: hint(**kw))  # type: ignore[operator]
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: IDS, int: st.integers(-5, 5) | st.integers(), float: st.floats(),
        bool: st.booleans(), datetime: TIMES, type(None): st.none(),
    }  # fmt: skip
    return simple.get(hint, JSON) | JSON


def rpc_body(method: str) -> st.SearchStrategy[bytes]:
    if method == "write_batch":
        event = st.tuples(IDS, IDS, st.one_of(JSON.map(json.dumps), TEXT), IDS, IDS)
        point = st.tuples(IDS, st.dictionaries(TEXT, JSON, max_size=2), IDS, st.booleans())
        rows = st.tuples(
            st.lists(event.map(list), max_size=3), st.lists(point.map(list), max_size=2)
        )
        shape = st.fixed_dictionaries({"args": rows})
    else:
        spec = getattr(Store, method)
        hints = typing.get_type_hints(spec)
        params = [p for p in __import__("inspect").signature(spec).parameters if p != "self"]
        values = {p: plausible(hints.get(p, Any)) for p in params}
        shape = st.fixed_dictionaries(
            {"args": st.just([]), "kwargs": st.fixed_dictionaries({}, optional=values)}
        )
    plain = shape.map(lambda v: json.dumps(encode(v)).encode())
    return st.one_of(plain, plain, RAW_BODY, JSON.map(dumps), st.builds(_mangled, JSON, JSON))


def _mangled(a: Any, b: Any) -> bytes:
    """Records with wrong or missing fields, times that are not times."""
    records = ["Run", "Interaction", "Claimant", "RunBundle", "Event", "Nope", 5]
    return dumps({"args": [{"__record": records[len(str(a)) % len(records)], "id": a},
                           {"__time": b}, {"__record": "Run", "created_at": {"__time": "x"}}],
                  "kwargs": {"owner": {"__record": "Claimant", "pid": a}}})  # fmt: skip


@pytest.mark.parametrize("method", METHODS)
def test_store_rpc(served: tuple[Raw, Path], method: str) -> None:
    raw, folder = served

    @settings(FUZZ, max_examples=STORE_EXAMPLES)
    @given(body=rpc_body(method))
    def one(body: bytes) -> None:
        check(*raw.send("POST", f"/api/store/{method}", body), folder)

    one()
    # still a holder, still answering, after whatever that was
    status, listed = raw.json("GET", "/api/runs?limit=1000")
    assert status == 200 and isinstance(listed["runs"], list), listed


# -- fixed regression cases (issue 15) ----------------------------------------------------------
NOW = {"__time": "2026-12-01T08:00:00+00:00"}
RUN = {"__record": "Run", "id": "fresh", "workflow": "w", "source_hash": "h",
       "status": "running", "created_at": NOW, "updated_at": NOW}  # fmt: skip
CRASHERS: dict[str, tuple[str, str, bytes, int, str]] = {
    "lone surrogate answer": ("POST", "/api/runs/r1/interactions/q0/answer",
                              b'{"answer": "\\ud800"}', 400, "bad_json"),
    "lone surrogate answered_by": ("POST", "/api/runs/r1/interactions/q0/answer",
                                   b'{"answer": "x", "answered_by": "\\udfff"}', 400, "bad_json"),
    "5,000-digit integer": ("POST", "/api/runs/r1/interactions/q0/answer",
                            b'{"answer": ' + b"9" * 5000 + b"}", 400, "bad_json"),
    "1e400": ("POST", "/api/runs/r1/interactions/q0/answer", b'{"answer": 1e400}', 400,
              "bad_json"),
    "NaN": ("POST", "/api/runs/r1/interactions/q0/answer", b'{"answer": NaN}', 400, "bad_json"),
    "1,000-deep nesting": ("POST", "/api/runs/r1/interactions/q0/answer",
                           b'{"answer": ' + b"[" * 1000 + b"]" * 1000 + b"}", 400, "too_deep"),
    "100,000-deep nesting": ("POST", "/api/store/get_run", b"[" * 100_000, 400, "too_deep"),
    "invalid UTF-8": ("POST", "/api/runs/r1/resume", b'{"force": "\xff"}', 400, "bad_json"),
    "run id not UTF-8": ("GET", "/api/runs/%ED%A0%80", b"", 400, "http_error"),
    "after with 5,000 digits": ("GET", "/api/runs/r1/events?after=" + "9" * 5000, b"", 400,
                                "bad_request"),
    "after beyond 64 bits": ("GET", "/api/runs/r1/events?after=" + "9" * 19, b"", 400,
                             "bad_request"),
    "create_run with a string for a time": (
        "POST", "/api/store/create_run",
        json.dumps({"args": [{**RUN, "created_at": "yesterday"}]}).encode(), 400, "bad_request"),
    "create_run with an unknown record": (
        "POST", "/api/store/create_run",
        json.dumps({"args": [{**RUN, "__record": "Nope"}]}).encode(), 400, "bad_request"),
    "create_run with a missing field": (
        "POST", "/api/store/create_run",
        json.dumps({"args": [{k: v for k, v in RUN.items() if k != "workflow"}]}).encode(),
        400, "bad_request"),
    "create_run with a list for vars": (
        "POST", "/api/store/create_run",
        json.dumps({"args": [{**RUN, "vars": [1]}]}).encode(), 400, "bad_request"),
    "create_run with a naive time": (
        "POST", "/api/store/create_run",
        json.dumps({"args": [{**RUN, "created_at": {"__time": "2026-01-01T00:00:00"}}]}).encode(),
        400, "bad_request"),
    "create_run with an unknown status": (
        "POST", "/api/store/create_run",
        json.dumps({"args": [{**RUN, "status": "weird"}]}).encode(), 400, "bad_request"),
    "create_run with a U+0000 id": (
        "POST", "/api/store/create_run",
        json.dumps({"args": [{**RUN, "id": "a\x00b"}]}).encode(), 400, "bad_request"),
    "a time that is not one": ("POST", "/api/store/events",
                               b'{"args": ["r1"], "kwargs": {"after": {"__time": "x"}}}', 400,
                               "bad_request"),
    # once refused by the database (store_refused), now by the call's check
    "events limit -1": ("POST", "/api/store/events",
                        b'{"args": ["r1"], "kwargs": {"limit": -1}}', 400, "bad_request"),
    "a keyword the method has not": ("POST", "/api/store/get_run",
                                     b'{"args": ["r1"], "kwargs": {"x": 1}}', 400, "bad_request"),
    "an unknown route": ("GET", "/nope", b"", 404, "not_found"),
    "an unknown store method": ("POST", "/api/store/close", b"{}", 404, "not_found"),
    "a method the route has not": ("DELETE", "/api/runs", b"", 405, "http_error"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CRASHERS))
def test_crashers_of_issue_15_are_4xx(served: tuple[Raw, Path], name: str) -> None:
    raw, folder = served
    method, path, body, status, code = CRASHERS[name]
    got, data = raw.send(method, path, body or None)
    answer = check(got, data, folder)
    assert (got, answer["code"]) == (status, code), answer


@pytest.mark.parametrize("limit", ["0", "10001", "-1", "99999999999999999999"])
def test_a_limit_outside_what_the_list_returns_is_refused(
    served: tuple[Raw, Path], limit: str
) -> None:
    """Once 0 read as 1 and 5,000 as 1,000, silently; `runs list --limit` allows 1 to 10,000."""
    raw, folder = served
    got, data = raw.send("GET", f"/api/runs?limit={limit}")
    answer = check(got, data, folder)
    assert (got, answer["code"]) == (400, "bad_request"), answer
    assert answer["message"] == "limit must be a whole number from 1 to 10,000"
    status, listed = raw.json("GET", "/api/runs?limit=10000")
    assert status == 200 and isinstance(listed["runs"], list), listed


@pytest.mark.parametrize(("query", "code", "says"), [
    ("limt=1", "unknown_parameter",
     "unknown query argument \"limt\" (this route takes 'status', 'limit'); did you mean 'limit'?"),
    ("limit=1&limit=5000", "bad_request", "query argument \"limit\" is given 2 times"),
    ("status=running&status=failed", "bad_request", "query argument \"status\" is given 2 times"),
    ("token=abc", "unknown_parameter", "unknown query argument \"token\""),
    ("1733540000000", "unknown_parameter", "unknown query argument \"1733540000000\""),
])  # fmt: skip
def test_a_query_argument_the_route_does_not_read_or_gives_twice_is_refused(
    served: tuple[Raw, Path], query: str, code: str, says: str
) -> None:
    """Once `?limt=1` listed 100 runs and `?limit=1&limit=5000` the last one given, silently."""
    raw, folder = served
    got, data = raw.send("GET", f"/api/runs?{query}")
    answer = check(got, data, folder)
    assert (got, answer["code"]) == (400, code), answer
    assert answer["message"].startswith(says), answer
    got, data = raw.send("GET", "/api/runs/r1/events?after=0&afterr=3")
    answer = check(got, data, folder)
    assert (got, answer["code"], answer["allowed"]) == (400, "unknown_parameter", ["after"])
    got, data = raw.send("GET", "/api/runs/r1/interactions/pending?x=1")
    assert "this route takes no query argument" in check(got, data, folder)["message"]


def test_unknown_routes_are_json_404_after_the_token_check(served: tuple[Raw, Path]) -> None:
    raw, _ = served
    status, data = raw.send("GET", "/no/such/route", auth=False)
    assert (status, json.loads(data)["code"]) == (401, "unauthorized")
    status, data = raw.send("GET", "/no/such/route")
    assert (status, json.loads(data)) == (404, {"code": "not_found", "message": "no such route"})


def test_a_token_with_non_ascii_characters_is_just_wrong(served: tuple[Raw, Path]) -> None:
    raw, _ = served
    status, data = raw.send("GET", "/api/runs", headers={"Authorization": "Bearer é\xff"})
    assert (status, json.loads(data)["code"]) == (401, "unauthorized")


def test_a_request_that_is_not_http_gets_400_and_the_api_goes_on(served: tuple[Raw, Path]) -> None:
    raw, _ = served
    # a control character in a header is not HTTP: tornado answers a bare 400 and closes
    status, data = raw.send("GET", "/api/runs", headers={"X-Junk": "a\x1fb"})
    assert (status, data) == (400, b"")
    status, body = raw.json("GET", "/api/runs")
    assert status == 200 and body["runs"]


def test_nothing_was_written_by_refused_requests(served: tuple[Raw, Path]) -> None:
    raw, _ = served
    status, body = raw.json("GET", "/api/runs/r1")
    assert status == 200 and body["id"] == "r1"


def test_every_route_is_fuzzed() -> None:
    served = {path for path, _, _ in routes(None, None)}  # type: ignore[arg-type]
    assert len(served) == 10  # the run routes above cover each of them


# -- the holder's own logging ------------------------------------------------------------------
def test_a_holder_whose_stderr_nobody_reads_keeps_answering(tmp_path: Path) -> None:
    import subprocess

    db = tmp_path / "h.duckdb"
    # stderr: a pipe this test never reads, filled to the brim by the holder itself
    proc = start_holder(db, mode="faulty", stderr=subprocess.PIPE)
    raw = Raw(holder_of(db), timeout=5)
    try:
        started = time.monotonic()
        for _ in range(1000):  # each a 500 that is logged: once 64 KB of tracebacks
            status, data = raw.send("GET", "/api/runs")
            assert (status, json.loads(data)["code"]) == (500, "internal_error")
        took = time.monotonic() - started
        status, body = raw.json("GET", "/api/runs/r1")
        assert status == 200 and body["id"] == "r1"
    finally:
        raw.close()
        stop(proc)
    assert took < 20


def test_each_error_is_one_line_without_a_traceback_and_rate_limited(tmp_path: Path) -> None:

    db = tmp_path / "h.duckdb"
    with (tmp_path / "stderr.txt").open("w") as sink:
        proc = start_holder(db, mode="faulty-log", stderr=sink)
        raw = Raw(holder_of(db))
        try:
            for _ in range(3):
                assert raw.send("GET", "/api/runs")[0] == 500
            for _ in range(300):  # a burst: most of it is dropped, and counted
                raw.send("GET", "/api/runs")
            time.sleep(1.0)
            assert raw.send("GET", "/api/runs")[0] == 500
            time.sleep(0.5)
        finally:
            raw.close()
            stop(proc)
    lines = (tmp_path / "stderr.txt").read_text().splitlines()
    assert "Traceback" not in "\n".join(lines)
    assert lines[0] == "500 GET /api/runs: RuntimeError: boom in <path>: SELECT * FROM runs"
    assert 20 <= len(lines) <= 30, lines  # the burst allowance, then about 5 a second
    # each dropped line is counted on the next line written: none goes unsaid (how many a
    # line carries depends on how fast the burst went)
    dropped = [
        int(m.group(1))
        for m in map(re.compile(r"\((\d+) earlier lines dropped\)$").search, lines)
        if m
    ]
    assert dropped and len(lines) + sum(dropped) == 3 + 300 + 1, lines


def test_a_request_the_database_refuses_is_store_refused_without_its_text(
    tmp_path: Path,
) -> None:
    """A checked request the database still refuses: 400 ``store_refused``, the SQL logged only.

    The holder's database has lost the table that events are read from, as a
    damaged file or a bug would leave it; runs, in another table, still read.
    """
    db = tmp_path / "h.duckdb"
    with (tmp_path / "stderr.txt").open("w") as sink:
        proc = start_holder(db, mode="refusing", stderr=sink)
        raw = Raw(holder_of(db))
        try:
            refused = {
                "a route": raw.send("GET", "/api/runs/r1/events"),
                "a store call": raw.send("POST", "/api/store/events", b'{"args": ["r1"]}'),
            }
            status, run = raw.json("GET", "/api/runs/r1")
            time.sleep(0.5)  # the error log is written by its own thread
        finally:
            raw.close()
            stop(proc)
    for name, (got, data) in refused.items():
        body = check(got, data, tmp_path)
        assert (got, body.get("code")) == (400, "store_refused"), (name, got, body)
        assert "could not apply" in body["message"] and "gone" not in body["message"], body
    assert status == 200 and run["status"] == "paused_waiting_human"
    logged = (tmp_path / "stderr.txt").read_text()
    # each request's line has the database's own words for whoever runs the holder (path cut)
    for request in ("GET /api/runs/r1/events:", "POST /api/store/events:"):
        assert f"{request} the run store <path> failed: Catalog Error" in logged, logged
    assert str(tmp_path) not in logged and "Traceback" not in logged, logged


# -- text, fields, media types, heads (the hostile review) ---------------------------------
TEXTS_RUN = "texts"


@pytest.fixture(scope="module")
def texts(served: tuple[Raw, Path]) -> Raw:
    """The holder, with a run of its own whose questions no fuzzer above answers."""
    raw, _ = served
    at = {"__time": datetime.now(UTC).isoformat()}
    run = {**RUN, "id": TEXTS_RUN, "status": "paused_waiting_human", "created_at": at,
           "updated_at": at}  # fmt: skip
    status, data = raw.send("POST", "/api/store/create_run", json.dumps({"args": [run]}).encode())
    assert status == 200, data
    return raw


def new_question(raw: Raw, iid: str, options: tuple[str, ...] = ()) -> str:
    """Add a pending async question to the texts run (through the store RPC)."""
    from iterion_nb.runtime.records import Interaction, Option

    question = Interaction(
        iid, TEXTS_RUN, "ask", "async", (f"{iid}?",), datetime.now(UTC),
        options=tuple(Option(o, o.upper()) for o in options),
    )  # fmt: skip
    body = json.dumps(encode({"args": [question], "kwargs": {}})).encode()
    status, data = raw.send("POST", "/api/store/add_interaction", body)
    assert status == 200, data
    return iid


def recorded(raw: Raw, iid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The question as the API lists it, and the ``interaction_answered`` events naming it."""
    status, listed = raw.json("GET", f"/api/runs/{TEXTS_RUN}/interactions")
    assert status == 200
    (question,) = [q for q in listed["interactions"] if q["id"] == iid]
    status, events = raw.json("GET", f"/api/runs/{TEXTS_RUN}/events")
    answered = [
        e for e in events["events"]
        if e["type"] == "interaction_answered" and e["data"]["interaction_id"] == iid
    ]  # fmt: skip
    return question, answered


def assert_nothing_recorded(raw: Raw, iid: str) -> None:
    question, answered = recorded(raw, iid)
    assert question["answered_at"] is None and question["answers"] is None, question
    assert question["answered_by"] is None and answered == []


BAD_TEXT: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (body, field named, what the message says)
    "NUL in the answer": ({"answer": "a\x00b"}, "answer", "U+0000"),
    "NUL alone": ({"answer": "\x00"}, "answer", "U+0000"),
    "escape sequence": ({"answer": "\x1b[31mred"}, "answer", "U+001B"),
    "form feed": ({"answer": "a\x0cb"}, "answer", "U+000C"),
    "NUL in an object": ({"answer": {"note": "ok", "more": "x\x00"}}, "answer.more", "U+0000"),
    "control in a list": ({"answer": ["ok", "\x07"]}, "answer[1]", "U+0007"),
    "NUL in a key": ({"answer": {"k\x00": 1}}, "a key of answer", "U+0000"),
    "NUL in answered_by": ({"answer": "x", "answered_by": "bob\x00"}, "answered_by", "U+0000"),
    "newline in answered_by": ({"answer": "x", "answered_by": "bob\nadmin"}, "answered_by",
                               "U+000A"),
    "tab in answered_by": ({"answer": "x", "answered_by": "\tbob"}, "answered_by", "U+0009"),
    "DEL in answered_by": ({"answer": "x", "answered_by": "bob\x7f"}, "answered_by", "U+007F"),
    "C1 in answered_by": ({"answer": "x", "answered_by": "bob\x9b"}, "answered_by", "U+009B"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD_TEXT))
def test_control_characters_in_an_answer_are_refused_and_nothing_is_recorded(
    texts: Raw, name: str
) -> None:
    body, field, said = BAD_TEXT[name]
    iid = new_question(texts, f"bad-text-{list(BAD_TEXT).index(name)}")
    path = f"/api/runs/{TEXTS_RUN}/interactions/{iid}/answer"
    status, data = texts.send("POST", path, json.dumps(body).encode())
    got = json.loads(data)
    assert (status, got["code"], got["field"]) == (400, "bad_text", field), got
    assert got["message"].startswith(f"{field} holds ") and said in got["message"], got
    assert_nothing_recorded(texts, iid)


def test_an_answer_may_hold_tabs_and_line_breaks(texts: Raw) -> None:
    iid = new_question(texts, "good-text")
    answer = {"text": "line 1\r\n\tline 2\n", "sign": "é \u0085 \x7f ok"}
    status, outcome = texts.json(
        "POST", f"/api/runs/{TEXTS_RUN}/interactions/{iid}/answer",
        {"answer": answer, "answered_by": "Zoë (review)"},
    )  # fmt: skip
    assert status == 200 and outcome["queued"] is True, outcome
    question, answered = recorded(texts, iid)
    assert (question["answers"], question["answered_by"]) == (answer, "Zoë (review)")
    assert len(answered) == 1


def test_answer_human_refuses_control_characters_before_anything(texts: Raw) -> None:
    iid = new_question(texts, "human-bad-text")
    path = f"/api/runs/{TEXTS_RUN}/answer-human"
    status, got = texts.json("POST", path, {"answers": {iid: "ok\x00"}})
    assert (status, got["code"], got["field"]) == (400, "bad_text", f'answers["{iid}"]'), got
    status, got = texts.json("POST", path, {"answer": "fine", "answered_by": "x\x1f"})
    assert (status, got["code"], got["field"]) == (400, "bad_text", "answered_by"), got
    assert_nothing_recorded(texts, iid)


UNKNOWN_FIELDS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    # route: (path, body with one unknown field, the fields the route takes)
    "answer": ("/api/runs/texts/interactions/{iid}/answer",
               {"answer": "typo", "answerd_by": "alice"}, ["answer", "answered_by"]),
    "answer-human": ("/api/runs/texts/answer-human", {"answers": {"{iid}": "x"}, "by": "alice"},
                     ["answers", "answer", "answered_by"]),
    "resume": ("/api/runs/texts/resume", {"forse": True}, ["force", "source"]),
    "cancel": ("/api/runs/texts/cancel", {"reason": "because"}, []),
    "store rpc": ("/api/store/get_run", {"args": ["texts"], "kwarg": {}}, ["args", "kwargs"]),
}  # fmt: skip


@pytest.mark.parametrize("route", list(UNKNOWN_FIELDS))
def test_an_unknown_body_field_is_refused_naming_it_and_the_fields_taken(
    texts: Raw, route: str
) -> None:
    template, body, allowed = UNKNOWN_FIELDS[route]
    iid = new_question(texts, f"typo-{route.replace(' ', '-')}")
    path = template.format(iid=iid)
    payload = json.dumps(body).replace("{iid}", iid).encode()
    status, data = texts.send("POST", path, payload)
    got = json.loads(data)
    (unknown,) = set(body) - set(allowed)
    assert (status, got["code"]) == (400, "unknown_field"), got
    assert (got["unknown"], got["allowed"]) == ([unknown], allowed)
    assert f'unknown field "{unknown}"' in got["message"]
    for name in allowed:
        assert f"'{name}'" in got["message"]
    assert_nothing_recorded(texts, iid)
    status, run = texts.json("GET", f"/api/runs/{TEXTS_RUN}")
    assert run["status"] == "paused_waiting_human"  # the cancel with a reason did not cancel


def test_a_typo_gets_a_suggestion(texts: Raw) -> None:
    iid = new_question(texts, "typo-hint")
    status, got = texts.json(
        "POST", f"/api/runs/{TEXTS_RUN}/interactions/{iid}/answer",
        {"answer": "formal", "answerd_by": "alice"},
    )  # fmt: skip
    assert status == 400 and "did you mean 'answered_by'?" in got["message"], got


DUPLICATES = [
    b'{"answer": "a", "answer": "b"}',
    b'{"answer": "a", "answered_by": "x", "answered_by": "y"}',
    b'{"answer": {"k": 1, "k": 2}}',
    b'{"answer": [{"deep": {"k": 1, "k": 1}}]}',
]


@pytest.mark.parametrize("body", DUPLICATES)
def test_a_key_twice_in_an_object_is_refused(texts: Raw, body: bytes) -> None:
    iid = new_question(texts, f"twice-{DUPLICATES.index(body)}")
    status, data = texts.send("POST", f"/api/runs/{TEXTS_RUN}/interactions/{iid}/answer", body)
    got = json.loads(data)
    assert (status, got["code"]) == (400, "bad_json"), got
    assert "repeats the key" in got["message"]
    assert_nothing_recorded(texts, iid)


REFUSED_TYPES = [
    "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "application/xml", "json",
    "application/json; charset=latin-1", "",
]  # fmt: skip


@pytest.mark.parametrize("content_type", REFUSED_TYPES)
def test_a_body_not_labelled_json_is_415(texts: Raw, content_type: str) -> None:
    iid = new_question(texts, f"type-{REFUSED_TYPES.index(content_type)}")
    body = json.dumps({"answer": "formal"}).encode()
    path = f"/api/runs/{TEXTS_RUN}/interactions/{iid}/answer"
    if content_type:
        status, data = texts.send("POST", path, body, headers={"Content-Type": content_type})
    else:  # no Content-Type at all (http.client adds none when told nothing)
        status, data = _without_content_type(texts, path, body)
    got = json.loads(data)
    if content_type.startswith("multipart/"):  # tornado parses it first: not multipart, 400
        assert (status, got["code"]) == (400, "http_error"), got
    else:
        assert (status, got["code"]) == (415, "unsupported_media_type"), got
        assert "application/json" in got["message"]
    assert_nothing_recorded(texts, iid)


def _without_content_type(raw: Raw, path: str, body: bytes | None) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection(raw.host, raw.port, timeout=10)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Authorization", f"Bearer {raw.token}")
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


JSON_TYPES = ["application/json; charset=UTF-8", "Application/JSON", "application/vnd.api+json"]


@pytest.mark.parametrize("content_type", JSON_TYPES)
def test_json_media_types_are_taken(texts: Raw, content_type: str) -> None:
    iid = new_question(texts, f"json-type-{JSON_TYPES.index(content_type)}")
    body = json.dumps({"answer": "formal"}).encode()
    path = f"/api/runs/{TEXTS_RUN}/interactions/{iid}/answer"
    status, data = texts.send("POST", path, body, headers={"Content-Type": content_type})
    assert status == 200, data
    assert recorded(texts, iid)[0]["answers"] == "formal"


def test_an_empty_body_needs_no_content_type(texts: Raw) -> None:
    status, data = _without_content_type(texts, "/api/runs/nope/cancel", None)
    assert (status, json.loads(data)["code"]) == (404, "not_found")  # past the body checks


@pytest.mark.parametrize(("path", "headers", "status", "code"), [
    ("/api/runs?status=" + "x" * 100_000, {}, 414, "uri_too_long"),
    ("/api/runs/" + "r" * 9000, {}, 414, "uri_too_long"),
    ("/nope?" + "x" * 70_000, {}, 414, "uri_too_long"),
    ("/api/store/hello?nonce=" + "0" * 100_000, {}, 414, "uri_too_long"),
    ("/api/runs", {"X-Pad": "p" * 100_000}, 431, "headers_too_large"),
    ("/api/runs", {f"X-Pad-{n}": "p" * 1000 for n in range(80)}, 431, "headers_too_large"),
])  # fmt: skip
def test_a_long_url_or_long_headers_get_a_json_414_or_431(
    texts: Raw, path: str, headers: dict[str, str], status: int, code: str
) -> None:
    got, data = texts.send("GET", path, headers=headers)
    body = json.loads(data)
    assert (got, body["code"]) == (status, code), body
    assert isinstance(body["message"], str)
    assert texts.json("GET", "/api/runs?limit=1")[0] == 200


def test_a_head_over_a_megabyte_is_dropped_as_documented(texts: Raw) -> None:
    """Beyond HEADER_READ_LIMIT tornado closes the connection before any handler runs."""
    import http.client

    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        texts.send("GET", "/api/runs", headers={"X-Pad": "p" * (1024 * 1024 + 10)})
    assert texts.json("GET", "/api/runs?limit=1")[0] == 200  # and the holder goes on


def test_a_bad_status_filter_lists_the_statuses(texts: Raw) -> None:
    from iterion_nb.runtime.records import RUN_STATUSES

    body = json.dumps({"args": [], "kwargs": {"status": "weird"}}).encode()
    status, data = texts.send("POST", "/api/store/list_runs", body)
    got = json.loads(data)
    assert (status, got["code"]) == (400, "bad_request"), got
    assert "Optional" not in got["message"] and "Literal" not in got["message"]
    assert got["message"].startswith("list_runs: status: expects one of 'running'")
    assert all(f"'{s}'" in got["message"] for s in RUN_STATUSES) and got["message"].endswith(
        "or null"
    )
    status, got = texts.json("GET", "/api/runs?status=weird")
    assert (status, got["code"]) == (400, "bad_request")
    assert all(s in got["message"] for s in RUN_STATUSES)


@pytest.mark.parametrize(
    ("method", "kwargs", "said"),
    [
        ("list_runs", {"limit": -1}, "list_runs: limit must be a whole number from 1 to"),
        ("list_runs", {"limit": 0}, "list_runs: limit must be a whole number from 1 to"),
        ("list_runs", {"limit": 10**30}, "list_runs: limit must be a whole number from 1 to"),
        ("events", {"run_id": "r1", "after": -5}, "events: after must be a whole number from 0"),
        ("events", {"run_id": "r1", "limit": -1}, "events: limit must be a whole number from 0"),
    ],
)
def test_a_count_out_of_range_is_refused_before_the_store_sees_it(
    texts: Raw, method: str, kwargs: dict[str, int], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """It reached the database (LIMIT -1), whose own words the holder logged as an error."""
    body = json.dumps({"args": [], "kwargs": kwargs}).encode()
    status, data = texts.send("POST", f"/api/store/{method}", body)
    got = json.loads(data)
    assert (status, got["code"]) == (400, "bad_request"), got
    assert got["message"].startswith(said), got
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


# -- the same checks under a Jupyter server (its own HTTP server, its own limits) -------------
@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Raw, dict[str, str]]]:
    """A real Jupyter server with the extension, its store seeded with run r1 and q1…q9."""
    import asyncio
    import os
    import secrets
    import socket
    import subprocess
    import sys

    from iterion_nb.runtime.records import Interaction, Run
    from iterion_nb.store import open_duckdb_store
    from iterion_nb.store.holder_file import HolderInfo

    root = tmp_path_factory.mktemp("jupyter")
    db = root / "store.duckdb"
    at = datetime.now(UTC)

    async def seed() -> None:
        store = open_duckdb_store(db)
        await store.create_run(Run("r1", "w", "h", "paused_waiting_human", at, at))
        for n in range(1, 10):
            await store.add_interaction(Interaction(f"q{n}", "r1", "ask", "async", ("Q?",), at))
        await store.close()

    asyncio.run(seed())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    token = secrets.token_hex(16)
    env = {**os.environ, "ITERION_NB_STORE": str(db), "HOME": str(root),
           "JUPYTER_CONFIG_DIR": str(root / ".jupyter")}  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0", "--allow-root"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    raw = Raw(HolderInfo(server.pid, url, token))
    try:
        wait_serving(url, token, server, 30)
        yield raw, {"Authorization": f"token {token}"}
    finally:
        raw.close()
        stop_server(server)


def _jupyter_send(
    jupyter: tuple[Raw, dict[str, str]], method: str, path: str, body: bytes | None = None,
    content_type: str = "application/json", **headers: str,
) -> tuple[int, Any]:  # fmt: skip
    raw, auth = jupyter
    sent = {**auth, "Content-Type": content_type, **headers}
    status, data = raw.send(method, "/iterion" + path, body, headers=sent, auth=False)
    return status, json.loads(data)


def test_jupyter_reads_the_sidebars_text_plain_label_and_checks_the_fields(
    jupyter: tuple[Raw, dict[str, str]],
) -> None:
    answer = "/api/runs/r1/interactions/q1/answer"
    # what JupyterLab's ServerConnection sends for a string body: fetch's text/plain label
    status, got = _jupyter_send(jupyter, "POST", answer, b'{"answer": "x", "answerd_by": "me"}',
                                "text/plain;charset=UTF-8")  # fmt: skip
    assert (status, got["code"], got["unknown"]) == (400, "unknown_field", ["answerd_by"]), got
    status, got = _jupyter_send(jupyter, "POST", answer, b'{"answer": "a", "answer": "b"}')
    assert (status, got["code"]) == (400, "bad_json") and "repeats the key" in got["message"]
    status, got = _jupyter_send(jupyter, "POST", answer, b'{"answer": "x"}', "application/xml")
    assert (status, got["code"]) == (415, "unsupported_media_type"), got
    status, got = _jupyter_send(jupyter, "POST", answer, json.dumps({"answer": "a\x00"}).encode())
    assert (status, got["code"], got["field"]) == (400, "bad_text", "answer"), got
    status, listed = _jupyter_send(jupyter, "GET", "/api/runs/r1/interactions")
    (q1,) = [q for q in listed["interactions"] if q["id"] == "q1"]
    assert q1["answered_at"] is None and q1["answers"] is None  # nothing was recorded
    status, got = _jupyter_send(jupyter, "POST", answer, b'{"answer": "ok\\tfine"}',
                                "text/plain;charset=UTF-8")  # fmt: skip
    assert status == 200 and got["queued"] is True, got


def test_jupyter_validate_takes_only_its_fields(jupyter: tuple[Raw, dict[str, str]]) -> None:
    body = json.dumps({"source": "workflow w:\n", "nmae": "x.iter"}).encode()
    status, got = _jupyter_send(jupyter, "POST", "/api/validate", body)
    assert (status, got["code"], got["allowed"]) == (400, "unknown_field", ["source", "name"])


def test_jupyter_takes_its_token_in_the_query_and_refuses_other_unknown_arguments(
    jupyter: tuple[Raw, dict[str, str]],
) -> None:
    raw, auth = jupyter
    token = auth["Authorization"].split()[1]
    status, data = raw.send("GET", f"/iterion/api/runs?limit=2&token={token}", auth=False)
    assert status == 200 and len(json.loads(data)["runs"]) == 1
    status, got = _jupyter_send(jupyter, "GET", "/api/runs?limits=2")
    assert (status, got["code"]) == (400, "unknown_parameter"), got
    status, got = _jupyter_send(jupyter, "GET", "/api/runs/r1/report?format=md&format=html")
    assert (status, got["code"]) == (400, "bad_request"), got
    # the sidebar reloads a report with a changing ?t=
    status, _ = raw.send("GET", "/iterion/api/runs/r1/report?format=md&t=17", headers=auth,
                         auth=False)  # fmt: skip
    assert status == 200
    status, got = _jupyter_send(jupyter, "GET", "/api/inbox/events?since=3")
    assert (status, got["code"]) == (400, "unknown_parameter"), got
    # what JupyterLab's ServerConnection appends to a `cache: 'no-store'` request is taken
    status, _ = raw.send("GET", "/iterion/api/runs?1733540000000", headers=auth, auth=False)
    assert status == 200
    status, got = _jupyter_send(jupyter, "GET", "/api/runs?1733540000000=1")
    assert (status, got["code"]) == (400, "unknown_parameter"), got


def test_jupyter_answers_a_long_url_414_and_drops_a_head_over_its_64_kb(
    jupyter: tuple[Raw, dict[str, str]],
) -> None:
    import http.client

    status, got = _jupyter_send(jupyter, "GET", "/api/runs?status=" + "x" * 20_000)
    assert (status, got["code"]) == (414, "uri_too_long"), got
    # the Jupyter server's own HTTP server reads 64 KB of head at most: beyond, no answer
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        _jupyter_send(jupyter, "GET", "/api/runs", **{"X-Pad": "p" * 70_000})
    assert _jupyter_send(jupyter, "GET", "/api/runs")[0] == 200
