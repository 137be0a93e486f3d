"""``iterion-nb run | runs … | resume | cancel | report``: through a live holder, or on the file.

When another process holds the store (it publishes a holder file, and
proves on loopback that it holds the store), commands go through its REST
API; otherwise this process opens the DuckDB file itself. A holder that
dies, hangs or answers nonsense mid-command is not a traceback: the command
goes on against the file (or the holder's successor), or says what
happened and exits non-zero. ``run`` and ``resume`` run the workflow here, in the foreground, as
the run's owner — against the file (serving its API meanwhile, so other
processes can answer) or, when another process holds it (a kernel, the
Jupyter server), through that holder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import getpass
import json
import logging
import os
import re
import shlex
import signal
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

from iterion_nb import safe_data
from iterion_nb.api.client import HolderCallError, HolderClient
from iterion_nb.api.holder import open_served_store
from iterion_nb.api.service import event_json, interaction_json, run_json
from iterion_nb.backends.providers.scripted import NO_SCENARIO
from iterion_nb.cli.follow import add_follow, asked_line, follow_run
from iterion_nb.cli.inputs import (
    InputError,
    RunInputs,
    id_arg,
    limit_arg,
    plain,
    read_run_inputs,
    store_arg,
)
from iterion_nb.cli.store_copy import add_store_commands, copied_lines, copy_exit_code, store_copy
from iterion_nb.errors import (
    RESUME_APPLIES_EXPIRY,
    AlreadyAnsweredError,
    BadTextError,
    CompileError,
    InvalidAnswerError,
    IterionError,
    RunError,
    RunOwnedError,
    StoreError,
)
from iterion_nb.ir import compile_stored, compile_workflow
from iterion_nb.ir import model as m
from iterion_nb.report import render, write_report
from iterion_nb.report.build import format_for
from iterion_nb.runtime import replay
from iterion_nb.runtime.answers import is_cluster_run, ready_to_resume
from iterion_nb.runtime.lifecycle import FORM_REFUSAL, form_fields
from iterion_nb.runtime.records import RUN_STATUSES
from iterion_nb.runtime.values import preset_values, resolve_vars
from iterion_nb.safe_input import InputFileError, read_bytes, shown_path
from iterion_nb.session import RunHandle, Session, SessionService
from iterion_nb.session.cluster import CLUSTER_ENV, reach_scheduler
from iterion_nb.session.core import SourceChangedError
from iterion_nb.session.launch import (
    answers_yaml,
    attachment_values,
    check_scenario_nodes,
    write_answers,
)
from iterion_nb.store import STORE_ENV, DuckDBStore, resolve_store_path
from iterion_nb.store.holder_file import HolderInfo, find_holder
from iterion_nb.store.location import mask_url, missing_store, store_url
from iterion_nb.store.remote import open_store
from iterion_nb.view.text import MAX_LIST_LIMIT, already_answered, clip

T = TypeVar("T")

#: Exit code when the run is owned by another live process.
EXIT_OWNED = 3


class CliError(Exception):
    """A problem to print as ``iterion-nb: message`` with an exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def add_commands(sub: Any) -> None:
    """Register the run commands on the top-level parser's subparsers."""
    run = sub.add_parser("run", help="run a workflow here until it finishes or pauses")
    run.add_argument("file", help="the workflow file (.iter or .bot) to run")
    run.add_argument(
        "--var", action="append", default=[], metavar="K=V",
        help="a value for one of the workflow's vars (repeat for more)",
    )  # fmt: skip
    run.add_argument("--scenario", help="the scripted model's scenario (YAML or JSON)")
    run.add_argument(
        "--preset", type=id_arg, help="start from one of the workflow's presets (--var wins)"
    )
    run.add_argument(
        "--attach", action="append", default=[], metavar="NAME=PATH",
        help="a file for one of the workflow's attachments (repeat for more)",
    )  # fmt: skip
    run.add_argument(
        "--answers", metavar="FILE",
        help="answer matching questions from this file (written by `runs answers --export`)",
    )  # fmt: skip
    run.add_argument(
        "--answers-from", metavar="RUN", type=id_arg,
        help="answer matching questions as run RUN was answered",
    )  # fmt: skip
    _cluster(run)
    _common(run)
    runs = sub.add_parser("runs", help="list runs, show one, list or answer its questions")
    verbs = runs.add_subparsers(dest="verb", required=True, metavar="VERB")
    _common(verbs.add_parser("list", help="runs, newest first"))
    verbs.choices["list"].add_argument("--status", choices=RUN_STATUSES, metavar="STATUS")
    verbs.choices["list"].add_argument(
        "--limit", type=limit_arg, default=50, help=f"at most this many (1 to {MAX_LIST_LIMIT:,})"
    )
    shown = verbs.add_parser("show", help="one run")
    shown.add_argument("run_id", type=id_arg)
    _common(shown)
    asked = verbs.add_parser("questions", help="a run's pending questions (no RUN_ID: every run's)")
    asked.add_argument("run_id", type=id_arg, nargs="?")
    _common(asked)
    pinned = verbs.add_parser("answers", help="a run's answers, to replay in another run")
    pinned.add_argument("run_id", type=id_arg)
    pinned.add_argument(
        "--export", metavar="FILE",
        help="write them as YAML for `run --answers FILE` ('-': to stdout)",
    )  # fmt: skip
    _common(pinned)
    answer = verbs.add_parser("answer", help="answer one question of a run")
    answer.add_argument("run_id", type=id_arg)
    answer.add_argument("interaction_id", type=id_arg)
    answer.add_argument(
        "text", nargs="+", help="the answer, one argument (text; JSON with --json-value)"
    )
    answer.add_argument("--json-value", action="store_true", help="read the answer as JSON")
    answer.add_argument(
        "--as", dest="answered_by", default=None, type=id_arg,
        help="who answers (default: your user name, as a notebook's click records it)",
    )  # fmt: skip
    answer.add_argument(
        "--cluster", metavar="ADDRESS",
        help="a run it lets go on that no cluster executed yet goes to this Dask cluster"
        " (default: ITERION_NB_CLUSTER)",
    )  # fmt: skip
    _common(answer)
    add_follow(verbs, _common)
    resume = sub.add_parser(
        "resume", help="resume a paused, interrupted, failed_resumable or cancelled run here"
    )
    resume.add_argument("run_id", type=id_arg)
    resume.add_argument(
        "--workflow", metavar="FILE",
        help="resume on this file's source (default: the source the run recorded);"
        " refused if it changed, unless --force",
    )  # fmt: skip
    resume.add_argument(
        "--force", action="store_true", help="with --workflow: even if the source changed"
    )
    resume.add_argument("--scenario")
    _cluster(resume)
    _common(resume)
    cancel = sub.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id", type=id_arg)
    _common(cancel)
    report = sub.add_parser("report", help="a run's report, as HTML, Markdown or JSON")
    report.add_argument("run_id", type=id_arg)
    report.add_argument("--format", choices=("html", "md", "json"),
                        help="default: from the -o file's suffix, else md")  # fmt: skip
    report.add_argument("--json", action="store_true", help="the report as JSON (--format json)")
    report.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    report.add_argument("--store", type=store_arg, help=STORE_HELP)
    add_store_commands(sub)


