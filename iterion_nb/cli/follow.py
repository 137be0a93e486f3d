"""``iterion-nb runs follow RUN``: a run's events as they are recorded, until it stops.

For a run this command does not execute: one started with ``run --detach`` on
a cluster, one a kernel or JupyterLab runs, one another terminal runs. It
reads the store (through the holder of a DuckDB file when a process holds it,
else the file — serving it meanwhile, running no workflow — or PostgreSQL
itself), prints the events recorded so far, then
each new one as it lands, and the questions the run asks with their ids. It
stops when the run finishes, fails or is cancelled — or pauses for a person,
unless ``--to-end`` — and exits with the run's outcome. Stopping it (Ctrl-C)
never touches the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from iterion_nb.api.service import event_json, interaction_json, run_json
from iterion_nb.cli.inputs import id_arg, plain
from iterion_nb.runtime.lifecycle import form_fields
from iterion_nb.runtime.ports import Store
from iterion_nb.runtime.records import Event, Interaction, Run
from iterion_nb.session.cluster import EXECUTOR
from iterion_nb.store.location import mask_url
from iterion_nb.view.text import seconds_arg

#: Exit code when ``--timeout`` ran out before the run stopped (as GNU ``timeout`` says it).
EXIT_TIMEOUT = 124
#: How often the store is read again when no doorbell rang (events ring none).
POLL_SECONDS = 0.25
#: Statuses that end a follow, and the exit code each gives.
ENDS = {"finished": 0, "failed": 1, "failed_resumable": 1, "cancelled": 1, "interrupted": 1}
#: The branch a run starts on (a fan-out's branches are named in the lines).
ROOT_BRANCH = "b0"
#: Widest a value is shown in a text line (``--json`` shows it whole).
WIDTH = 120


def add_follow(verbs: Any, common: Any) -> None:
    """Register ``runs follow`` on the ``runs`` verbs."""
    follow = verbs.add_parser(
        "follow", help="print a run's events as they happen, until it stops or pauses"
    )
    follow.add_argument("run_id", type=id_arg)
    follow.add_argument(
        "--to-end", action="store_true",
        help="keep following through pauses, until the run finishes, fails or is cancelled",
    )  # fmt: skip
    follow.add_argument(
        "--timeout", type=seconds_arg, metavar="SECONDS",
        help=f"give up after this long (exit {EXIT_TIMEOUT}); the run is not touched",
    )  # fmt: skip
    common(follow)


class Follower:
    """Prints one run's new events and questions, and says when following ends."""

    def __init__(self, store: Store, args: argparse.Namespace, out: TextIO) -> None:
        self.store = store
        self.args = args
        self.out = out
        self.after = 0
        self.asked: set[str] = set()
        #: Pending questions whose asking event was not among the events read with them.
        self.unannounced: set[str] = set()
        self.first = True
        #: The last "waits for a worker" line said (said again only once the state changed).
        self.noted: str | None = None

    async def step(self) -> int | None:
        """Print what is new; the exit code if following ends here, else ``None``."""
        run_id = self.args.run_id
        # the status first, then the events: a run's stop commits with its event, so
        # every event up to the status read is printed before following ends
        record = await self.store.get_run(run_id)
        events = await self.store.events(run_id, after=self.after)
        pending = {
            q.id: q for q in await self.store.pending_interactions(run_id) if q.kind != "await"
        }
        for event in events:
            self.after = event.seq
            self._write({"event": event_json(event)}, _event_line(event))
            if event.type == "human_input_requested":  # the question, right where it was asked
                self._ask(pending.get(str((event.data or {}).get("interaction_id"))))
        # A question whose event is not in yet (it committed between the two reads) waits
        # for it, one read at most: then it is printed right under it, as it was asked.
        # The first read's backlog, and questions no event announces, go out at once.
        waiting = {q for q in pending if q not in self.asked}
        for question_id in waiting if self.first else waiting & self.unannounced:
            self._ask(pending[question_id])
        self.unannounced, self.first = waiting - self.asked, False
        self._waiting_note(record)
        return self._end(record)

    def _waiting_note(self, record: Run) -> None:
        """Say once (text only) that a run waits for a cluster worker: it has no event to show."""
        cluster = record.launch.get("executor") == EXECUTOR
        if record.status == "running" and record.lease is not None and record.lease.queued:
            since = f"{record.lease.since:%H:%M:%S} UTC"
            note = (f"run {plain(record.id)} waits in a cluster's queue (since {since}):"
                    " no worker has taken it up yet")  # fmt: skip
        elif record.status == "interrupted" and cluster:
            note = (f"run {plain(record.id)} is interrupted: no cluster worker executes it;"
                    " the first one that comes up takes it up")  # fmt: skip
        else:
            self.noted = None
            return
        if note != self.noted and not self.args.json:
            self.out.write(note + "\n")
            self.out.flush()
        self.noted = note

    def _ask(self, question: Interaction | None) -> None:
        """Print a pending question once."""
        if question is not None and question.id not in self.asked:
            self.asked.add(question.id)
            self._write({"question": interaction_json(question)}, asked_line(question))

    def _end(self, record: Run) -> int | None:
        status = record.status
        cluster = record.launch.get("executor") == EXECUTOR
        if status == "interrupted" and cluster:  # the cluster takes it back by itself
            return None
        if status == "paused_waiting_human" and not self.args.to_end:
            code = 0
        elif status in ENDS:
            code = ENDS[status]
        else:
            return None
        self._write({"run": run_json(record, full=True)}, self._last_line(record))
        return code

    def _last_line(self, record: Run) -> str:
        where = f" --store {mask_url(self.args.store)}" if self.args.store else ""
        line = f"run {plain(record.id)} is {record.status}"
        if record.error:
            line += f": {plain(_clip(record.error))}"
        if record.status == "paused_waiting_human":
            line += (f" (answer with `iterion-nb runs answer {record.id} ID TEXT{where}`;"
                     " --to-end follows on)")  # fmt: skip
        elif record.status in ("failed_resumable", "cancelled", "interrupted"):
            line += f" (`iterion-nb resume {record.id}{where}` goes on from its checkpoint)"
        return line

    def _write(self, data: dict[str, Any], line: str) -> None:
        if self.args.json:
            self.out.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
        else:
            self.out.write(line + "\n")
        self.out.flush()


