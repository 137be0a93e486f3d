"""The magics: compile a cell, launch runs in the kernel's loop, answer, wait — never block it.

Every ``%iterion`` / ``%%iterion`` call is awaited: an input transformer
rewrites the call IPython generates into ``await ...``, so IPython runs the
cell as a coroutine on the kernel's event loop. ``%iterion wait RUN`` thus
waits while background runs (and widget messages) keep being served.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import HTML, Markdown

from iterion_nb.errors import IterionError, NotFoundError
from iterion_nb.ir import analyze
from iterion_nb.ir import model as m
from iterion_nb.magics.display import Table, diagnostics_table
from iterion_nb.report.build import format_for
from iterion_nb.runtime.values import resolve_vars
from iterion_nb.session import RunHandle, Session
from iterion_nb.store.location import resolve_store_path
from iterion_nb.widgets import InboxWidget, RunWidget

#: Sessions by store file, kept across ``%reload_ext`` so live runs stay reachable.
_SESSIONS: dict[Path, Session] = {}
#: The store the magics used last (also kept across ``%reload_ext``).
_LAST: list[Path] = []
BACKENDS = ("claw", "claude_code")
_CALL = re.compile(r"(?<!await )(get_ipython\(\)\.run_(?:line|cell)_magic\('iterion',)")


class LiveRun(RunHandle):
    """A run handle whose display is the live run widget."""

    def __init__(self, session: Session, run_id: str, workflow: m.Workflow | None = None) -> None:
        super().__init__(session, run_id)
        self._workflow = workflow
        self._widget: RunWidget | None = None

    @property
    def widget(self) -> RunWidget:
        """The run widget (made on first use, then shared by every display)."""
        if self._widget is None:
            self._widget = RunWidget(self.session.store, self.id, self._workflow)
            failure = self.session.failures.get(self.id)
            if failure:
                self._widget.show_failure(failure)
        return self._widget

    def inbox(self) -> InboxWidget:
        """An inbox for this run's questions."""
        return _inbox(self.session, self.id)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        bundle: Any = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if isinstance(data, dict):  # where widgets do not render: a line of text
            data["text/plain"] = repr(self)
        return bundle


def _inbox(session: Session, run_id: str | None) -> InboxWidget:
    async def answer(rid: str, iid: str, value: Any, by: str) -> dict[str, bool]:
        return await session.run(rid).answer(iid, value, answered_by=by)

    return InboxWidget(session.store, answer, run_id)


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
    p.add_argument("--store", help="the run store (default: .iterion or ITERION_NB_STORE)")
    return p


def _line_parser() -> _Parser:
    p = _Parser(prog="%iterion", add_help=False)
    verbs = p.add_subparsers(dest="verb", parser_class=_Parser)
    runs = verbs.add_parser("runs", add_help=False)
    runs.add_argument("--status")
    runs.add_argument("--limit", type=int, default=20)
    inbox = verbs.add_parser("inbox", add_help=False)
    inbox.add_argument("run_id", nargs="?")
    answer = verbs.add_parser("answer", add_help=False)
    answer.add_argument("run_id")
    answer.add_argument("interaction_id")
    answer.add_argument("text", nargs="+")
    resume = verbs.add_parser("resume", add_help=False)
    resume.add_argument("run_id")
    resume.add_argument("--scenario", metavar="EXPR")
    resume.add_argument("--force", action="store_true")
    for verb in ("cancel", "wait"):
        verbs.add_parser(verb, add_help=False).add_argument("run_id")
    report = verbs.add_parser("report", add_help=False)
    report.add_argument("run_id")
    report.add_argument("--format", choices=("html", "md"))
    report.add_argument("-o", "--output")
    verbs.choices["wait"].add_argument("--timeout", type=float)
    for sub in verbs.choices.values():
        sub.add_argument("--store")
    return p


USAGE = (
    "%iterion runs | inbox [RUN] | answer RUN IID TEXT | resume RUN | cancel RUN"
    " | wait RUN | report RUN [--format html|md] [-o FILE]  (each takes --store PATH)"
)


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as err:
        raise UsageError(f"%iterion: cannot read the arguments: {err}") from None