STORE_HELP = "the run store (default: .iterion or ITERION_NB_STORE)"
#: Added to a refused answer to a form, given as text.
JSON_HINT = (
    " (the answer was taken as text: give JSON data — a form's fields, a number,"
    " true or false — with --json-value)"
)


def _cluster(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster", metavar="ADDRESS",
        help="execute on a Dask cluster, e.g. tcp://HOST:8786 (default: ITERION_NB_CLUSTER)",
    )  # fmt: skip
    parser.add_argument(
        "--detach", action="store_true",
        help="with a cluster: print the run id and return; the run goes on there",
    )  # fmt: skip


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=store_arg, help=STORE_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON")


# -- clients ---------------------------------------------------------------------
class _Busy(Exception):  # noqa: N818 - a condition: asked again
    """The holder's loop did not take the request up (the request was not made)."""


class Unreachable(Exception):  # noqa: N818 - a condition, handled by working on the file
    """The holder did not answer (it died, is stopping or hangs) or is not one."""


#: How long a command waits for a busy holder (a notebook running a long cell) in all.
BUSY_WAIT_SECONDS = 120.0


_OWN_HOLDER = (
    "process {pid} holds the run store, and it is waiting for this very command (it started"
    " it: a notebook's `!iterion-nb …`, or subprocess.run): it cannot answer until the"
    " command ends. In a notebook use the %iterion line magics (%iterion runs, %iterion"
    " questions RUN, %iterion answer …); or run the command in a terminal"
)


def _ancestor(pid: int) -> bool:
    """Whether process ``pid`` is this process's parent, or the parent's parent, and so on."""
    here = os.getppid()
    for _ in range(64):  # a chain of shells is short; a loop in /proc data is not followed
        if here == pid:
            return True
        if here <= 1:
            return False
        try:
            stat = Path(f"/proc/{here}/stat").read_text()
        except OSError:  # not Linux, or it is gone: only the direct parent was known
            return False
        here = int(stat.rsplit(")", 1)[1].split()[1])
    return False


class HttpClient:
    """Talks to the holder's REST API; an error response becomes a CliError with its message."""

    def __init__(self, holder: HolderInfo, db_path: Path) -> None:
        self._client = HolderClient(holder, db_path)
        self._holder = holder.pid
        self._busy_said = False

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request; Unreachable when no holder answered (the caller goes to the file).

        A holder whose loop is busy (``holder_busy``: the request was not made)
        is asked again, after one line on stderr, for :data:`BUSY_WAIT_SECONDS`.
        """
        deadline = asyncio.get_running_loop().time() + BUSY_WAIT_SECONDS
        while True:
            try:
                return await self._request(method, path, body)
            except _Busy as busy:
                if _ancestor(self._holder):  # it waits for this very command: it never frees
                    raise CliError(_OWN_HOLDER.format(pid=self._holder)) from None
                if asyncio.get_running_loop().time() > deadline:
                    raise CliError(
                        f"{busy} — still busy after {BUSY_WAIT_SECONDS:.0f} s", 1
                    ) from None
                if not self._busy_said:
                    self._busy_said = True
                    sys.stderr.write(
                        f"iterion-nb: {busy}; waiting for it (up to"
                        f" {BUSY_WAIT_SECONDS:.0f} s, Ctrl-C to stop)\n"
                    )
                    sys.stderr.flush()
                await asyncio.sleep(0.5)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        try:
            return await self._client.call(method, path, body)
        except HolderCallError as err:
            if err.code == "holder_busy":
                raise _Busy(str(err).split("; try again")[0]) from None
            if err.status == 0:
                raise Unreachable(str(err)) from None
            if err.code == "invalid_answer":  # hinted as the same refusal on the file is
                raise InvalidAnswerError(str(err)) from None
            if err.code == "already_answered":  # said with who answered what, as on the file
                iid = str(err.body.get("interaction_id", ""))
                raise AlreadyAnsweredError(iid, err.body.get("existing")) from None
            code = {"run_owned": EXIT_OWNED, "bad_text": 2}.get(err.code or "", 1)
            raise CliError(str(err), code) from None

    def close(self) -> None:
        """Close its connections."""
        self._client.close()


def _session(
    store: str | None, *, serve: bool, scenario: dict[str, Any] | None = None,
    cluster: str | None = None,
) -> Session:  # fmt: skip
    try:
        return Session(store, scenario=scenario, serve=serve, cluster=cluster)
    except IterionError as err:
        raise CliError(str(err)) from None


async def _ours(session: Session, err: AlreadyAnsweredError, answer: Any, who: str) -> bool:
    """Whether the recorded answer is this very answer (same value, same person)."""
    if err.existing != json.loads(json.dumps(answer)):
        return False
    recorded = await session.store.get_interaction(err.interaction_id)
    return recorded.answered_by == who


async def _direct(args: argparse.Namespace, action: str, retried: bool = False) -> Any:
    # an answer may resume a paused run here: then this process serves the file meanwhile
    session = _session(args.store, serve=action == "answer", cluster=getattr(args, "cluster", None))
    service = SessionService(session)
    try:
        if action == "list":
            return {"runs": [run_json(r) for r in await service.list_runs(args.status, args.limit)]}
        if action == "show":
            run = run_json(await service.get_run(args.run_id), full=True)
            run["events"] = [event_json(e) for e in await service.events(args.run_id, 0)][-20:]
            run["interactions"] = [
                interaction_json(i) for i in await service.interactions(args.run_id)
            ]
            return run
        if action == "questions":
            found = (
                await service.pending(args.run_id) if args.run_id else await service.pending_all()
            )
            return {"interactions": [interaction_json(i) for i in found], "all": not args.run_id}
        if action == "answers":
            record = await service.get_run(args.run_id)
            asked = await service.interactions(args.run_id)
            return {"run": record.id, "workflow": record.workflow, "answers": replay.export(asked)}
        if action == "cancel":
            status = await service.cancel(args.run_id)
            if status != "running":
                return {"status": status}
            lease = (await service.get_run(args.run_id)).lease
            return {"status": status, "queued": lease is not None and lease.queued}
        # a cluster's workers reach a DuckDB store through its holder: this process, now
        session.serve()
        began = asyncio.get_running_loop().time()
        try:
            outcome: dict[str, Any] = dict(
                await service.answer(
                    args.run_id, args.interaction_id, _answer(args), args.answered_by
                )
            )
        except AlreadyAnsweredError as err:
            if not (retried and await _ours(session, err, _answer(args), args.answered_by)):
                first = await session.store.get_interaction(err.interaction_id)
                raise CliError(already_answered(interaction_json(first))) from None
            # the holder recorded it, then stopped before it could say so
            return {"queued": False, "resumed": False, "recorded_before": True}
        return await _after_answer(session, service, args.run_id, outcome, began)
    finally:
        await session.close()


async def _after_answer(
    session: Session, service: SessionService, run_id: str, outcome: dict[str, Any],
    began: float,
) -> dict[str, Any]:  # fmt: skip
    """Where the run stands once answered; waits for it while only this process can serve it.

    A run the cluster executes (or that this answer resumed on it, whatever
    executed it before) is not waited for — unless its store is a DuckDB file
    this very process holds: the workers use the file through it, so it stays
    until a worker took the run up (:data:`TAKE_UP_SECONDS` at most) and the run
    settled.
    """
    latest = await service.get_run(run_id)
    on_cluster = is_cluster_run(latest) or (outcome["resumed"] and session.executor is not None)
    if on_cluster:
        outcome["cluster"] = True
        paused = latest.status == "paused_waiting_human"
        ready = paused and await ready_to_resume(session.store, latest)
        holds_file = _holds_file(session.store)
        if holds_file and (latest.status == "running" or ready):
            before = latest.updated_at
            latest = await _serve_workers(session, run_id, latest, began)
            outcome["resumed"] = outcome["resumed"] or latest.updated_at != before
            if outcome["resumed"]:  # a worker took it up through this process after all
                outcome.pop("resume_error", None)
            outcome["held_here"] = str(getattr(session.store, "path", ""))
        if not outcome["resumed"] and session.executor is not None and session.executor.error:
            outcome.setdefault("resume_error", session.executor.error)  # (watchers may still)
        if outcome["resumed"] and _in_queue(latest):  # queued here: has a worker taken it?
            latest = await _taken_up(session, run_id, latest, outcome)
        outcome["run_status"] = latest.status
        outcome["ready"] = latest.status != "paused_waiting_human" or await ready_to_resume(
            session.store, latest
        )
        # as it stands now: a worker may have taken it since; the workers reach a DuckDB file
        # this command holds only until it exits (then only through the next holder)
        goes_on = latest.status == "interrupted" or (
            latest.status == "paused_waiting_human" and outcome["ready"]
        )
        outcome["awaiting_worker"] = (
            not outcome["resumed"] and goes_on and latest.lease is None and not holds_file
        )  # fmt: skip
        if holds_file and latest.status == "interrupted":  # no worker reaches it once we exit
            outcome["unheld"] = str(getattr(session.store, "path", ""))
    elif outcome["resumed"]:  # this process now runs the workflow until it settles
        outcome["run_status"] = await session.run(run_id).wait()
        outcome["waited"] = True
    return outcome


#: Seconds an answer that queued its run on the cluster waits to see a worker take it up.
QUEUE_LOOK_SECONDS = 3.0


def _in_queue(run: Any) -> bool:
    """Whether ``run`` waits in a cluster's queue (queued, no worker has taken it yet)."""
    return bool(run.status == "running" and run.lease is not None and run.lease.queued)


