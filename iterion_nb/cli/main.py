"""``iterion-nb``: validate, draw, run workflows; list, show and answer runs.

Exit codes: 0 success, 1 the workflow has errors, 2 bad usage or unreadable file.
User mistakes are printed as messages on stderr, never as tracebacks.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from iterion_nb import __version__
from iterion_nb.cli.inputs import InputError, check_stores
from iterion_nb.cli.runs import CliError, add_commands, run_command
from iterion_nb.dsl.diagnostics import Severity, more_not_shown, render_all
from iterion_nb.errors import CompileError, IterionError
from iterion_nb.ir import CompileResult, analyze
from iterion_nb.ir.mermaid import graph_json, to_mermaid
from iterion_nb.safe_input import InputFileError, read_bytes

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


class _UsageError(Exception):
    """A mistake in how the command was called (bad path, unreadable file)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iterion-nb",
        description="Jupyter-native engine for AI-agent workflows.",
    )
    parser.add_argument("--version", action="version", version=f"iterion-nb {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = sub.add_parser(
        "validate", help="compile a workflow file (.iter or .bot) and report every problem"
    )
    validate.add_argument("file", help="the workflow file (.iter or .bot) to check; - for stdin")
    validate.add_argument("--json", action="store_true", help="print diagnostics as JSON")
    graph = sub.add_parser("graph", help="print the workflow as a Mermaid flowchart")
    graph.add_argument("file", help="the workflow file (.iter or .bot) to draw; - for stdin")
    graph.add_argument(
        "--json", action="store_true",
        help="print the workflow as JSON (entry, nodes, edges, and the Mermaid text)",
    )  # fmt: skip
    add_commands(sub)
    return parser


def _compile(path_text: str) -> CompileResult:
    """The file's compile result; ``-`` reads standard input (named ``<stdin>``)."""
    stdin = path_text == "-"
    try:  # a regular file only (or a pipe), and no more than a workflow may hold
        data = read_bytes("/dev/stdin" if stdin else path_text)
    except InputFileError as err:
        said = str(err).replace("/dev/stdin", "<stdin>") if stdin else str(err)
        raise _UsageError(said) from None
    return analyze(data, "<stdin>" if stdin else path_text)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _summary(result: CompileResult) -> str:
    errors = sum(d.severity is Severity.ERROR for d in result.diagnostics)
    warnings = len(result.diagnostics) - errors
    if result.workflow is not None:
        wf = result.workflow
        head = (
            f"{result.source.name}: ok — workflow '{wf.name}',"
            f" {_count(len(wf.nodes), 'node')}, {_count(len(wf.edges), 'edge')}"
        )
    else:
        head = f"{result.source.name}: {errors} error{'s' if errors != 1 else ''}"
    if warnings:
        head += f", {warnings} warning{'s' if warnings != 1 else ''}"
    return head + more_not_shown(len(result.diagnostics), result.truncated)


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    """``validate FILE [--json]``."""
    result = _compile(args.file)
    if args.json:
        payload = {
            "ok": result.ok,
            "diagnostics": [d.to_json() for d in result.diagnostics],
            "truncated": bool(result.truncated),  # more problems were found than listed
        }
        out.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    else:
        if result.diagnostics:
            out.write(render_all(result.diagnostics, result.source) + "\n\n")
        out.write(_summary(result) + "\n")
    return EXIT_OK if result.ok else EXIT_INVALID


def cmd_graph(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``graph FILE``: Mermaid on stdout; diagnostics on stderr if it does not compile."""
    result = _compile(args.file)
    if result.workflow is None:
        if args.json:  # as `validate --json` says it, on stdout
            diagnostics = [d.to_json() for d in result.diagnostics]
            said = {"ok": False, "diagnostics": diagnostics, "truncated": bool(result.truncated)}
            out.write(json.dumps(said, indent=2) + "\n")
            return EXIT_INVALID
        err.write(render_all(result.diagnostics, result.source) + "\n\n")
        err.write(_summary(result) + "\n")
        return EXIT_INVALID
    if args.json:
        data = {"ok": True, **graph_json(result.workflow)}
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return EXIT_OK
    out.write(to_mermaid(result.workflow))
    return EXIT_OK


#: Exit code when stdout's reader went away (as a shell reports SIGPIPE: 128 + 13).
EXIT_BROKEN_PIPE = 141
#: Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the command line; returns the exit code."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr or open(os.devnull, "w")  # noqa: SIM115 (the process's own)
    if stdout is None:  # started with its standard output closed (`>&-`): say so, as `ls` does
        stderr.write("iterion-nb: standard output is closed: nothing could be written\n")
        return EXIT_USAGE
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            return cmd_validate(args, stdout)
        if args.command == "graph":
            return cmd_graph(args, stdout, stderr)
        check_stores(args)
        return run_command(args, stdout)
    except _UsageError as problem:
        stderr.write(f"iterion-nb: {problem}\n")
        return EXIT_USAGE
    except (CliError, InputError) as problem:
        stderr.write(f"iterion-nb: {problem}\n")
        return problem.code
    except FileNotFoundError as problem:
        stderr.write(f"iterion-nb: {problem.filename}: no such file\n")
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: what it stopped was said where it happened
        stderr.write("iterion-nb: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `iterion-nb … | head`: the reader has all it wanted
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except (OSError, http.client.HTTPException) as problem:
        # the last net under talking to a store holder: a lost connection is a message
        stderr.write(f"iterion-nb: {problem or type(problem).__name__}\n")
        return EXIT_INVALID
    except CompileError as problem:
        stderr.write(f"{problem}\n")
        return EXIT_INVALID
    except IterionError as problem:  # the last net: what a command did not translate itself
        stderr.write(f"iterion-nb: {problem}\n")
        return EXIT_INVALID