@magics_class
class IterionMagics(Magics):
    """``%%iterion`` defines (and launches) workflows; ``%iterion`` works with runs."""

    shell: InteractiveShell

    # -- plumbing ------------------------------------------------------------
    def session(self, store: str | None = None) -> Session:
        """The session on ``store`` (default: the last store used, else the default one)."""
        if store:
            path = resolve_store_path(store)
        else:
            path = _LAST[-1] if _LAST else resolve_store_path(None)
        _LAST[:] = [path]
        session = _SESSIONS.get(path)
        if session is None or getattr(session.store, "closed", False):
            session = _SESSIONS[path] = Session(path)
        return session

    def _scenario(self, expr: str | None) -> Any:
        if expr is None:
            return None
        try:
            value = self.shell.ev(expr)  # type: ignore[no-untyped-call]
        except Exception as err:
            raise UsageError(f"--scenario {expr}: {type(err).__name__}: {err}") from None
        if isinstance(value, str | os.PathLike):
            if not Path(value).is_file():
                raise UsageError(f"--scenario {expr}: no scenario file {os.fspath(value)!r}")
            return value
        if not isinstance(value, dict):
            raise UsageError(
                f"--scenario {expr}: expected a dict or a file path, got {type(value).__name__}"
            )
        return value

    def _awaitable(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """The coroutine itself inside the kernel's running loop; else run it to the end."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            from IPython.core.async_helpers import get_asyncio_loop

            return get_asyncio_loop().run_until_complete(coro)  # type: ignore[no-untyped-call]
        return coro

    # -- %%iterion -----------------------------------------------------------
    @cell_magic("iterion")  # type: ignore[arg-type]
    def iterion_cell(self, line: str, cell: str) -> Any:
        """``%%iterion [NAME] [--run] [--var k=v] [--scenario EXPR] [--backend B] [--store P]``."""
        args = _cell_parser().parse_args(_split(line))
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
        label = f"<cell {args.name}>" if args.name else "<cell>"
        result = analyze(cell, label)
        if result.diagnostics:
            table = diagnostics_table(label, cell, result.diagnostics)
            self.shell.display_pub.publish(
                {"text/plain": repr(table), "text/html": table._repr_html_()}
            )
        wf = result.workflow
        if wf is None:
            raise UsageError(f"{label}: the workflow does not compile (see the table above)")
        name = args.name or wf.name
        if name.isidentifier():
            self.shell.user_ns[name] = wf
        if not args.run:
            return self._awaitable(_nothing())
        try:
            values = resolve_vars(wf, given)
        except IterionError as err:
            raise UsageError(f"%%iterion: {err}") from None
        scenario = self._scenario(args.scenario)
        session = self.session(args.store)
        run_id = uuid.uuid4().hex[:12]

        async def start() -> LiveRun:
            await session.start(
                wf, values, run_id=run_id, source=cell, scenario=scenario, backend=args.backend
            )
            return LiveRun(session, run_id, wf)

        return self._awaitable(start())

    # -- %iterion ------------------------------------------------------------
    @line_magic("iterion")  # type: ignore[arg-type]
    def iterion_line(self, line: str) -> Any:
        """``%iterion runs | inbox [RUN] | answer RUN IID TEXT | resume | cancel | wait RUN``."""
        words = _split(line)
        if not words:
            raise UsageError(USAGE)
        if words[0] not in ("runs", "inbox", "answer", "resume", "cancel", "wait", "report"):
            raise UsageError(f"%iterion: unknown command {words[0]!r}; {USAGE}")
        args = _line_parser().parse_args(words)
        session = self.session(args.store)
        action: Callable[[Session, argparse.Namespace], Awaitable[Any]] = getattr(
            self, f"_{args.verb}"
        )
        return self._awaitable(_guarded(action, session, args))

    async def _runs(self, session: Session, args: argparse.Namespace) -> Table:
        runs = await session.runs(status=args.status, limit=args.limit)
        rows = [
            [r.id, r.workflow, r.status, r.created_at.isoformat(timespec="seconds"), r.error or ""]
            for r in runs
        ]
        title = f"{len(rows)} run(s) in {session.store.path}"  # type: ignore[attr-defined]
        return Table(title, ["id", "workflow", "status", "created", "error"], rows)

    async def _inbox(self, session: Session, args: argparse.Namespace) -> InboxWidget:
        if args.run_id:
            await session.store.get_run(args.run_id)
        widget = _inbox(session, args.run_id)
        await widget.refresh()
        return widget

    async def _answer(self, session: Session, args: argparse.Namespace) -> dict[str, bool]:
        await session.store.get_run(args.run_id)
        text = " ".join(args.text)
        return await session.run(args.run_id).answer(
            args.interaction_id, text, answered_by="notebook"
        )

    async def _resume(self, session: Session, args: argparse.Namespace) -> LiveRun:
        scenario = self._scenario(args.scenario)
        await session.resume(
            args.run_id, force=args.force, scenario=scenario, answered_by="notebook"
        )
        return LiveRun(session, args.run_id)

    async def _cancel(self, session: Session, args: argparse.Namespace) -> str:
        await session.store.get_run(args.run_id)
        return await session.run(args.run_id).cancel()

    async def _report(self, session: Session, args: argparse.Namespace) -> Any:
        text = await session.run(args.run_id).report(args.format, args.output)
        if args.output is not None:
            return f"wrote the report of run {args.run_id} to {args.output}"
        if format_for(None, args.format) == "html":
            return HTML(text)  # type: ignore[no-untyped-call]
        return Markdown(text)  # type: ignore[no-untyped-call]

    async def _wait(self, session: Session, args: argparse.Namespace) -> str:
        await session.store.get_run(args.run_id)
        try:
            return await session.run(args.run_id).wait(timeout=args.timeout)
        except TimeoutError:
            raise UsageError(
                f"%iterion wait: run {args.run_id!r} still running after {args.timeout} s"
            ) from None


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
        raise UsageError(f"%iterion {args.verb}: {err}") from None


def await_iterion(lines: list[str]) -> list[str]:
    """Input transformer: ``await`` every call of the iterion magics."""
    return [_CALL.sub(r"await \1", line) for line in lines]


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
