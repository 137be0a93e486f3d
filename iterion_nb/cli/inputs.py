"""What the command line takes from a person, checked before anything is opened or created.

Files (the workflow, ``--scenario``, ``--answers``) are read once, safely
(:mod:`iterion_nb.safe_input`), and a file that cannot be used is a usage
error naming it and why. Text from the store (who answered, what, a
question) is shown with its control characters escaped, so that what an
answer holds cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterion_nb.errors import CompileError, IterionError, StoreError
from iterion_nb.ir import compile_workflow
from iterion_nb.ir import model as m
from iterion_nb.safe_input import InputFileError, open_regular, read_bytes, shown_path
from iterion_nb.session.launch import (
    check_answer_nodes,
    check_scenario_nodes,
    read_answers,
    scenario_data,
    unscripted_refusal,
)
from iterion_nb.store.location import STORE_ENV, check_store_spec
from iterion_nb.view.text import id_arg, limit_arg, plain, store_arg

#: Exit code of bad usage and of a file that cannot be used.
EXIT_USAGE = 2


class InputError(Exception):
    """A problem with what the command was given; printed as ``iterion-nb: message``."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RunInputs:
    """What ``run`` and ``resume`` read from the files they were given."""

    workflow: m.Workflow | None = None
    scenario: dict[str, Any] | None = None
    answers: list[dict[str, Any]] | None = None


def read_run_inputs(args: argparse.Namespace) -> RunInputs:
    """Read (and check) the workflow, ``--scenario`` and ``--answers`` files, each once.

    ``--attach`` files are only checked to be regular files here: the run
    reads them (their size and digest) as it is recorded.

    Raises:
        InputError: A file cannot be used (exit 2: missing, not a regular file,
            too large, not UTF-8, not YAML, nested too deeply, an alias bomb,
            not a scenario, not pinned answers; a scenario or a pinned answer
            naming a node the workflow does not have), or the workflow has
            errors (exit 1).
    """
    try:  # each message names the file (and the line, the entry) and the problem
        scenario = scenario_data(args.scenario)
        given = getattr(args, "answers", None)
        answers = None if given is None else read_answers(given)
    except IterionError as err:
        raise InputError(str(err)) from None
    _check_attachments(getattr(args, "attach", []))
    workflow = None
    if args.command == "run":
        try:
            workflow = compile_workflow(read_bytes(args.file), args.file)
        except InputFileError as err:
            raise InputError(str(err)) from None
        except CompileError as err:
            raise InputError(str(err), 1) from None
        if scenario is None:
            refuse_unscripted(workflow, args.file)
        # a node they name that the workflow lacks is a typo: its turns (its answer) would
        # answer nobody
        try:
            if scenario is not None:
                check_scenario_nodes(scenario, workflow, shown_path(args.scenario))
            if answers is not None:
                check_answer_nodes(answers, workflow, str(given))
        except IterionError as err:
            raise InputError(str(err)) from None
    return RunInputs(workflow, scenario, answers)


def refuse_unscripted(wf: m.Workflow, where: str) -> None:
    """Refuse, before a run is recorded, a workflow whose agents answer from a missing scenario.

    See :func:`~iterion_nb.session.launch.unscripted_refusal` (``%%iterion --run`` says the same).
    """
    refusal = unscripted_refusal(wf, where)
    if refusal is not None:
        raise InputError(refusal)


def _check_attachments(given: list[str]) -> None:
    """Refuse an ``--attach NAME=PATH`` that is not a regular file (it is read at launch)."""
    for pair in given:
        name, sep, path = pair.partition("=")
        if not (sep and name and path):
            continue  # said as a usage error where the pairs are taken apart
        try:
            with open_regular(Path(path).expanduser()):
                pass
        except InputFileError as err:
            raise InputError(f"attachment '{name}': {err}") from None


def check_stores(args: argparse.Namespace) -> None:
    """Refuse a malformed store name the command uses: ``ITERION_NB_STORE``, ``store copy``'s.

    (``--store`` is checked as it is parsed.)

    Raises:
        InputError: A malformed URL or a path that is not UTF-8 (exit 2).
    """
    named = [("", getattr(args, name)) for name in ("src", "dst") if hasattr(args, name)]
    spec = os.environ.get(STORE_ENV)
    if spec and hasattr(args, "store") and args.store is None:
        named.append((f"{STORE_ENV}: ", spec))
    for where, text in named:
        try:
            check_store_spec(text)
        except StoreError as err:
            raise InputError(f"{where}{err}") from None


__all__ = ["id_arg", "limit_arg", "plain", "store_arg"]  # where the commands have always found them