async def _taken_up(session: Session, run_id: str, latest: Any, outcome: dict[str, Any]) -> Any:
    """``latest`` once a worker took the queued run up (a few seconds at most).

    Sets ``outcome["in_queue"]`` when none did, and ``outcome["workers"]``
    to how many workers the scheduler has (0: none is up to take it).
    """
    executor = session.executor
    workers = None
    if executor is not None:
        try:
            info = await asyncio.to_thread(lambda: executor.client.scheduler_info())
            workers = len(info.get("workers") or {})
        except Exception:  # the scheduler went away meanwhile: the watchers take it up
            workers = None
    deadline = asyncio.get_running_loop().time() + (QUEUE_LOOK_SECONDS if workers else 0)
    while _in_queue(latest) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        latest = await session.store.get_run(run_id)
    if _in_queue(latest):
        outcome["in_queue"] = True
        outcome["workers"] = workers
        outcome["cluster_address"] = str(executor.cluster) if executor is not None else None
    return latest


#: Seconds an answering command that holds a DuckDB store waits for a cluster worker to
#: take up the run it answered, counted from the answer (a worker's watcher looks for the
#: store's holder every 5 s; this process serves the store from before the answer).
TAKE_UP_SECONDS = 30.0


async def _serve_workers(session: Session, run_id: str, latest: Any, began: float) -> Any:
    """Hold the DuckDB store while cluster workers may need it for ``run_id``.

    A run the answer made ready waits for a worker's watcher to take it up (it
    finds this process as the store's holder); once a worker executes it, this
    process serves the file until the run finishes or pauses again.
    """
    assert _holds_file(session.store)
    store = getattr(session.store, "path", "")
    sys.stderr.write(_SERVING_WORKERS.format(run_id=run_id, store=store))
    sys.stderr.flush()
    deadline = began + TAKE_UP_SECONDS  # the answer's hand-over wait counts too
    answered = latest.updated_at
    # a worker taking the run changes it, even one that runs it to its next pause between
    # two looks here
    while latest.status == "paused_waiting_human" and latest.updated_at == answered:
        if asyncio.get_running_loop().time() > deadline:
            return latest  # no worker came: said in the outcome
        await asyncio.sleep(0.2)
        latest = await session.store.get_run(run_id)
    if latest.status in ("running", "interrupted"):  # followed through a worker's crash
        await session.run(run_id).wait()
        latest = await session.store.get_run(run_id)
    return latest


def _holds_file(store: Any) -> bool:
    """Whether this process holds a DuckDB store's file.

    It opened it itself, or took it over from a holder that died: cluster workers
    then reach it only through this process.
    """
    return isinstance(store, DuckDBStore) or bool(getattr(store, "took_over", False))


_SERVING_WORKERS = (
    "iterion-nb: cluster workers execute run {run_id} through this process, which holds"
    " the run store {store}: serving it until the run finishes or pauses (a notebook or"
    " JupyterLab that holds the store spares you this wait)\n"
)


async def _remote(client: HttpClient, args: argparse.Namespace, action: str) -> Any:
    base = f"/api/runs/{args.run_id}" if getattr(args, "run_id", None) else "/api/runs"
    if action == "list":
        query = f"?limit={args.limit}" + (f"&status={args.status}" if args.status else "")
        return await client.call("GET", base + query)
    if action == "show":
        run = await client.call("GET", base)
        run["events"] = (await client.call("GET", base + "/events"))["events"][-20:]
        run["interactions"] = (await client.call("GET", base + "/interactions"))["interactions"]
        return run
    if action == "questions":
        if not args.run_id:  # every run's
            return {**await client.call("GET", "/api/interactions/pending"), "all": True}
        return {**await client.call("GET", base + "/interactions/pending"), "all": False}
    if action == "answers":
        run = await client.call("GET", base)
        asked = (await client.call("GET", base + "/interactions"))["interactions"]
        return {"run": run["id"], "workflow": run["workflow"], "answers": _pins(asked)}
    if action == "cancel":
        cancelled = await client.call("POST", base + "/cancel", {})
        if cancelled.get("status") != "running":
            return cancelled
        owner = (await client.call("GET", base)).get("owner") or {}
        return {**cancelled, "queued": bool(owner.get("queued"))}
    try:
        return await client.call(
            "POST", f"{base}/interactions/{args.interaction_id}/answer",
            {"answer": _answer(args), "answered_by": args.answered_by},
        )  # fmt: skip
    except AlreadyAnsweredError:
        asked = (await client.call("GET", base + "/interactions"))["interactions"]
        (question,) = [q for q in asked if q["id"] == args.interaction_id]
        raise CliError(already_answered(question)) from None


