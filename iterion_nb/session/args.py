"""What the Python API is given, checked where it is given.

A wrong type or value is a ``TypeError`` or a ``ValueError`` that names the
argument, raised before anything is recorded — never a database's error
about a column (``Conversion Error: Could not convert string … to INT32``),
nor a run that fails at its first node for a setting mistyped.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iterion_nb.api.service import ID


def text_id(name: str, value: Any) -> str:
    """An id looked up (a run's, a question's): a str."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def new_run_id(value: Any) -> str:
    """The id asked for a new run: one the REST API and the CLI can name it by."""
    text_id("run_id", value)
    if not ID.match(value):
        raise ValueError(
            f"run_id {value[:80]!r} is not an id: 1 to 200 letters, digits, '_', '.', ':'"
            " or '-', starting with a letter or a digit"
        )
    return str(value)


def seconds(name: str, value: Any, *, none: bool = True) -> float | None:
    """A duration in seconds: a positive, finite number (or None where that means no limit)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def whole(name: str, value: Any, low: int) -> int:
    """A whole number, at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be {low} or more, not {value}")
    return value


def mapping(name: str, value: Any) -> None:
    """A mapping (``vars``: name -> value, ``attachments``: name -> path), or None."""
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of name -> value, not {type(value).__name__}")


def session_settings(
    store: Any, backend: Any, workdir: Any, poll_interval: Any, lease_seconds: Any
) -> None:
    """``Session(...)``'s arguments, before the store is opened."""
    plain = store is None or isinstance(store, str | os.PathLike)
    if not plain and not callable(getattr(store, "create_run", None)):
        raise TypeError(
            f"store must be a path, a postgresql:// URL or a Store, not {type(store).__name__}"
        )
    if backend is not None and not callable(getattr(backend, "call", None)):
        hint = (
            f": a backend's name ({backend!r}) goes in the workflow (`backend:` on a node,"
            " `default_backend:`) or in start(..., backend=NAME)"
            if isinstance(backend, str) else ""
        )  # fmt: skip
        raise TypeError(
            f"backend must be a Backend (an object with an async call(request)), not"
            f" {type(backend).__name__}{hint}"
        )
    if workdir is not None:
        if not isinstance(workdir, str | os.PathLike):
            raise TypeError(f"workdir must be a path, not {type(workdir).__name__}")
        if not Path(workdir).is_dir():
            raise ValueError(f"workdir {os.fspath(workdir)!r} is not a directory")
    seconds("poll_interval", poll_interval, none=False)
    seconds("lease_seconds", lease_seconds, none=False)


def workflow_arg(workflow: Any) -> None:
    """``start``'s workflow: a compiled one, or source text — a file's name is neither."""
    if isinstance(workflow, str):
        if "\n" not in workflow and workflow.strip().endswith((".iter", ".bot")):
            raise ValueError(
                f"{workflow.strip()!r} looks like a file's name, and start() takes a workflow"
                " or its source text: start(it.compile_file(PATH))"
            )
        return
    if not hasattr(workflow, "nodes") or not hasattr(workflow, "source_hash"):
        raise TypeError(
            "workflow must be a compiled workflow (it.compile, it.compile_file) or its source"
            f" text, not {type(workflow).__name__}"
        )


__all__ = [
    "mapping",
    "new_run_id",
    "seconds",
    "session_settings",
    "text_id",
    "whole",
    "workflow_arg",
]
