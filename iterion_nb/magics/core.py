"""The magics: compile a cell, launch runs in the kernel's loop, answer, wait — never block it.

Every ``%iterion`` / ``%%iterion`` call is awaited: an input transformer
rewrites the call IPython generates into ``await ...``, so IPython runs the
cell as a coroutine on the kernel's event loop. ``%iterion wait RUN`` thus
waits while background runs (and widget messages) keep being served.
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import concurrent.futures
import contextlib
import inspect
import json
import keyword
import os
import re
import shlex
import sys
import types
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import HTML, Markdown

from iterion_nb import safe_data
from iterion_nb.dsl.diagnostics import more_not_shown
from iterion_nb.errors import (
    RESUME_APPLIES_EXPIRY,
    AlreadyAnsweredError,
    CompileError,
    InvalidAnswerError,
    IterionError,
    NotFoundError,
    RunError,
    StoreError,
)
from iterion_nb.ir import analyze, compile_stored
from iterion_nb.ir import model as m
from iterion_nb.ir.models import scripted_nodes
from iterion_nb.magics.display import Table, diagnostics_table
from iterion_nb.magics.results import Answered, Deferred, LiveRun, Questions, inbox, not_pending
from iterion_nb.report.build import format_for
from iterion_nb.runtime import replay
from iterion_nb.runtime.lifecycle import FORM_REFUSAL
from iterion_nb.runtime.records import RUN_STATUSES, Run
from iterion_nb.runtime.values import preset_values, resolve_vars
from iterion_nb.runtime.wire import interaction_json
from iterion_nb.session import Session
from iterion_nb.session.cluster import CLUSTER_ENV, EXECUTOR, ClusterStoreError, DaskExecutor
from iterion_nb.session.core import SourceChangedError
from iterion_nb.session.launch import (
    attachment_values,
    read_answers,
    unscripted_refusal,
    write_answers,
)
from iterion_nb.store.location import (
    is_store_url,
    mask_secrets,
    missing_store,
    resolve_store_path,
    store_url,
    url_password,
)
from iterion_nb.store.remote import RemoteStore
from iterion_nb.view.text import (
    already_answered,
    count_arg,
    id_arg,
    limit_arg,
    plain,
    seconds_arg,
    store_arg,
)
from iterion_nb.widgets import InboxWidget

#: Sessions by store file, kept across ``%reload_ext`` so live runs stay reachable.
_SESSIONS: dict[Path | str, Session] = {}
#: The store the magics used last (also kept across ``%reload_ext``).
_LAST: list[Path | str] = []
#: Sessions whose cluster (``ITERION_NB_CLUSTER``'s) did not answer: the next magic reads it again.
_UNREACHED: weakref.WeakSet[Session] = weakref.WeakSet()
BACKENDS = ("claw", "claude_code")
_CALL = re.compile(r"(?<!await )(get_ipython\(\)\.run_(?:line|cell)_magic\('iterion',)")


#: A value IPython could not expand (``{expr}`` or ``$name`` left as typed).
_UNEXPANDED = re.compile(
    r"\{([A-Za-z_][\w.]*(?:\[[^\]{}]*\])*)\}|\$([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
)


def _shown(text: str) -> str:
    r"""``text`` fit for a cell's error: control characters and lone surrogates escaped.

    What a user typed is echoed in the errors; an escape sequence in it
    (``\x1b[31m``) would recolour the output or retitle a terminal. Line
    breaks stay (a compile error's report, with its carets, has several lines).
    """
    lines = text.strip().encode("utf-8", "backslashreplace").decode("utf-8").split("\n")
    return "\n".join(plain(line) for line in lines)


def _path_arg(text: str) -> str:
    """A file or store path: one without U+0000, which no file name holds."""
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"holds U+0000, which no path can: '{_shown(text)}'")
    return text


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    """A magic's UsageError, its text made safe to show (see :func:`_shown`)."""
    try:
        yield
    except UsageError as err:
        raise UsageError(_shown(str(err))) from None


async def _safely_said(coro: Coroutine[Any, Any, Any]) -> Any:
    with _one_line():
        return await coro


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line (IPython's UsageError)."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise UsageError(message or self.format_usage())


def _cell_parser() -> _Parser:
    p = _Parser(prog="%%iterion", add_help=False)
    p.add_argument("name", nargs="?", help="bind the compiled workflow to this name")
    p.add_argument("--run", action="store_true", help="start a run in the background")
    p.add_argument("--var", action="append", default=[], metavar="K=V")
    p.add_argument("--scenario", metavar="EXPR", help="a scenario dict or file path (Python)")
    p.add_argument("--backend", help=f"one of {', '.join(BACKENDS)} (default: the workflow's)")
    p.add_argument(
        "--store", type=store_arg, help="the run store (default: .iterion or ITERION_NB_STORE)"
    )
    p.add_argument("--preset", help="start from one of the workflow's presets: (--var wins)")
    p.add_argument("--attach", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--answers", type=_path_arg, metavar="FILE", help="pinned answers")
    p.add_argument("--answers-from", type=id_arg, metavar="RUN", help="pin run RUN's answers")
    return p


def _line_parser() -> _Parser:
    p = _Parser(prog="%iterion", add_help=False)
    verbs = p.add_subparsers(dest="verb", parser_class=_Parser)
    runs = verbs.add_parser("runs", add_help=False)
    runs.add_argument("--status", choices=RUN_STATUSES, metavar="STATUS")
    runs.add_argument("--limit", type=limit_arg, default=20)
    inbox = verbs.add_parser("inbox", add_help=False)
    inbox.add_argument("run_id", nargs="?", type=id_arg)
    questions = verbs.add_parser("questions", add_help=False)
    questions.add_argument("run_id", type=id_arg)
    questions.add_argument("--wait", type=count_arg, default=0, metavar="N")
    questions.add_argument("--timeout", type=seconds_arg, default=60.0, metavar="S")
    answer = verbs.add_parser("answer", add_help=False)
    answer.add_argument("run_id", type=id_arg)
    answer.add_argument("interaction_id", type=id_arg)
    answer.add_argument("text", nargs="+")
    answer.add_argument("--if-pending", action="store_true", dest="if_pending")
    answer.add_argument("--json", action="store_true", dest="json_value")
    resume = verbs.add_parser("resume", add_help=False)
    resume.add_argument("run_id", type=id_arg)
    resume.add_argument("--scenario", metavar="EXPR")
    resume.add_argument("--workflow", metavar="NAME")
    resume.add_argument("--force", action="store_true")
    for verb in ("show", "cancel", "wait"):
        verbs.add_parser(verb, add_help=False).add_argument("run_id", type=id_arg)
    pinned = verbs.add_parser("answers", add_help=False)
    pinned.add_argument("run_id", type=id_arg)
    pinned.add_argument("--export", type=_path_arg, metavar="FILE")
    report = verbs.add_parser("report", add_help=False)
    report.add_argument("run_id", type=id_arg)
    report.add_argument("--format", choices=("html", "md", "json"))
    report.add_argument("-o", "--output", type=_path_arg)
    verbs.choices["wait"].add_argument("--timeout", type=seconds_arg, metavar="S")
    for sub in verbs.choices.values():
        sub.add_argument("--store", type=store_arg)
    return p


USAGE = (
    "%iterion runs | show RUN | inbox [RUN] | questions RUN [--wait N]"
    " | answer RUN IID TEXT [--if-pending] [--json]"
    " | resume RUN [--workflow NAME [--force]] | answers RUN [--export FILE]"
    " | cancel RUN | wait RUN | report RUN [--format html|md|json] [-o FILE]"
    "  (each takes --store PATH)"
)


def _split(line: str) -> list[str]:
    """The line's words, as :func:`shlex.split` reads them, in time linear in its length.

    shlex builds each word one character at a time (quadratic: 14 s or more for a
    1 MB ``--var topic={doc}``); this reads whole runs of characters, and leaves
    only a line it refuses (a quote left open) to shlex, for its message.
    """
    words: list[str] = []
    at = _BLANKS.match(line).end()  # type: ignore[union-attr]  # (it matches nothing too)
    while at < len(line):
        word = _WORD.match(line, at)
        end = word.end() if word else at
        if end < len(line) and line[end] not in " \t\r\n":
            try:
                return shlex.split(line)  # (says what is wrong, or reads what this did not)
            except ValueError as err:
                raise UsageError(f"%iterion: cannot read the arguments: {err}") from None
        words.append("".join(_unquoted(part) for part in _PART.finditer(line, at, end)))
        at = _BLANKS.match(line, end).end()  # type: ignore[union-attr]
    return words


def _unquoted(part: re.Match[str]) -> str:
    bare, single, double, escaped = part.groups()
    if bare is not None:
        return str(bare)
    if single is not None:
        return str(single)
    if double is not None:  # inside double quotes a backslash escapes only " and itself
        return _QUOTED_ESCAPE.sub(r"\1", double)
    return str(escaped)


# a word, as shlex (POSIX, split on blanks) reads one: runs of plain characters, quoted
# strings and escaped characters, possessive so that a quote left open fails at once
_WORD = re.compile(r"""(?:[^ \t\r\n'"\\]++|'[^']*+'|"[^"\\]*+(?:\\.[^"\\]*+)*+"|\\.)++""", re.S)
_PART = re.compile(r"""([^ \t\r\n'"\\]++)|'([^']*+)'|"([^"\\]*+(?:\\.[^"\\]*+)*+)"|\\(.)""", re.S)
_QUOTED_ESCAPE = re.compile(r'\\(["\\])')
_BLANKS = re.compile(r"[ \t\r\n]*+")


@magics_class
class IterionMagics(Magics):
    """``%%iterion`` defines (and launches) workflows; ``%iterion`` works with runs."""

    shell: InteractiveShell

    # -- plumbing ------------------------------------------------------------
    def session(self, store: str | None = None, *, create: bool = False) -> Session:
        """The session on ``store`` (default: the last store used, else the default one).

        A store is a DuckDB path or a ``postgresql://`` URL (used as given).
        Only ``create`` (a magic that starts runs) makes a store that is not
        there; the others refuse it, as the CLI does (see :func:`_require_store`).
        A store that fails to open, or is refused, is not remembered: the next
        magic without ``--store`` uses the one before it.
        """
        key: Path | str = store or ""
        try:
            if store:
                key = store if is_store_url(store) else resolve_store_path(store)
            else:
                key = _LAST[-1] if _LAST else (store_url() or resolve_store_path(None))
            session = _SESSIONS.get(key)
            if session is None or getattr(session.store, "closed", False):
                if not create:
                    _require_store(key)
                session = _SESSIONS[key] = Session(key)
            elif session in _UNREACHED:
                _recluster(session)
        except IterionError as err:  # one line (a driver's message may span several), masked
            # the password of the store that failed: named, the last one, or the default
            said, password = " ".join(str(err).split()), url_password(str(key))
            raise UsageError(f"%iterion: {mask_secrets(said, password)}") from None
        _LAST[:] = [key]  # only once it opened
        return session

    def _scenario(self, expr: str | None) -> Any:
        """``--scenario``: a Python expression (a dict, a path), else the path of a file as typed.

        ``--scenario sc`` (a dict) and ``--scenario path_var`` evaluate;
        ``--scenario /tmp/x.yaml`` is no Python, so it names the file itself.
        Text that neither evaluates to a dict or a file nor names one is refused,
        saying both.
        """
        if expr is None:
            return None
        value: Any = None
        failed: str | None = None
        try:
            value = self.shell.ev(expr)  # type: ignore[no-untyped-call]
        except Exception as err:  # (a SyntaxError's place is always line 1 of <string>)
            failed = f"{type(err).__name__}: {err.msg if isinstance(err, SyntaxError) else err}"
        else:
            if isinstance(value, dict):
                return value
            if isinstance(value, str | os.PathLike) and Path(value).expanduser().is_file():
                return os.fspath(Path(value).expanduser())
        typed = Path(expr).expanduser()
        if typed.is_file():  # the text names a file, whatever it evaluates to
            return os.fspath(typed)
        if failed is not None:
            raise UsageError(
                f"--scenario {expr}: no scenario file {os.fspath(typed)!r}, nor a Python"
                f" expression that evaluates ({failed}); give a scenario file's path or a dict"
            )
        if isinstance(value, str | os.PathLike):
            raise UsageError(f"--scenario {expr}: no scenario file {os.fspath(value)!r}")
        raise UsageError(
            f"--scenario {expr}: expected a dict or a file path, got {type(value).__name__}"
        )

    def _awaitable(
        self, coro: Coroutine[Any, Any, Any], what: str = "%iterion", *, reads: bool = False
    ) -> Any:
        """In the kernel's running loop, a task the cell awaits; elsewhere, run it to the end.

        A cell read after ``%load_ext`` awaits it (the transformer made it so).
        The cell that loads the extension was read before the transformer
        existed and cannot: there the task runs on, and its result (or its
        one-line error) shows in the cell when it is done — except a command
        that only ``reads`` a store doing its I/O on threads of its own (DuckDB
        held here, PostgreSQL: not a holder's client, whose calls and take-over
        of the file go through this loop): that one runs to its end at once on
        a loop of its own, so the cell shows its result itself, as a notebook
        executed by nbconvert saves it (nbclient drops what comes once the cell
        is over). A UsageError's text is made safe to show (see :func:`_shown`).
        """
        coro = _safely_said(coro)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            from IPython.core.async_helpers import get_asyncio_loop

            return get_asyncio_loop().run_until_complete(coro)  # type: ignore[no-untyped-call]
        if reads and not _awaited():
            with concurrent.futures.ThreadPoolExecutor(1, "iterion-magic") as aside:
                return aside.submit(asyncio.run, coro).result()
        return Deferred(loop.create_task(coro), what)

    def _expanded(self, prog: str, *values: str | None, rest: Sequence[str] = ()) -> None:
        """Refuse a value IPython left unexpanded, saying why.

        Either a ``{…}`` of the line names nothing (``{run.id}`` of no ``run``):
        IPython then leaves the whole line as typed, so that one is named,
        wherever it is (``rest``: the line's other words); or IPython did not
        expand it although it could be (see :func:`_not_expanded`).
        """
        typed = [hit for value in values for hit in _UNEXPANDED.finditer(value or "")]
        if not typed:
            return
        for match in [*typed, *(hit for word in rest for hit in _UNEXPANDED.finditer(word))]:
            expr = match.group(1) or match.group(2)
            try:
                self.shell.ev(expr)  # type: ignore[no-untyped-call]
            except Exception as err:
                raise UsageError(
                    f"{prog}: cannot expand {match.group(0)}: {type(err).__name__}: {err}"
                ) from None
        first = typed[0]
        raise UsageError(_not_expanded(prog, first.group(0), first.group(1) or first.group(2)))

    # -- %%iterion -----------------------------------------------------------
    @cell_magic("iterion")  # type: ignore[arg-type]
    def iterion_cell(self, line: str, cell: str) -> Any:
        """``%%iterion [NAME] [--run] [--var k=v] [--scenario EXPR] [--backend B] [--store P] …``.

        ``--answers FILE`` / ``--answers-from RUN`` pin answers (see docs/jupyter.md).
        """
        with _one_line():
            return self._cell(line, cell)

    def _cell(self, line: str, cell: str) -> Any:
        args = _cell_parser().parse_args(_split(line))
        self._expanded("%%iterion", args.store)
        given = _checked_options(args)
        label = f"<cell {args.name}>" if args.name else "<cell>"
        result = analyze(cell, label)
        if result.diagnostics:
            table = diagnostics_table(label, cell, result.diagnostics, first_line=2)
            self.shell.display_pub.publish(
                {"text/plain": repr(table), "text/html": table._repr_html_()}
            )
        wf = result.workflow
        if wf is None:
            more = more_not_shown(len(result.diagnostics), result.truncated)
            raise UsageError(f"{label}: the workflow does not compile (see the table above){more}")
        self._bind(args.name, wf)
        if not args.run:
            return self._awaitable(_nothing())
        try:
            values = resolve_vars(wf, {**preset_values(wf, args.preset), **given})
        except IterionError as err:
            raise UsageError(f"%%iterion: {err}") from None
        scenario = self._scenario(args.scenario)
        files = _attachments(wf, args.attach)
        try:
            pins = None if args.answers is None else read_answers(args.answers, wf)
        except IterionError as err:
            raise UsageError(f"%%iterion --answers: {err}") from None
        if scenario is None:  # as `iterion-nb run` refuses it: before anything is recorded
            refusal = unscripted_refusal(wf, "%%iterion --run", backend=args.backend, give=GIVE)
            if refusal is not None:
                raise UsageError(refusal)
        session = self.session(args.store, create=True)
        run_id = uuid.uuid4().hex[:12]

        self._warn_if_underscore_is_taken()

        async def start() -> LiveRun:
            await _reach_cluster(session, "%%iterion --run")
            try:
                await session.start(
                    wf, values, run_id=run_id, source=cell, scenario=scenario,
                    backend=args.backend, answers=pins, answers_from=args.answers_from,
                    attachments=files,
                )  # fmt: skip
            except IterionError as err:
                raise UsageError(f"%%iterion --run: {err}") from None
            return await LiveRun(session, run_id, wf).shown()

        return self._awaitable(start(), "%%iterion --run")

    def _bind(self, given: str | None, wf: m.Workflow) -> None:
        """Bind ``wf`` to ``given`` (checked already), else to its name when Python takes it.

        Shadowing a builtin (``%%iterion print``) is said, not refused: the
        notebook may mean it, and ``del NAME`` brings the builtin back.
        """
        name = given or wf.name
        if not name.isidentifier() or keyword.iskeyword(name):
            print(
                f"note: workflow {name!r} is bound to no Python name ({_unbindable(name)}):"
                " name one with %%iterion NAME"
            )
            return
        if hasattr(builtins, name) and name not in self.shell.user_ns:
            print(
                f"note: {name} now names this workflow, not Python's builtin {name}"
                f" (del {name} brings the builtin back)"
            )
        self.shell.user_ns[name] = wf

    def _warn_if_underscore_is_taken(self) -> None:
        """Say so when ``run = _`` would not get this run (the notebook assigned ``_``)."""
        hook = self.shell.displayhook
        ns = self.shell.user_ns
        if "_" in ns and ns["_"] is not getattr(hook, "_", None):
            # the number IPython files this cell's result under (Out[n]): the displayhook's
            # (IPython 9 counts the cell being run already, so execution_count is one more)
            n = getattr(hook, "prompt_count", self.shell.execution_count)
            print(
                f"note: this notebook assigned `_`, so IPython no longer updates it: take this"
                f" run with `run = Out[{n}]` (or `del _` to get `_` back)"
            )

    # -- %iterion ------------------------------------------------------------
    @line_magic("iterion")  # type: ignore[arg-type]
    def iterion_line(self, line: str) -> Any:
        """``%iterion runs | inbox [RUN] | answer RUN IID TEXT | resume | cancel | wait RUN``."""
        with _one_line():
            return self._line(line)

    def _line(self, line: str) -> Any:
        words = _split(line)
        if not words:
            raise UsageError(USAGE)
        if words[0] not in VERBS:
            raise UsageError(f"%iterion: unknown command {words[0]!r}; {USAGE}")
        args = _line_parser().parse_args(words)
        prog = f"%iterion {args.verb}"
        self._expanded(prog, *(getattr(args, k, None) for k in _ID_ARGS), rest=words)
        session = self.session(args.store)
        action: Callable[[Session, argparse.Namespace], Awaitable[Any]] = getattr(
            self, f"_{args.verb}"
        )
        # a remote store's calls go through this loop (its batches, a take-over of the file):
        # never block the loop on one of them
        reads = args.verb in _READS and not getattr(args, "wait", 0)
        reads = reads and not isinstance(session.store, RemoteStore)
        return self._awaitable(_guarded(action, session, args), prog, reads=reads)

    async def _runs(self, session: Session, args: argparse.Namespace) -> Table:
        runs = await session.runs(status=args.status, limit=args.limit)
        rows = [
            [r.id, r.workflow, r.status, r.created_at.isoformat(timespec="seconds"), r.error or ""]
            for r in runs
        ]
        title = f"{len(rows)} run(s)" + (f" with status {args.status}" if args.status else "")
        return Table(title, ["id", "workflow", "status", "created", "error"], rows)

    async def _show(self, session: Session, args: argparse.Namespace) -> LiveRun:
        await session.store.get_run(args.run_id)
        return await LiveRun(session, args.run_id).shown()

    async def _inbox(self, session: Session, args: argparse.Namespace) -> InboxWidget:
        if args.run_id:
            await session.store.get_run(args.run_id)
        widget = inbox(session, args.run_id)
        await widget.refresh()
        return widget

    async def _questions(self, session: Session, args: argparse.Namespace) -> Questions:
        await session.store.get_run(args.run_id)
        try:
            return await _asked(session, args)
        except (asyncio.CancelledError, KeyboardInterrupt):  # interrupted: the run goes on
            raise UsageError(_stopped_waiting("questions", args.run_id)) from None

    async def _answer(self, session: Session, args: argparse.Namespace) -> Answered:
        await session.store.get_run(args.run_id)
        text = " ".join(args.text)
        if args.if_pending:
            try:
                asked = await session.store.get_interaction(args.interaction_id)
            except NotFoundError as err:
                raise err.of_run(args.run_id) from None
            if asked.run_id != args.run_id:  # as an answer without --if-pending is refused
                raise NotFoundError("interaction", args.interaction_id).of_run(args.run_id)
            if not asked.pending:
                status = (await session.store.get_run(args.run_id)).status
                return Answered(
                    {"queued": False, "resumed": False, "run_status": status},
                    f"{not_pending(asked)} — nothing sent",
                )
        answer: Any = text
        if args.json_value:
            try:
                answer = safe_data.loads(text, "the answer")
            except safe_data.DataError as err:
                raise UsageError(f"%iterion answer --json: {err}") from None
        try:
            outcome = await session.run(args.run_id).answer(
                args.interaction_id, answer, answered_by="magic"
            )
        except AlreadyAnsweredError:  # who answered, and what: as the CLI says it
            asked = await session.store.get_interaction(args.interaction_id)
            raise UsageError(
                f"%iterion answer: {already_answered(interaction_json(asked))}"
            ) from None
        except InvalidAnswerError as err:
            if FORM_REFUSAL not in str(err) or args.json_value:
                raise
            raise UsageError(
                f"%iterion answer: {err} (the answer was taken as text: give a form's fields"
                f" as JSON with --json, e.g. %iterion answer {args.run_id} {args.interaction_id}"
                """ --json '{"field": true}')"""
            ) from None
        return Answered(outcome, run_id=args.run_id)

    def _workflow_named(self, name: str | None, force: bool) -> m.Workflow | None:
        """``resume --workflow NAME``: the workflow a ``%%iterion`` cell bound to NAME.

        Raises:
            UsageError: ``--force`` without ``--workflow``; NAME binds no workflow.
        """
        if name is None:
            if force:
                raise UsageError(f"%iterion resume: {FORCE_NEEDS_WORKFLOW}")
            return None
        wf = self.shell.user_ns.get(name)
        if not isinstance(wf, m.Workflow):
            raise UsageError(
                f"%iterion resume --workflow {name}: no workflow is named {name!r} in this"
                f" kernel: define it in a `%%iterion {name}` cell first"
            )
        return wf

    async def _resume(self, session: Session, args: argparse.Namespace) -> LiveRun:
        workflow = self._workflow_named(args.workflow, args.force)
        scenario = self._scenario(args.scenario)
        record = await session.store.get_run(args.run_id)
        recorded = record.launch.get("scenario")
        if scenario is None and recorded is None and _scripted(record):
            raise UsageError(
                f"%iterion resume: run {args.run_id!r} uses the scripted model and recorded no"
                " scenario: pass --scenario EXPR (a dict or a file)"
            )
        await _reach_cluster(session, "%iterion resume")
        try:
            await session.resume(
                args.run_id, workflow=workflow, force=args.force, scenario=scenario,
                answered_by="magic",
            )  # fmt: skip
        except SourceChangedError as err:
            how = f"add --force (%iterion resume {args.run_id} --workflow {args.workflow} --force)"
            given = f"workflow {args.workflow!r} of this kernel"
            said = err.refusal(how, given)
            raise UsageError(f"%iterion resume: {said}; nothing changed") from None
        if scenario is not None:
            print(f"resuming run {args.run_id} with the scenario given (--scenario)")
        elif recorded is not None:
            print(f"resuming run {args.run_id} with the scenario it recorded when it started")
        return await LiveRun(session, args.run_id).shown()

    async def _cancel(self, session: Session, args: argparse.Namespace) -> str:
        await session.store.get_run(args.run_id)
        status = await session.run(args.run_id).cancel()
        if status in ("finished", "failed"):  # as `iterion-nb cancel` says it (exit 1)
            raise UsageError(
                f"%iterion cancel: run {args.run_id} already {status}; nothing to cancel"
            )
        return status

    async def _report(self, session: Session, args: argparse.Namespace) -> Any:
        text = await session.run(args.run_id).report(args.format, args.output)
        if args.output is not None:
            return f"wrote the report of run {args.run_id} to {args.output}"
        shown = format_for(None, args.format)
        if shown == "html":
            return HTML(text)  # type: ignore[no-untyped-call]
        if shown == "json":  # the report's data, for code: a dict
            return json.loads(text)
        return Markdown(text)  # type: ignore[no-untyped-call]

    async def _answers(self, session: Session, args: argparse.Namespace) -> Any:
        run = await session.store.get_run(args.run_id)
        pins = replay.export(await session.store.interactions(args.run_id))
        if args.export is None:
            rows = [[p["node"], p["question"], ", ".join(p.get("options", ())),
                     json.dumps(p["answer"], ensure_ascii=False)] for p in pins]  # fmt: skip
            title = f"{len(rows)} answer(s) of run {run.id}"
            return Table(title, ["node", "question", "options", "answer"], rows)
        try:
            write_answers(args.export, run.id, run.workflow, pins)
        except RunError as err:
            raise UsageError(f"%iterion answers: {err}") from None
        return f"wrote {len(pins)} answer(s) of run {run.id} to {args.export}"

    async def _wait(self, session: Session, args: argparse.Namespace) -> str:
        await session.store.get_run(args.run_id)
        try:
            return await session.run(args.run_id).wait(timeout=args.timeout)
        except TimeoutError:
            raise UsageError(
                f"%iterion wait: run {args.run_id!r} still running after {args.timeout} s"
            ) from None
        except (asyncio.CancelledError, KeyboardInterrupt):  # interrupted: the run goes on
            raise UsageError(_stopped_waiting("wait", args.run_id)) from None


#: The ``%iterion`` commands.
VERBS = (
    "runs", "show", "inbox", "questions", "answer", "resume", "cancel", "wait", "report", "answers",
)  # fmt: skip
#: The commands that only read the store (a ``questions`` that waits for none).
_READS = ("runs", "questions", "answers", "report")
#: The line magics' arguments that name a run, a question or a place.
_ID_ARGS = ("run_id", "interaction_id", "store", "output", "scenario", "export", "workflow")
#: ``%iterion resume --force`` without ``--workflow``: there is nothing to force.
FORCE_NEEDS_WORKFLOW = (
    "--force needs --workflow NAME: without it the run resumes its recorded source"
    " (give the edited workflow, defined in a `%%iterion NAME` cell, with --workflow NAME --force)"
)


#: How ``%%iterion --run`` says to give a scenario (see ``unscripted_refusal``).
GIVE = "--scenario EXPR (a scenario file or dict; examples/*.scenario.yaml are samples)"


def _unbindable(name: str) -> str:
    """Why Python cannot bind ``name``."""
    if keyword.iskeyword(name):
        return "it is a Python keyword"
    return "a Python identifier is needed: letters, digits and _, not starting with a digit"


def _checked_options(args: argparse.Namespace) -> dict[str, str]:
    """Check ``%%iterion``'s NAME and ``--backend``; its ``--var K=V`` options, as a dict.

    Raises:
        UsageError: One line naming the option and what is wrong with it.
    """
    if args.name is not None:
        _check_name(args.name)
    if args.backend is not None and args.backend not in BACKENDS:
        raise UsageError(
            f"%%iterion: unknown backend {args.backend!r} (known: {', '.join(BACKENDS)})"
        )
    given = {}
    for item in args.var:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"%%iterion: --var expects KEY=VALUE, got {item!r}")
        given[key] = value
    return given


def _check_name(name: str) -> None:
    """Refuse a ``%%iterion NAME`` that Python cannot bind (it would bind nothing, silently)."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(f"%%iterion: cannot bind the workflow to {name!r}: {_unbindable(name)}")


def _attachments(wf: m.Workflow, items: list[str]) -> dict[str, str]:
    """``--attach NAME=PATH`` options, checked now (one line, not a failed run task)."""
    files = {}
    for item in items:
        key, sep, path = item.partition("=")
        if not sep or not key:
            raise UsageError(f"%%iterion: --attach expects NAME=PATH, got {item!r}")
        files[key] = path
    try:
        attachment_values(wf, files)
    except IterionError as err:
        raise UsageError(f"%%iterion: {err}") from None
    return files


async def _asked(session: Session, args: argparse.Namespace) -> Questions:
    """The run's questions, once it asked ``--wait`` of them (or said why it will not)."""
    store, bell = session.store, getattr(session.store, "doorbell", None)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout
    while True:
        record = await store.get_run(args.run_id)  # before the questions: all of them in
        asked = [q for q in await store.interactions(args.run_id) if q.kind != "await"]
        if len(asked) >= args.wait:
            return Questions(asked)
        if _settled(record):
            raise UsageError(_asks_no_more(args, record.status, len(asked)))
        if loop.time() >= deadline:
            raise UsageError(
                f"%iterion questions: run {args.run_id!r} asked {len(asked)} question(s)"
                f" in {args.timeout:g} s, not {args.wait}"
            )
        if bell is None:
            await asyncio.sleep(0.1)
            continue
        with bell.arm(args.run_id) as ticket:
            await ticket.wait(timeout=0.5)


#: Statuses in which nothing executes a run: it asks no more questions (unless resumed).
_SETTLED = ("finished", "failed", "failed_resumable", "cancelled", "interrupted")


def _settled(run: Run) -> bool:
    """Whether nothing executes ``run``: a cluster's run reading ``interrupted`` is taken back."""
    if run.status == "interrupted" and run.launch.get("executor") == EXECUTOR:
        return False
    return run.status in _SETTLED


def _asks_no_more(args: argparse.Namespace, status: str, asked: int) -> str:
    """Why ``%iterion questions --wait N`` stops at once: the run can ask nothing more."""
    said = (
        f"%iterion questions: run {args.run_id!r} is {status} and asked {asked} question(s),"
        f" not {args.wait}: nothing executes it, so it asks no more"
    )
    if status in ("finished", "failed"):
        return said
    return said + f" unless resumed (%iterion resume {args.run_id})"


def _stopped_waiting(verb: str, run_id: str) -> str:
    """What an interrupted wait says: the run itself goes on, and how to look at it."""
    return (
        f"%iterion {verb}: stopped waiting for run {run_id}; it goes on (see it with"
        f" %iterion show {run_id}, wait again with %iterion wait {run_id},"
        f" stop it with %iterion cancel {run_id})"
    )


def _require_store(key: Path | str) -> None:
    """Refuse a store that is not there, for a magic about runs already made (as the CLI does).

    Opening it would create an empty store where a typo points, and the magic
    would then say "0 run(s)" as if that were the answer. Only ``%%iterion
    --run`` makes a store.

    Raises:
        StoreError: Names the place looked at, and how to name another.
    """
    missing = missing_store(key, "%%iterion --run")
    if missing is not None:
        raise StoreError(missing)


def _scripted(run: Run) -> bool:
    """Whether an agent of the run's workflow uses the scripted model (so needs a scenario)."""
    try:
        wf = compile_stored(run.source, f"<run {run.id}>")
    except CompileError:
        return False
    return bool(scripted_nodes(wf, run.launch.get("backend")))


def _not_expanded(prog: str, typed: str, expr: str) -> str:
    """Why IPython left ``typed`` (whose ``expr`` it could have evaluated) as typed, and what works.

    IPython leaves a whole line as typed when a ``{…}`` in it is not Python it
    can evaluate (a JSON's braces), and expands no ``$name`` inside single
    quotes (nor before a quoted ``{…}``); ``{name}``, with the other braces
    doubled, expands in every case.
    """
    why = "IPython leaves a whole line as typed when a {…} in it is not Python it can evaluate"
    why += ", such as a JSON's braces"
    how = "double any other braces"
    if typed.startswith("$"):
        why += ", and expands no $name inside single quotes"
        how = f"write {{{expr}}} instead and {how}"
    if prog == "%iterion answer":
        how += (
            """: %iterion answer {gid} {iid} --json '{{"ship": true}}'"""
            " (or --json '{payload}', payload a JSON string)"
        )
    return f"{prog}: {typed} was not expanded ({why}): {how}"


async def _reach_cluster(session: Session, prog: str) -> None:
    """Reach the session's Dask cluster, if it has one; one line naming its address if not.

    A session of the magics takes its cluster from ``ITERION_NB_CLUSTER`` (they
    give it none), so the message names the variable and how to change it; the
    next magic reads the variable again (see :func:`_recluster`).
    """
    if session.executor is None:
        return
    try:
        await session.executor.connected()
    except ClusterStoreError as err:  # the scheduler answered: its workers need fixing
        _UNREACHED.add(session)
        raise UsageError(
            f"{prog}: {err} — install what they lack on the workers and run this again, or"
            f" set {CLUSTER_ENV} to nothing to run in this kernel (%env {CLUSTER_ENV}=)"
        ) from None
    except IterionError as err:
        _UNREACHED.add(session)
        raise UsageError(
            f"{prog}: {err} — the address is {CLUSTER_ENV}'s: set it to a Dask scheduler's"
            f" (%env {CLUSTER_ENV}=tcp://HOST:8786), or to nothing to run in this kernel"
            f" (%env {CLUSTER_ENV}=), and run this again"
        ) from None


def _recluster(session: Session) -> None:
    """Give a session whose cluster never answered the one ``ITERION_NB_CLUSTER`` names now.

    It never reached its cluster, so it started and resumed no run: nothing
    depends on its executor, and the widgets and handles that use it stay live.
    """
    _UNREACHED.discard(session)
    old = session.executor
    cluster = os.environ.get(CLUSTER_ENV) or None
    if old is not None and cluster != old.cluster:
        session.executor = None if cluster is None else DaskExecutor(cluster, old.store_spec)


async def _nothing() -> None:
    return None


async def _guarded(
    action: Callable[[Session, argparse.Namespace], Awaitable[Any]],
    session: Session,
    args: argparse.Namespace,
) -> Any:
    """Run a line magic's action; a user mistake becomes one line, not a traceback."""
    try:
        return await action(session, args)
    except NotFoundError as err:
        raise UsageError(f"%iterion {args.verb}: {err}") from None
    except IterionError as err:
        said = str(err)
        if said.endswith(RESUME_APPLIES_EXPIRY):  # how, from here
            said += f": %iterion resume {args.run_id}"
        raise UsageError(f"%iterion {args.verb}: {said}") from None


def await_iterion(lines: list[str]) -> list[str]:
    """Input transformer: ``await`` every call of the iterion magics."""
    return [_CALL.sub(r"await \1", line) for line in lines]


def _awaited() -> bool:
    """Whether the code that called the magic awaits it: it is a coroutine's (``await …``).

    The transformer makes every cell read after ``%load_ext`` await the magics;
    the cell that loaded the extension was read before, so it calls them plainly.
    (IPython runs a cell's statement with ``await`` in it as a coroutine's code.)
    """
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if frame.f_code.co_name in ("run_line_magic", "run_cell_magic") and module.startswith(
            "IPython."
        ):
            caller = frame.f_back
            return caller is None or bool(caller.f_code.co_flags & inspect.CO_COROUTINE)
        frame = frame.f_back
    return True


def load(shell: InteractiveShell) -> None:
    """Register the magics and the transformer (``%load_ext iterion_nb``)."""
    shell.register_magics(IterionMagics)
    if await_iterion not in shell.input_transformers_post:
        shell.input_transformers_post.append(await_iterion)


def unload(shell: InteractiveShell) -> None:
    """Remove them again (runs keep going; ``%load_ext`` finds them again)."""
    for kind in ("line", "cell"):
        shell.magics_manager.magics[kind].pop("iterion", None)
    while await_iterion in shell.input_transformers_post:
        shell.input_transformers_post.remove(await_iterion)