def _pins(asked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """replay.export, from questions as the REST API gives them."""
    pins = []
    for q in asked:
        if q["kind"] == "await" or q["answered_at"] is None:
            continue
        pin: dict[str, Any] = {"node": q["node_id"], "question": q["question"]}
        if q["options"]:
            pin["options"] = [o["id"] for o in q["options"]]
        pins.append(pin | {"answer": q["answers"]})
    return pins


def _answer(args: argparse.Namespace) -> Any:
    if len(args.text) > 1:  # `runs answer RUN Q one two three`: the shell split it
        quoted = shlex.quote(" ".join(args.text))
        raise CliError(
            f"the answer is one argument, and {len(args.text)} were given: quote it"
            f" (`iterion-nb runs answer {args.run_id} {args.interaction_id} {quoted}`)",
            2,
        )
    text = args.text[0]
    if not args.json_value:
        return text
    try:
        return safe_data.loads(text, "--json-value: the answer")
    except safe_data.DataError as err:
        raise CliError(str(err), 2) from None


# -- commands ----------------------------------------------------------------------
#: Signals that stop a command as Ctrl-C does, by the name its message gives them.
STOP_SIGNALS = {"SIGTERM": "SIGTERM", "SIGHUP": "SIGHUP (the terminal closed)"}


class _Stopped:
    """Which signal stopped this command (``None``: none, or Ctrl-C)."""

    signum: int | None = None
    #: Whether what the stop did to the run was said already (no second line then).
    told = False

    @classmethod
    def clear(cls) -> None:
        cls.signum = None
        cls.told = False


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """Dispatch ``run``, ``runs …``, ``resume`` and ``cancel``.

    SIGTERM (``kill``, a supervisor) and SIGHUP (the terminal closed) stop the
    command as Ctrl-C does: the run this process executes is cancelled cleanly,
    resumable, and the exit code is 128 + the signal's number, as shells say it.
    """
    _Stopped.clear()
    try:
        return asyncio.run(_dispatch(args, out))
    except KeyboardInterrupt:
        if _Stopped.told:  # what became of the run was said: nothing to add
            return 128 + signal.SIGINT
        raise
    except asyncio.CancelledError:
        if _Stopped.signum is None:
            raise
        if _Stopped.told:
            return 128 + _Stopped.signum
        name = signal.Signals(_Stopped.signum).name
        raise CliError(f"stopped by {name}", 128 + _Stopped.signum) from None


def _stop_on_signals() -> None:
    """In the command's task: SIGTERM and SIGHUP cancel it, as asyncio does for Ctrl-C."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None

    def stop(signum: int) -> None:
        if _Stopped.signum is None:
            _Stopped.signum = signum
            task.cancel()

    for name in STOP_SIGNALS:
        signum = getattr(signal, name, None)
        # a signal ignored on purpose (`nohup iterion-nb run …`) stays ignored
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            # (not on this platform, or not the main thread: the default stays)
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, stop, signum)


async def _report(args: argparse.Namespace, out: TextIO) -> int:
    """``report RUN``: through the holder's store route when one is live, else the file."""
    if args.json and args.format not in (None, "json"):
        raise CliError(f"--json and --format {args.format} ask for two formats: give one", 2)
    try:
        fmt = format_for(args.output, "json" if args.json else args.format)
    except IterionError as err:  # a file name that says another format: a usage error
        said = str(err).replace("give the format (html, md or json)", "give --format html|md|json")
        raise CliError(said, 2) from None
    try:
        store = open_store(args.store)
    except IterionError as err:
        raise CliError(str(err)) from None
    try:
        text = await render(store, args.run_id, fmt)
        if args.output is None:
            out.write(text)
        else:
            path = write_report(text, args.output)  # missing directories made, as docs/cli.md says
            out.write(f"wrote the {fmt} report of run {args.run_id} to {path}\n")
    except IterionError as err:
        raise CliError(str(err)) from None
    finally:
        await store.close()
    return 0


def require_store(spec: str | None, another: str = f"--store or {STORE_ENV}") -> None:
    """Refuse a store that is not there, for a command about runs already made.

    Opening it would create an empty store where a typo points, and the command
    would then report "no runs" or "0 copied" as if that were the answer.

    Raises:
        CliError: Names the place looked at, and how to name another.
    """
    try:
        missing = missing_store(spec, "`iterion-nb run`", another)
    except StoreError as err:  # a path DuckDB cannot open (not UTF-8), a server away
        raise CliError(str(err), 2 if store_url(spec) is None else 1) from None
    if missing is not None:
        raise CliError(missing)


async def _off_loop(work: Callable[[], T]) -> T:
    """``work()`` in a thread of its own, which this process does not wait for when it stops.

    For blocking calls that may take long (connecting to a server that does not
    answer): Ctrl-C and SIGTERM stop the command at once, as anywhere else.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the command stopped meanwhile
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result, error = work(), None
        except BaseException as err:
            result, error = None, err
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="iterion-cli-blocking", daemon=True).start()
    return await done


def _quiet_dask(args: argparse.Namespace) -> None:
    """Keep Dask's own log lines (a client that lost its scheduler ...) out of our output.

    A command that may reach a cluster (``run``, ``resume``, ``runs answer``)
    says in its own words what became of the run; Dask configures its loggers
    when it is imported, so it is imported first.
    """
    verb = getattr(args, "verb", None)
    if args.command not in ("run", "resume") and verb != "answer":
        return
    if not (getattr(args, "cluster", None) or os.environ.get(CLUSTER_ENV)):
        return
    try:
        import distributed  # noqa: F401 - its logging configuration, set before ours
    except ImportError:
        return
    for name in ("distributed", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def terminal_user() -> str:
    """Who answers from this terminal: the account's user name ("cli" if it has none)."""
    try:
        return getpass.getuser() or "cli"
    except Exception:  # no name for this uid (a container)
        return "cli"


async def _dispatch(args: argparse.Namespace, out: TextIO) -> int:
    _stop_on_signals()
    if getattr(args, "verb", None) == "answer" and args.answered_by is None:
        args.answered_by = terminal_user()
    # a run cancelled by Ctrl-C: this command says so itself, with what to do next
    logging.getLogger("iterion_nb.session.cancelled").setLevel(logging.ERROR)
    await _off_loop(lambda: _quiet_dask(args))
    if args.command == "store":  # what `store copy` copies from
        await _off_loop(lambda: require_store(args.src, "SRC"))
    elif args.command != "run":  # every other command is about runs already made
        await _off_loop(lambda: require_store(args.store))
    own = "follow" if args.command == "runs" and args.verb == "follow" else args.command
    if own in _OWN_WAY:  # commands with a course of their own (not one call on the store)
        return await _OWN_WAY[own](args, out)
    if args.command in ("run", "resume"):  # every file read and checked before a store opens
        return await _foreground(args, out, _run_inputs(args))
    action = args.verb if args.command == "runs" else "cancel"
    result, remote = await _call(args, action)
    if action == "answers" and args.export is not None:
        return _export(result, args.export, out)
    cancelled = result.get("status") if action == "cancel" and isinstance(result, dict) else None
    if cancelled in ("finished", "failed"):
        raise CliError(f"run {args.run_id} already {cancelled}; nothing to cancel")
    if not remote:
        _print(result, action, args.json, out, args)
        return _answer_exit(result) if action == "answer" else 0
    try:
        _print(result, action, args.json, out, args)
    except _SHAPELESS:
        raise CliError(_NOT_UNDERSTOOD) from None
    return 0


def _answer_exit(result: dict[str, Any]) -> int:
    """1 when the answer resumed the run in this command and it ended as `resume`'s would fail."""
    ended_badly = result.get("run_status") in ("failed", *RESUMABLE_ENDS)
    return 1 if result.get("waited") and ended_badly else 0


async def _call(args: argparse.Namespace, action: str) -> tuple[Any, bool]:
    """The command's call on the store; its refusals as messages and exit codes."""
    try:
        return await _through_holder_or_file(args, action)
    except RunOwnedError as err:
        raise CliError(str(err), EXIT_OWNED) from None
    except InvalidAnswerError as err:
        # typed as text for a form (fields of their types): the way to send JSON helps
        form = FORM_REFUSAL in str(err) and not getattr(args, "json_value", True)
        raise CliError(f"{err}{JSON_HINT if form else ''}") from None
    except BadTextError as err:  # what the person typed: a usage error
        raise CliError(str(err), 2) from None
    except IterionError as err:
        raise CliError(_with_resume(str(err), args)) from None
    except CliError as err:  # from the holder's reply
        raise CliError(_with_resume(str(err), args), err.code) from None


async def _follow(args: argparse.Namespace, out: TextIO) -> int:
    """``runs follow``: through the holder, or the file served meanwhile, or PostgreSQL.

    A DuckDB file nobody held is served as the Jupyter server serves it: other
    terminals answer through this process, which executes no workflow — a run
    an answer sets going is resumed by whoever resumes it, never stopped here.
    """
    try:
        store = open_served_store(args.store)
    except IterionError as err:
        raise CliError(str(err)) from None
    try:
        return await follow_run(store, args, out)
    except IterionError as err:
        raise CliError(str(err)) from None
    except asyncio.CancelledError:
        _Stopped.told = True  # follow_run said it stopped following and the run goes on
        raise
    finally:
        await store.close()


def _with_resume(message: str, args: argparse.Namespace) -> str:
    """A refusal that says only a resume takes the run on, with the command that does."""
    if not message.endswith(RESUME_APPLIES_EXPIRY):
        return message
    where = f" --store {mask_url(args.store)}" if args.store else ""
    return f"{message}: `iterion-nb resume {args.run_id}{where}`"


async def _copy(args: argparse.Namespace, out: TextIO) -> int:
    """``store copy``."""
    try:
        copied = await store_copy(args)
    except IterionError as err:
        raise CliError(str(err)) from None
    text = json.dumps(copied, indent=2) if args.json else "\n".join(copied_lines(copied))
    out.write(text + "\n")
    return copy_exit_code(copied)


_OWN_WAY: dict[str, Callable[[argparse.Namespace, TextIO], Awaitable[int]]] = {
    "report": _report,
    "store": _copy,
    "follow": _follow,
}


#: What a reply of the wrong shape raises when it is read.
_SHAPELESS = (KeyError, TypeError, ValueError, AttributeError, IndexError)
_NOT_UNDERSTOOD = "the store holder sent a reply this command does not understand"


async def _through_holder_or_file(args: argparse.Namespace, action: str) -> tuple[Any, bool]:
    """Through the verified holder; when it dies, hangs or is not one, on the file.

    Also says whether the result came from the holder.
    """
    # a PostgreSQL store has no holder: every process uses it directly
    db = None if store_url(args.store) else resolve_store_path(args.store)
    holder = None if db is None else await asyncio.to_thread(find_holder, db)
    if holder is None or db is None:
        return await _direct(args, action), False
    client = HttpClient(holder, db)
    if getattr(args, "cluster", None):  # `runs answer --cluster`: the holder decides
        sys.stderr.write(
            f"iterion-nb: note: --cluster is not used: process {holder.pid}, which holds the"
            " store, records the answer and decides where the run goes on\n"
        )
    try:
        return await _remote(client, args, action), True
    except Unreachable:
        # It died, stopped, hangs or is not the holder: the file once its lock is
        # free (or its successor). An answer it may have recorded before dying is
        # recognised as ours there, not reported as a conflict.
        return await _direct(args, action, retried=True), False
    except _SHAPELESS:
        raise CliError(_NOT_UNDERSTOOD) from None
    finally:
        client.close()


#: How long ``run`` holds a question its pinned answers cover before it prints it as asked
#: (a pin answers it as soon as it is recorded; one that no longer fits leaves it asked).
REPLAY_GRACE = 2.0


async def _show_questions(handle: RunHandle, out: TextIO) -> None:
    """While ``run`` or ``resume`` waits: each question the run asks, with its id, as asked.

    A question answered from the run's pinned answers is shown as replayed, with its answer.
    """
    store = handle.session.store
    bell = store.doorbell  # type: ignore[attr-defined]
    pins = (await store.get_run(handle.id)).launch.get("answers") or []
    seen: set[str] = set()
    held: dict[str, float] = {}  # covered by a pin, not answered yet: since when
    loop = asyncio.get_running_loop()
    while True:
        with bell.arm(handle.id) as ticket:
            asked = [q for q in await store.interactions(handle.id) if q.kind != "await"]
            for question in asked:
                if question.id in seen:
                    continue
                line = _question_line(question, pins, asked, held, loop.time())
                if line is not None:
                    seen.add(question.id)
                if line:
                    out.write(line + "\n")
                    out.flush()
            await ticket.wait(timeout=0.25 if held else 1.0)


def _question_line(
    question: Any, pins: list[Any], asked: list[Any], held: dict[str, float], now: float
) -> str | None:
    """What ``run`` prints of a question it has not shown ("": nothing), or None: look later."""
    if question.answered_by == replay.REPLAY:
        held.pop(question.id, None)
        shown = clip(json.dumps(question.answers, ensure_ascii=False), 200)
        return f"{asked_line(question).replace('asked:', 'replayed:', 1)} -> {plain(shown)}"
    if not question.pending:
        held.pop(question.id, None)
        return ""  # answered (or closed) before it was seen: nothing to ask
    if pins and replay.pin_for(pins, asked, question)[0]:
        since = held.setdefault(question.id, now)
        if now - since < REPLAY_GRACE:
            return None
    held.pop(question.id, None)
    return asked_line(question)


def _interrupted(run_id: str, store: str | None, cluster: bool, begun: bool = True) -> str:
    """What Ctrl-C (SIGTERM, SIGHUP) during ``run`` or ``resume`` did to the run; what next.

    ``begun`` is false when the stop came as the run was being recorded or taken
    up, before it executed: it is left for ``resume`` (``interrupted``), not cancelled.
    """
    _Stopped.told = True
    where = f" --store {mask_url(store)}" if store else ""
    cause = "Ctrl-C"
    if _Stopped.signum is not None:
        cause = STOP_SIGNALS[signal.Signals(_Stopped.signum).name]
    if cluster:
        return (f"iterion-nb: stopped following run {run_id} ({cause}); the cluster goes on"
                f" with it: `iterion-nb runs follow {run_id}{where}`\n")  # fmt: skip
    if not begun:
        return (f"iterion-nb: run {run_id} stopped ({cause}) as it started; `iterion-nb"
                f" resume {run_id}{where}` goes on from its checkpoint\n")  # fmt: skip
    return (f"iterion-nb: run {run_id} cancelled ({cause}); `iterion-nb resume"
            f" {run_id}{where}` goes on from its checkpoint\n")  # fmt: skip


def _before_session(args: argparse.Namespace) -> None:
    """Refuse what cannot work before the store is opened (a new store is not left behind).

    Raises:
        CliError: ``--detach`` without a cluster or with a DuckDB file nobody else
            holds; a cluster address where no scheduler answers.
    """
    cluster = args.cluster or os.environ.get(CLUSTER_ENV) or None
    if getattr(args, "detach", False):
        if cluster is None:
            raise CliError("--detach needs a cluster (--cluster ADDRESS or ITERION_NB_CLUSTER)", 2)
        if store_url(args.store) is None and find_holder(resolve_store_path(args.store)) is None:
            raise CliError(_DETACH_NEEDS_HOLDER, 2)
    if cluster is not None:
        try:
            reach_scheduler(cluster)
        except IterionError as err:
            raise CliError(str(err)) from None


_NO_WORKER = (
    "iterion-nb: warning: no worker is connected to the scheduler at {address}: the run"
    " waits for one (it reads `interrupted` after a minute); the first worker that comes"
    " up takes it\n"
)
_DETACH_NEEDS_HOLDER = (
    "--detach needs a store that outlives this command: a postgresql:// URL, or"
    " a store another process holds (a kernel, JupyterLab)"
)


def _check_launch(args: argparse.Namespace, inputs: RunInputs) -> None:
    """``run``: its --var, --preset and --attach checked before a store is opened (or made).

    Raises:
        CliError: One is refused, as :meth:`Session.start` would (nothing is created).
    """
    if args.command != "run" or inputs.workflow is None:
        return
    wf = inputs.workflow
    given = dict(_pair(v) for v in args.var)
    files = dict(_pair(a, "--attach") for a in args.attach)
    try:
        resolve_vars(wf, {**preset_values(wf, args.preset), **given})
        attachment_values(wf, files)
    except IterionError as err:
        raise CliError(str(err)) from None


async def _shown_workflow(
    session: Session, handle: RunHandle, inputs: RunInputs
) -> m.Workflow | None:
    """The workflow the run executes: the file's, else (a resume) the run's recorded one."""
    if inputs.workflow is not None:
        return inputs.workflow
    try:
        record = await session.store.get_run(handle.id)
        return compile_stored(record.source, f"<run {handle.id}>")
    except IterionError:  # an old record's source no longer compiles: say how to answer
        return None


def _running_line(run_id: str, args: argparse.Namespace, wf: m.Workflow | None) -> str:
    """The first line of ``run``: the run's id, and how to answer it if it can ask a person."""
    if wf is not None and not any(
        getattr(node, "interaction", "none") not in ("none", "llm") for node in wf.nodes.values()
    ):
        return f"run {run_id} running\n"  # nothing in it asks anyone
    where = f" --store {mask_url(args.store)}" if args.store else ""
    return (f"run {run_id} running (answer its questions with `iterion-nb runs answer"
            f" {run_id} ID TEXT{where}` from another terminal)\n")  # fmt: skip


async def _foreground(args: argparse.Namespace, out: TextIO, inputs: RunInputs) -> int:
    _before_session(args)
    _check_launch(args, inputs)
    session = _session(args.store, serve=True, scenario=inputs.scenario, cluster=args.cluster)
    detach = getattr(args, "detach", False)
    try:
        if detach and isinstance(session.store, DuckDBStore):  # we hold the file: it would go
            raise CliError(_DETACH_NEEDS_HOLDER, 2)
        handle = await _begin(session, args, inputs)
        if session.executor is not None and not session.executor.has_workers():
            sys.stderr.write(_NO_WORKER.format(address=session.executor.cluster))
        if detach:
            out.write(json.dumps({"id": handle.id}) + "\n" if args.json else f"{handle.id}\n")
            return 0
        if not args.json:
            out.write(
                _running_line(handle.id, args, await _shown_workflow(session, handle, inputs))
            )
            out.flush()
        shown = None if args.json else asyncio.ensure_future(_show_questions(handle, out))
        try:
            status = await handle.wait()
        except asyncio.CancelledError:  # Ctrl-C: say what becomes of the run, then stop
            sys.stderr.write(_interrupted(handle.id, args.store, session.executor is not None))
            raise
        finally:
            if shown is not None:
                shown.cancel()
                await asyncio.gather(shown, return_exceptions=True)
        result = await _summary(handle)
    except RunOwnedError as err:
        raise CliError(str(err), EXIT_OWNED) from None
    except IterionError as err:
        raise CliError(str(err)) from None
    finally:
        await session.close()
    _print(result, "show", args.json, out)
    if not args.json:
        out.write(_next_step(status, result, args))
    return 1 if status in ("failed", "running", *RESUMABLE_ENDS) else 0


def _next_step(status: str, result: dict[str, Any], args: argparse.Namespace) -> str:
    """After ``run``/``resume``: what goes on from a run that did not finish or pause."""
    run_id, where = result["id"], f" --store {mask_url(args.store)}" if args.store else ""
    owner = result.get("owner")
    if status == "running" or (status == "interrupted" and owner):  # another process took it
        by = f" (pid {owner['pid']} on {owner['host']})" if owner else ""
        return (f"run {run_id} is executed by another process now{by}:"
                f" `iterion-nb runs follow {run_id}{where}`\n")  # fmt: skip
    if status in RESUMABLE_ENDS:  # cancelled from elsewhere, failed on the way
        said = f"`iterion-nb resume {run_id}{where}` goes on from its checkpoint"
        if _LIMIT_HIT.search(result.get("error") or ""):  # the same limit stops it again
            said += (" — it stopped at a limit its workflow sets: raise it in the file, then"
                     f" `iterion-nb resume {run_id} --workflow FILE --force{where}`")  # fmt: skip
        return said + "\n"
    return ""


#: A failure at a limit of the workflow's: a resume on the same source meets it again.
_LIMIT_HIT = re.compile(r"loop '[^']*' is exhausted|budget exceeded: ")


#: ``resume --force`` without ``--workflow``: there is nothing to force.
FORCE_NEEDS_WORKFLOW = (
    "--force needs --workflow FILE: without it the run resumes its recorded source"
    " (give the edited workflow file with --workflow FILE --force)"
)


def _run_inputs(args: argparse.Namespace) -> RunInputs:
    """What ``run`` and ``resume`` were given, read and checked before a store opens.

    ``resume --workflow FILE`` reads and compiles FILE as ``run FILE`` does
    (a file that cannot be used: exit 2; one with errors: each as
    ``file:line:col``, exit 1).

    Raises:
        InputError: As :func:`read_run_inputs` says; ``resume --force`` without
            ``--workflow`` (exit 2).
    """
    if args.command == "resume" and args.force and args.workflow is None:
        raise InputError(FORCE_NEEDS_WORKFLOW)
    inputs = read_run_inputs(args)
    if args.command != "resume" or args.workflow is None:
        return inputs
    try:
        workflow = compile_workflow(read_bytes(args.workflow), args.workflow)
    except InputFileError as err:
        raise InputError(str(err)) from None
    except CompileError as err:
        raise InputError(str(err), 1) from None
    return dataclasses.replace(inputs, workflow=workflow)


async def _resume(session: Session, args: argparse.Namespace, inputs: RunInputs) -> RunHandle:
    """Resume the run, on the ``--workflow`` file's source if one was given.

    Raises:
        InputError: It failed for want of a scenario, and none is given.
        CliError: The file's source is not the run's recorded one, and no
            ``--force`` (nothing changed: the run is as it was).
    """
    run_id = args.run_id
    record = await session.store.get_run(run_id)
    if inputs.scenario is None:  # it failed for want of one: it would fail again
        if record.launch.get("scenario") is None and NO_SCENARIO in (record.error or ""):
            raise InputError(
                f"run {run_id} failed for want of a scenario (its agents answer from"
                " one, and it recorded none): resume it with --scenario FILE"
                " (examples/*.scenario.yaml are samples)"
            )
    else:  # a node it names that the run's workflow lacks: a typo, as `run` says
        wf = inputs.workflow or compile_stored(record.source, f"<run {run_id}>")
        try:
            check_scenario_nodes(inputs.scenario, wf, shown_path(args.scenario))
        except IterionError as err:
            raise InputError(str(err)) from None
    try:
        return await session.resume(
            run_id, workflow=inputs.workflow, force=args.force, scenario=inputs.scenario
        )
    except SourceChangedError as err:
        shown = plain(args.workflow)
        where = f" --store {shlex.quote(mask_url(args.store))}" if args.store else ""
        again = f"iterion-nb resume {run_id} --workflow {shlex.quote(shown)} --force{where}"
        said = err.refusal(f"add --force (`{again}`)", shown)
        raise CliError(f"{said}; nothing changed") from None


async def _begin(session: Session, args: argparse.Namespace, inputs: RunInputs) -> RunHandle:
    """Start (``run``) or resume the run; a stop meanwhile still names it, and the resume."""
    run_id = args.run_id if args.command == "resume" else uuid.uuid4().hex[:12]
    try:
        if args.command == "resume":
            return await _resume(session, args, inputs)
        assert inputs.workflow is not None  # read for `run`
        return await session.start(
            inputs.workflow, vars=dict(_pair(v) for v in args.var), run_id=run_id,
            answers=inputs.answers, answers_from=args.answers_from, preset=args.preset,
            attachments=dict(_pair(a, "--attach") for a in args.attach),
        )  # fmt: skip
    except asyncio.CancelledError:  # Ctrl-C as the run was recorded: leave it to `resume`
        with contextlib.suppress(Exception):
            if await asyncio.wait_for(_let_go(session, run_id), 5):
                cluster = session.executor is not None
                sys.stderr.write(_interrupted(run_id, args.store, cluster, begun=False))
        raise


async def _let_go(session: Session, run_id: str) -> bool:
    """Whether the run was recorded; if so, this process's lease on it is given up."""
    try:
        await session.store.get_run(run_id)
    except IterionError:  # not recorded: nothing to say about it
        return False
    await session.store.release_runs(session.claimant.id, [run_id])
    return True


async def _summary(handle: RunHandle) -> dict[str, Any]:
    record = await handle.refresh()
    data = run_json(record, full=True)
    data["questions"] = [interaction_json(i) for i in await handle.pending_questions()]
    return data


def _pair(text: str, option: str = "--var") -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise CliError(f"{option} expects KEY=VALUE, got {text!r}", 2)
    return key, value


def _print(
    result: Any, action: str, as_json: bool, out: TextIO, args: argparse.Namespace | None = None
) -> None:
    if as_json:
        if action == "questions":  # whether they are every run's: for the text only
            result = {"interactions": result["interactions"]}
        out.write(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n")
        return
    lines = _TEXT[action](result) if action in _TEXT else _answered(result, args)
    out.write("\n".join(lines) + "\n")


def _listing(result: Any) -> list[str]:
    rows = result["runs"]
    return [
        f"{plain(r['id'])}  {plain(r['status']):<22} {plain(r['workflow']):<20}"
        f" {plain(r['created_at'])}"
        for r in rows
    ] or ["no runs"]


def _shown(result: Any) -> list[str]:
    """``runs show``: every text from the store with its control characters escaped."""
    lines = [f"run {plain(result['id'])} ({plain(result['workflow'])}): {plain(result['status'])}"]
    owner = result.get("owner") or {}
    if result["status"] == "running" and owner.get("queued"):
        lines[0] += (f" — waits in a cluster's queue since {plain(str(owner['since']))}: no"
                     " worker has taken it up yet")  # fmt: skip
    if result.get("error"):
        lines.append(f"  error: {plain(result['error'])}")
    for node, output in result.get("outputs", {}).items():
        lines.append(f"  {plain(node)}: {plain(clip(json.dumps(output, ensure_ascii=False)))}")
    lines += [f"  waiting: {_asked(q)}" for q in result.get("questions", [])]
    for q in result.get("interactions", []):
        if q["answered_at"] is None:
            lines.append(f"  asked: {_asked(q)} ({_unanswered(q)})")
            continue
        answer = plain(clip(json.dumps(q["answers"], ensure_ascii=False)))
        lines.append(f"  asked: {_asked(q)}")
        lines.append(f"    answered {answer} by {plain(q['answered_by'])}"
                     f" at {plain(q['answered_at'])}")  # fmt: skip
    return lines


def _unanswered(q: dict[str, Any]) -> str:
    """How an unanswered question stands: pending, expired, or withdrawn (and why)."""
    if q.get("ended") == "expired":
        return f"expired unanswered at {plain(q['ended_at'])}"
    if q.get("ended") == "retracted":
        reason = q.get("end_reason")
        return f"withdrawn: {plain(reason)}" if reason else "withdrawn by its asker"
    return "pending"


def _asked(q: dict[str, Any]) -> str:
    return f"{plain(q['id'])} [{plain(q['kind'])}] {plain(q['question'])}"


def _questions(result: Any) -> list[str]:
    """One line a question; every run's are each led by their run's id, to answer them by."""
    lines = []
    for q in result["interactions"]:
        lead = f"{plain(q['run_id'])}  " if result.get("all") else ""
        choices = ", ".join(f"{o['id']}={o['label']}" for o in q["options"])
        suffix = f"  ({plain(choices)})" if choices else ""
        form = form_fields(q.get("accepts"))
        suffix += f"  (form: {plain(form)}; answer with --json-value)" if form else ""
        lines.append(f"{lead}{plain(q['id'])}  [{plain(q['kind'])}] {plain(q['node_id'])}:"
                     f" {plain(q['question'])}{suffix}")  # fmt: skip
    return lines or ["no pending questions"]


#: How a run can end that ``resume`` goes on from.
RESUMABLE_ENDS = ("failed_resumable", "interrupted", "cancelled")
#: Statuses in which a message queued for the agent reaches it without anyone resuming the run.
_DELIVERED = ("running", "paused_waiting_human")
#: Statuses of a cluster's run that only a person's resume sets going again.
_STOPPED = ("cancelled", "failed_resumable")


def _answered(result: Any, args: argparse.Namespace | None) -> list[str]:
    if result.get("recorded_before"):
        return ["answer recorded (by the store's holder, which stopped before it could reply)"]
    state = "queued for the agent" if result.get("queued") else "recorded"
    run_id = args.run_id if args is not None else "RUN_ID"
    store = getattr(args, "store", None)
    resume = f"`iterion-nb resume {run_id}{f' --store {mask_url(store)}' if store else ''}`"
    status = result.get("run_status")
    if result.get("cluster"):
        return [_cluster_answered(result, state, run_id, resume)]
    if result.get("awaiting_worker"):  # answered through a holder: a cluster's run, not taken
        return [_awaits_worker(state, status, resume)]
    if result.get("resume_needed"):  # paused, every answer in, and its process is gone
        return [f"answer {state}; every answer run {run_id} waits for is in, but nothing"
                f" executes it: resume it with {resume}"]  # fmt: skip
    if not result.get("resumed") and status in (*_STOPPED, "interrupted"):
        return [_kept(result, run_id, status, resume)]  # nothing executes the run
    resumed = "; the run resumed" if result.get("resumed") else ""
    final = f"; it is now {status}" if result.get("waited") else ""
    return [f"answer {state}{resumed}{final}"]


def _cluster_answered(result: Any, state: str, run_id: str, resume: str) -> str:
    """What an answer to a cluster's run did, answered in this process."""
    status = result.get("run_status")
    if result.get("in_queue"):  # queued on the cluster, no worker took it up yet
        return _queued_answer(result, state)
    if result.get("resumed"):
        return f"answer {state}; a cluster worker resumed the run; it is {status}"
    later = (" (a notebook, JupyterLab, or"
             f" `iterion-nb resume {run_id} --cluster ADDRESS`)")  # fmt: skip
    if status == "paused_waiting_human" and result.get("ready"):
        if result.get("held_here"):  # the workers reach a DuckDB store only through a holder
            return (f"answer {state}; no cluster worker took the run up while this command"
                    f" held the store {result['held_here']}: one does once a process holds"
                    f" it again{later}")  # fmt: skip
        why = result.get("resume_error")
        aside = f" (this command could not queue it itself: {why})" if why else ""
        return _awaits_worker(state, status, resume, aside)
    if status == "interrupted" and result.get("awaiting_worker"):  # its worker was lost
        return _awaits_worker(state, status, resume)
    if status == "interrupted" and result.get("unheld"):  # nobody serves the file now
        return (f"answer {state}; the run is interrupted: no cluster worker can take it up"
                f" while no process holds the store {result['unheld']}; one does once a"
                f" process holds it{later}")  # fmt: skip
    if status in _STOPPED:  # no worker takes these up by itself
        return _kept(result, run_id, status, resume)
    return f"answer {state}; the run is {status}"


def _awaits_worker(state: str, status: Any, resume: str, aside: str = "") -> str:
    """A cluster's run that no worker took up yet: paused and answered, or interrupted."""
    if status == "interrupted":
        return (f"answer {state}; the run is interrupted: the first cluster worker free to take"
                f" it up resumes it (with no worker up: {resume})")  # fmt: skip
    return (f"answer {state}; no cluster worker has taken the run up yet:"
            f" the first one that comes up resumes it{aside}")  # fmt: skip


def _queued_answer(result: Any, state: str) -> str:
    """An answer whose run this command queued on the cluster, where no worker took it yet."""
    where = plain(mask_url(str(result.get("cluster_address") or "the scheduler")))
    if result.get("workers") == 0:
        return (f"answer {state}; the run waits in the cluster's queue: no worker is connected"
                f" to the scheduler at {where}; the first one that comes up resumes it (the"
                " run reads `interrupted` after a minute without one)")  # fmt: skip
    return (f"answer {state}; the run waits in the cluster's queue at {where}: a worker"
            " takes it up as soon as one has a free thread")  # fmt: skip


def _kept(result: Any, run_id: str, status: str, resume: str) -> str:
    """An answer to a run nothing executes: it waits in the store for a person's resume."""
    if result.get("queued"):  # a message for an agent that asked and went on
        return (f"answer stored; run {run_id} is {status}, so it reaches the agent when the"
                f" run is resumed: {resume}")  # fmt: skip
    return f"answer recorded; run {run_id} is {status}: it goes on when resumed with {resume}"


def _export(result: dict[str, Any], target: str, out: TextIO) -> int:
    """Write a run's answers as the YAML ``run --answers`` reads."""
    if target == "-":
        out.write(answers_yaml(result["run"], result["workflow"], result["answers"]))
        return 0
    try:
        path = write_answers(target, result["run"], result["workflow"], result["answers"])
    except RunError as err:
        raise CliError(str(err)) from None
    count = len(result["answers"])
    out.write(f"wrote {count} answer{'s' * (count != 1)} of run {result['run']} to {path}\n")
    return 0


def _pinned(result: Any) -> list[str]:
    lines = []
    for pin in result["answers"]:
        options = f" [{plain(', '.join(pin['options']))}]" if pin.get("options") else ""
        answer = plain(clip(json.dumps(pin["answer"], ensure_ascii=False)))
        lines.append(f"{plain(pin['node'])}: {plain(pin['question'])}{options}\n  -> {answer}")
    return lines or [f"run {plain(result['run'])} has no answers"]


def _cancelled(result: Any) -> list[str]:
    if result["status"] != "running":
        return [str(result["status"])]
    if result.get("queued"):  # no worker has taken it yet: it never starts
        return ["running — cancel requested: the run waits in a cluster's queue; it ends"
                " cancelled, without running a node, when a worker takes it"]  # fmt: skip
    return ["running — cancel requested: what executes the run stops it at its next"
            " heartbeat (`iterion-nb runs show` says when it has)"]  # fmt: skip


_TEXT: dict[str, Callable[[Any], list[str]]] = {
    "list": _listing,
    "show": _shown,
    "questions": _questions,
    "answers": _pinned,
    "cancel": _cancelled,
}
