"""What a run is launched with: its workflow, its backends, its scripted scenario.

A run records ``launch = {"backend": ..., "scenario": ...}`` (the scenario
as data, never a path), so whichever process resumes it later — after a
kernel restart, from the CLI — gives its scripted model the same script.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iterion_nb.backends.router import BackendRouter
from iterion_nb.errors import RunError, VarsError
from iterion_nb.ir import compile_workflow
from iterion_nb.ir import model as m
from iterion_nb.ir.models import scripted_nodes, sure_nodes
from iterion_nb.runtime.ports import Backend
from iterion_nb.runtime.replay import AnswersFileError, pin_strays, pins_of
from iterion_nb.safe_input import InputFileError, file_digest, load_yaml, read_text, shown_path

Scenario = Mapping[str, Any] | str | os.PathLike[str]
#: Pinned answers: a YAML/JSON file, or its content (``{"answers": [...]}`` or the list).
Answers = Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | os.PathLike[str]


def default_backends(scenario: Scenario | None) -> BackendRouter:
    """The default backends: the in-process loop (``claw``) and Claude Code, by node."""
    from iterion_nb.backends.claude_code import ClaudeCodeBackend
    from iterion_nb.backends.claw import ClawBackend
    from iterion_nb.backends.providers import ProviderResolver

    source = os.fspath(scenario) if isinstance(scenario, os.PathLike) else scenario
    claw = ClawBackend(ProviderResolver(source))
    return BackendRouter({"claw": claw, "claude_code": ClaudeCodeBackend()})


def scenario_data(scenario: Scenario | None, wf: m.Workflow | None = None) -> dict[str, Any] | None:
    """A scenario as plain data (a file is read), to record with the run.

    Given the workflow it is for (a scenario given for one run), a node the
    scenario names that the workflow does not have is refused too (see
    :func:`check_scenario_nodes`). A session's own scenario serves every
    workflow the session runs, so it is not checked against one.

    Raises:
        RunError: The file cannot be read or is not a scenario, or it names
            a node ``wf`` does not have.
    """
    if scenario is None:
        return None
    from iterion_nb.backends.providers import load_scenario

    try:
        source = os.fspath(scenario) if isinstance(scenario, os.PathLike) else scenario
        data = load_scenario(source)
    except Exception as err:  # unreadable file, YAML or JSON errors, a malformed scenario
        raise RunError(f"scenario: {err}") from None
    if wf is not None:
        where = "" if isinstance(scenario, Mapping) else shown_path(os.fspath(scenario))
        check_scenario_nodes(data, wf, where)
    return data


def check_scenario_nodes(scenario: Mapping[str, Any], wf: m.Workflow, where: str = "") -> None:
    """Refuse a scenario for ``wf`` that names a node ``wf`` does not have (a typo, mostly).

    Its turns would answer nobody, and the node it meant would fail for want
    of them, after the run was recorded.

    Raises:
        RunError: Naming the strays (each with the node it is close to) and ``where``.
    """
    from iterion_nb.backends.providers.scripted import scenario_strays

    problem = scenario_strays(scenario, wf.nodes, f"workflow '{wf.name}'")
    if problem is not None:
        raise RunError(f"scenario: {where + ': ' if where else ''}{problem}")


#: How ``iterion-nb run`` says to give a scenario (the magic says ``--scenario EXPR``).
GIVE_SCENARIO = "--scenario FILE (examples/*.scenario.yaml are samples)"


def unscripted_refusal(
    wf: m.Workflow, where: str, *, backend: str | None = None, give: str = GIVE_SCENARIO
) -> str | None:
    """Why a run of ``wf`` without a scenario must not start, or None when it may.

    Its agents that answer from a scenario (the scripted model) would fail it
    at the first of them, after the run was recorded, and resuming it without
    a scenario would fail the same way again. Only agents every run reaches
    count: one on a branch a variable may turn away from is left to run.
    ``backend`` is the one given for nodes that name none; ``give`` says how
    to give a scenario where the refusal is read.
    """
    sure = sure_nodes(wf)
    scripted = [name for name in scripted_nodes(wf, backend) if name in sure]
    if not scripted:
        return None
    nodes = ", ".join(f"'{name}'" for name in scripted[:3])
    more = f" (and {len(scripted) - 3} more)" if len(scripted) > 3 else ""
    one = len(scripted) == 1
    they, answer = ("it", "it answers") if one else ("them", "they answer")
    return (
        f"{where}: {'node' if one else 'nodes'} {nodes}{more} {'uses' if one else 'use'}"
        f" the scripted model, and no scenario says what {answer}: give one with {give},"
        f' or give {they} a real model (model: "anthropic/…", "openai/…")'
    )


def read_answers(answers: Answers, wf: m.Workflow | None = None) -> list[dict[str, Any]]:
    """Pinned answers as checked data (a file is read: YAML, or JSON which is YAML).

    The file is read as :mod:`iterion_nb.safe_input` reads what a person names:
    a regular file of UTF-8 text, of bounded size, nesting and alias expansion,
    each key once in a mapping. Given the workflow they are for, a pin naming
    a node it does not have is refused too (see :func:`check_answer_nodes`).

    Raises:
        AnswersFileError: The file cannot be read, or is not pinned answers
            (the message names the file, the entry and the field), or a pin
            names a node ``wf`` does not have.
    """
    where = "the answers"
    if isinstance(answers, str | os.PathLike):
        path = Path(os.fspath(answers))
        try:
            text = read_text(path)
        except InputFileError as err:
            raise AnswersFileError(f"{err.where}: cannot read it: {err.problem}") from None
        try:
            document = load_yaml(text, shown_path(path))
        except InputFileError as err:
            raise AnswersFileError(str(err)) from None
        where = str(path)
        pins = pins_of(document, where)
    else:
        pins = pins_of(answers)
    if wf is not None:
        check_answer_nodes(pins, wf, where)
    return pins


def check_answer_nodes(
    pins: Sequence[Mapping[str, Any]], wf: m.Workflow, where: str = "the answers"
) -> None:
    """Refuse pinned answers for ``wf`` that name a node ``wf`` does not have (a typo, mostly).

    Such a pin would answer nothing, silently: the question it meant would be
    asked of a person after all.

    Raises:
        AnswersFileError: Naming ``where``, the entry, the node (and the one it
            is close to) and the workflow's nodes.
    """
    problem = pin_strays(pins, wf.nodes, f"workflow '{wf.name}'")
    if problem is not None:
        raise AnswersFileError(f"{where}: {problem}")


def answers_yaml(run_id: str, workflow: str, pins: Sequence[Mapping[str, Any]]) -> str:
    """A run's answers as the YAML file ``--answers`` reads (with a comment saying whose)."""
    import yaml

    document = {"run": run_id, "workflow": workflow, "answers": [dict(p) for p in pins]}
    head = f"# the answers of run {run_id} ({workflow}), to replay with --answers\n"
    return head + yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def write_answers(
    target: str | os.PathLike[str], run_id: str, workflow: str, pins: Sequence[Mapping[str, Any]]
) -> Path:
    """Write :func:`answers_yaml` to ``target``, making the directories missing on the way.

    (As a report is written: ``runs answers --export`` and ``%iterion answers --export``.)

    Raises:
        RunError: The file cannot be written there, naming it and why.
    """
    path = Path(target)
    if path.is_dir():
        raise RunError(f"cannot write {path}: it is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise RunError(f"cannot write {path}: a part of its directory is a file") from None
    except OSError as err:
        raise RunError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        path.write_text(answers_yaml(run_id, workflow, pins), encoding="utf-8")
    except OSError as err:
        raise RunError(f"cannot write {path}: {err.strerror or err}") from None
    return path


def attachment_values(wf: m.Workflow, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The files given for the workflow's ``attachments:``: path, url, mime, size, sha256.

    Raises:
        VarsError: An undeclared attachment, a required one missing, a file that
            cannot be read, or one whose type ``accept_mime`` does not allow.
    """
    import fnmatch
    import mimetypes

    given = dict(given or {})
    unknown = sorted(set(given) - set(wf.attachments))
    if unknown:
        known = ", ".join(wf.attachments) or "none"
        raise VarsError(f"unknown attachment {', '.join(map(repr, unknown))} (declared: {known})")
    out: dict[str, Any] = {}
    for name, spec in wf.attachments.items():
        if name not in given:
            if spec.required:
                raise VarsError(f"attachment '{name}' is required: give the file at launch")
            continue
        if "\x00" in os.fspath(given[name]):  # (Python would raise ValueError)
            raise VarsError(f"attachment '{name}': its path holds U+0000, which no path can")
        path = Path(os.fspath(given[name])).expanduser().resolve()
        try:
            size, sha256 = file_digest(path)
        except InputFileError as err:
            raise VarsError(f"attachment '{name}': cannot read {err}") from None
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if spec.kind == "image" and not mime.startswith("image/"):
            raise VarsError(
                f"attachment '{name}' is an image; {path.name} is {mime} (give a .png, .jpg,"
                " .gif or .webp file)"
            )
        if spec.accept_mime and not any(fnmatch.fnmatch(mime, a) for a in spec.accept_mime):
            raise VarsError(
                f"attachment '{name}': {path.name} is {mime}; it takes"
                f" {', '.join(spec.accept_mime)}"
            )
        out[name] = {
            "path": str(path), "url": path.as_uri(), "mime": mime, "size": size,
            "sha256": sha256, "kind": spec.kind,
        }  # fmt: skip
    return out


def store_spec(given: Any, store: Any) -> str:
    """How a cluster worker opens this session's store: its URL, or its DuckDB file's path.

    Raises:
        RunError: The store is neither (an in-memory store cannot be shared).
    """
    if isinstance(given, str) and "://" in given:
        return getattr(store, "worker_url", None) or given  # a password from PGPASSWORD too
    for attribute in ("worker_url", "url", "path"):
        value = getattr(store, attribute, None)
        if value is not None:
            return str(os.fspath(value))
    raise RunError(
        "runs on a cluster need a store the workers can open: a postgresql:// URL"
        " (or a DuckDB path on this machine)"
    )


def workflow_of(workflow: m.Workflow | str, source: str | None) -> tuple[m.Workflow, str]:
    """The compiled workflow and its source text."""
    if isinstance(workflow, str):
        return compile_workflow(workflow), workflow
    return workflow, source if source is not None else workflow.source


def backend_for(
    base: Backend, custom: bool, launch: Mapping[str, Any], wf: m.Workflow,
    scenario: Scenario | None,
) -> Backend:  # fmt: skip
    """The backend a run executes with.

    A session given its own backend uses it (a scenario cannot change it);
    otherwise the default backends, with ``scenario`` (or the one the run
    recorded) for the scripted model. Either way, a router of backends sends
    nodes that name none to the backend the run was launched with, else to
    the workflow's ``default_backend``.
    """
    chosen = scenario if scenario is not None else launch.get("scenario")
    backend = default_backends(chosen) if chosen is not None and not custom else base
    if isinstance(backend, BackendRouter):
        backend = backend.with_default(launch.get("backend") or wf.default_backend)
    return backend
