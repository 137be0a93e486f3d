"""What a run is launched with: its workflow, its backends, its scripted scenario.

A run records ``launch = {"backend": ..., "scenario": ...}`` (the scenario
as data, never a path), so whichever process resumes it later — after a
kernel restart, from the CLI — gives its scripted model the same script.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from iterion_nb.backends.router import BackendRouter
from iterion_nb.errors import RunError
from iterion_nb.ir import compile_workflow
from iterion_nb.ir import model as m
from iterion_nb.runtime.ports import Backend

Scenario = Mapping[str, Any] | str | os.PathLike[str]


def default_backends(scenario: Scenario | None) -> BackendRouter:
    """The default backends: the in-process loop (``claw``) and Claude Code, by node."""
    from iterion_nb.backends.claude_code import ClaudeCodeBackend
    from iterion_nb.backends.claw import ClawBackend
    from iterion_nb.backends.providers import ProviderResolver

    source = os.fspath(scenario) if isinstance(scenario, os.PathLike) else scenario
    claw = ClawBackend(ProviderResolver(source))
    return BackendRouter({"claw": claw, "claude_code": ClaudeCodeBackend()})


def scenario_data(scenario: Scenario | None) -> dict[str, Any] | None:
    """A scenario as plain data (a file is read), to record with the run.

    Raises:
        RunError: The file cannot be read or is not a scenario.
    """
    if scenario is None:
        return None
    from iterion_nb.backends.providers import load_scenario

    try:
        source = os.fspath(scenario) if isinstance(scenario, os.PathLike) else scenario
        return load_scenario(source)
    except Exception as err:  # unreadable file, YAML or JSON errors, a malformed scenario
        raise RunError(f"scenario: {err}") from None


def store_spec(given: Any, store: Any) -> str:
    """How a cluster worker opens this session's store: its URL, or its DuckDB file's path.

    Raises:
        RunError: The store is neither (an in-memory store cannot be shared).
    """
    if isinstance(given, str) and "://" in given:
        return given
    for attribute in ("url", "path"):
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