def _clip(text: str, width: int = WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _compact(value: Any) -> str:
    return _clip(json.dumps(value, ensure_ascii=False, default=str))


def _event_line(event: Event) -> str:
    """One event as a terminal line: time, type, node, then what it says."""
    data = event.data or {}
    node = f" {event.node_id}" if event.node_id else ""
    if event.branch_id and event.branch_id != ROOT_BRANCH:  # a fan-out's branch
        node += f" [{event.branch_id}]"
    detail = _detail(event.type, data)
    if not node:  # a run's own event: what it says, in the node's column
        detail = " " + detail.lstrip(": ")
    return plain(f"{event.at:%H:%M:%S}  {event.type:<21}{node}{detail}".rstrip())


def _calls(data: dict[str, Any]) -> str:
    # tool names (a dict per call in some backends' events)
    calls = [
        str(c.get("name", "?") if isinstance(c, dict) else c) for c in data.get("tool_calls") or []
    ]
    return f", calls {', '.join(calls)}" if calls else ""


def _loop(data: dict[str, Any]) -> str:
    return f" (loop {data['loop']}, round {data.get('iteration')})" if data.get("loop") else ""


def _error(data: dict[str, Any]) -> str:
    return f": {_clip(str(data.get('error') or data.get('stderr') or data))}"


#: What a text line says after an event's type and node, by type (others: their data).
_DETAILS: dict[str, Callable[[dict[str, Any]], str]] = {
    "node_finished": lambda d: f" -> {_compact(d.get('output'))}",
    "node_failed": _error,
    "run_failed": _error,
    "tool_error": _error,
    "edge_selected": lambda d: f" -> {d.get('to')}{_loop(d)}",
    "tool_called": lambda d: f": {_clip(str(d.get('command')))}",
    "llm_request": lambda d: f": {d.get('model')}, turn {d.get('turn', 0)}",
    "llm_step_finished": lambda d: (
        f": {d.get('stop_reason') or 'done'},"
        f" {d.get('tokens_in', 0)}+{d.get('tokens_out', 0)} tokens{_calls(d)}"
    ),
    # the question itself follows as an "asked:" line, with its options
    "human_input_requested": lambda d: f": {d.get('interaction_id')} [{d.get('kind')}]",
    "interaction_answered": lambda d: f": {d.get('interaction_id')} by {d.get('answered_by')}",
    "run_paused": lambda d: f": waiting on {d.get('interaction_id')}",
    "artifact_written": lambda d: f": {d.get('name')} v{d.get('version')}",
    # who executes the run from here (a resume after a crash: the process taking over)
    **dict.fromkeys(
        ("run_started", "run_resumed"),
        lambda d: f": process {d['pid']} on {d.get('host')}" if "pid" in d else "",
    ),
    **dict.fromkeys(("node_started", "run_cancelled", "run_finished"), lambda d: ""),
}


def _detail(kind: str, data: dict[str, Any]) -> str:
    shown = _DETAILS.get(kind)
    if shown is not None:
        return shown(data)
    return f" {_compact(data)}" if data else ""


def asked_line(question: Interaction) -> str:
    """An ``asked:`` line: the question's id, kind and text, its options or its form's fields."""
    options = "|".join(o.id for o in question.options)
    text = f"  asked: {question.id} [{question.kind}] {question.question}"
    form = form_fields(question.accepts)
    if options:
        text += f" (options: {options})"
    if form:
        text += f" (form: {form}; answer with --json-value)"
    return plain(text)


async def follow_run(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    """Follow the run until it stops; its exit code (``EXIT_TIMEOUT`` when time ran out).

    ``--timeout`` holds whatever the store does meanwhile (a holder that hangs,
    a PostgreSQL server away). Stopped (Ctrl-C, SIGTERM), it says so on stderr
    and raises ``CancelledError``.

    Raises:
        IterionError: No such run, or the store cannot be read.
    """
    loop = asyncio.get_running_loop()
    deadline = None if args.timeout is None else loop.time() + args.timeout
    try:
        async with asyncio.timeout_at(deadline) as limit:
            return await _follow(Follower(store, args, out), store, args.run_id)
    except TimeoutError:
        if not limit.expired():  # raised inside, not the deadline's
            raise
        return _timed_out(args)
    except asyncio.CancelledError:  # nothing executes here: the run is not touched
        sys.stderr.write(_left(args, f"stopped following run {args.run_id}"))
        raise


async def _follow(follower: Follower, store: Store, run_id: str) -> int:
    bell = store.doorbell  # type: ignore[attr-defined]
    while True:
        with bell.arm(run_id) as ticket:
            code = await follower.step()
            if code is not None:
                return code
            await ticket.wait(timeout=POLL_SECONDS)


def _timed_out(args: argparse.Namespace) -> int:
    sys.stderr.write(_left(args, f"gave up following run {args.run_id} after {args.timeout:g} s"))
    return EXIT_TIMEOUT


def _left(args: argparse.Namespace, what: str) -> str:
    where = f" --store {mask_url(args.store)}" if args.store else ""
    return (f"iterion-nb: {what}; it goes on as it was"
            f" (`iterion-nb runs show {args.run_id}{where}`)\n")  # fmt: skip
