"""Store records on the wire, both ways, for the remote Store client and its RPC route."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from iterion_nb.runtime.ownership import Claimant
from iterion_nb.runtime.records import (
    AnswerResult,
    Artifact,
    Event,
    Interaction,
    Lease,
    LeaseReport,
    Option,
    QueuedMessage,
    Run,
    RunBundle,
)

_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        Run, Event, Artifact, Interaction, QueuedMessage, AnswerResult, Option, Lease,
        LeaseReport, Claimant, RunBundle,
    )
}  # fmt: skip
#: Fields that are tuples in their records (JSON brings them back as lists).
_TUPLES = (
    "questions", "options", "waits_on", "lost", "cancel", "events", "artifacts",
    "interactions", "messages",
)  # fmt: skip


def encode(value: Any) -> Any:
    """Plain JSON data for records, lists of them, datetimes and tuples."""
    if is_dataclass(value) and not isinstance(value, type):
        body = {f.name: encode(getattr(value, f.name)) for f in fields(value)}
        return {"__record": type(value).__name__, **body}
    if isinstance(value, datetime):
        return {"__time": value.isoformat()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__time" in value and len(value) == 1:
        return datetime.fromisoformat(value["__time"])
    if "__record" in value:
        cls = _TYPES[value["__record"]]
        kwargs = {k: decode(v) for k, v in value.items() if k != "__record"}
        for field in fields(cls):
            if field.name in _TUPLES and isinstance(kwargs.get(field.name), list):
                kwargs[field.name] = tuple(kwargs[field.name])
        return cls(**kwargs)
    return {k: decode(v) for k, v in value.items()}
