"""A run's state, and the checkpoint it becomes.

The checkpoint is plain JSON data saved after every node: which nodes each
live branch is at (the frontier), the fan-out groups waiting to join, every
node's last output and loop history, loop counters, artifact versions,
fired events, usage against the budget, and the pending interaction of a
paused run. Resume rebuilds a :class:`RunState` from it and restarts every
frontier entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

CHECKPOINT_VERSION = 1


@dataclass
class Frontier:
    """Where one branch is: the node it runs (or will run) next, with its input.

    ``resume`` carries what the node saved to continue after a pause (for
    example the interaction a human gate waits on). ``came_from`` and
    ``mapped`` say how the input was made (the source's output, or an edge's
    ``with`` mapping); ``joined`` marks the continuation that runs a join node.
    """

    branch: str
    node: str
    input: Any
    groups: list[str] = field(default_factory=list)
    resume: dict[str, Any] | None = None
    came_from: str | None = None
    mapped: bool = False
    joined: bool = False
    #: On the way to a resumable ``fail NAME:``, the source's own input: a resume
    #: runs the source again from it.
    retry_input: Any = None
    #: Restored from the checkpoint by a resume (never saved in one): its node's next
    #: execution may re-run one a stopped or dead process began. The next node, or a
    #: loop's next visit, gets a new frontier, which is not.
    restored: bool = field(default=False, compare=False, metadata={"saved": False})


@dataclass
class Group:
    """The branches one ``fan_out_all`` router started, until they join.

    Each branch reports once: it arrived at the join node, failed, or ended
    elsewhere (a terminal, or a node with no way on).
    """

    id: str
    router: str
    parent: str
    parent_groups: list[str]
    expected: int
    mode: str | None
    arrived: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every branch has reported."""
        return len(self.arrived) + len(self.failed) + len(self.ended) >= self.expected


@dataclass
class Usage:
    """What the run has consumed, counted against its budget."""

    tokens: int = 0
    cost_usd: float = 0.0
    iterations: int = 0
    elapsed_seconds: float = 0.0


@dataclass
class RunState:
    """Everything a run knows; :meth:`checkpoint` turns it into JSON data."""

    vars: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    history: dict[str, list[Any]] = field(default_factory=dict)
    loops: dict[str, int] = field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    fired: dict[str, Any] = field(default_factory=dict)
    rotation: dict[str, int] = field(default_factory=dict)
    visits: dict[str, int] = field(default_factory=dict)
    frontier: dict[str, Frontier] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    warned: list[str] = field(default_factory=list)
    next_id: int = 1
    pending_interaction: str | None = None
    waiting_on: list[str] = field(default_factory=list)
    reached_done: bool = False
    #: Each LLM node's conversation as it last ended (for session: inherit / fork).
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Each loop's source output when its edge was last taken (loop.NAME.previous_output).
    loop_outputs: dict[str, Any] = field(default_factory=dict)
    #: The files given at launch, by name: path, url, mime, size, sha256, kind.
    attachments: dict[str, dict[str, Any]] = field(default_factory=dict)

    def new_id(self, prefix: str) -> str:
        """A branch or group id, unique within the run."""
        ident = f"{prefix}{self.next_id}"
        self.next_id += 1
        return ident

    def checkpoint(self) -> dict[str, Any]:
        """A JSON snapshot. Outputs are shared, not copied: they are never mutated."""
        return {
            "version": CHECKPOINT_VERSION,
            "vars": self.vars,
            "outputs": dict(self.outputs),
            "history": {k: list(v) for k, v in self.history.items()},
            "loops": dict(self.loops),
            "artifacts": dict(self.artifacts),
            "fired": dict(self.fired),
            "rotation": dict(self.rotation),
            "visits": dict(self.visits),
            "frontier": [_shallow(f) for f in self.frontier.values()],
            "groups": [_shallow(g) for g in self.groups.values()],
            "usage": _shallow(self.usage),
            "warned": list(self.warned),
            "next_id": self.next_id,
            "pending_interaction": self.pending_interaction,
            "waiting_on": list(self.waiting_on),
            "reached_done": self.reached_done,
            "sessions": dict(self.sessions),
            "loop_outputs": dict(self.loop_outputs),
            "attachments": dict(self.attachments),
        }

    @classmethod
    def from_checkpoint(cls, data: dict[str, Any]) -> RunState:
        """Rebuild the state a checkpoint describes."""
        frontier = [Frontier(**f) for f in data.get("frontier", [])]
        groups = [Group(**g) for g in data.get("groups", [])]
        return cls(
            vars=dict(data.get("vars", {})),
            outputs=dict(data.get("outputs", {})),
            history={k: list(v) for k, v in data.get("history", {}).items()},
            loops=dict(data.get("loops", {})),
            artifacts=dict(data.get("artifacts", {})),
            fired=dict(data.get("fired", {})),
            rotation=dict(data.get("rotation", {})),
            visits=dict(data.get("visits", {})),
            frontier={f.branch: f for f in frontier},
            groups={g.id: g for g in groups},
            usage=Usage(**data.get("usage", {})),
            warned=list(data.get("warned", [])),
            next_id=int(data.get("next_id", 1)),
            pending_interaction=data.get("pending_interaction"),
            waiting_on=list(data.get("waiting_on", [])),
            reached_done=bool(data.get("reached_done", False)),
            sessions=dict(data.get("sessions", {})),
            loop_outputs=dict(data.get("loop_outputs", {})),
            attachments=dict(data.get("attachments", {})),
        )


def _shallow(record: Frontier | Group | Usage) -> dict[str, Any]:
    """A dataclass as a dict, copying containers one level deep.

    ``dataclasses.asdict`` deep-copies every input and output on every
    checkpoint; they are never mutated once made, so sharing them is safe
    and keeps a checkpoint's cost proportional to the number of branches.
    A field marked ``saved: False`` (what only this process knows) is left out.
    """
    out: dict[str, Any] = {}
    for item in fields(record):
        if not item.metadata.get("saved", True):
            continue
        value = getattr(record, item.name)
        if isinstance(value, list):
            value = list(value)
        elif isinstance(value, dict) and item.name != "input":
            value = dict(value)
        out[item.name] = value
    return out
