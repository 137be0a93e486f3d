"""The holder file: how a process that holds a store tells others where its API is."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from iterion_nb.runtime.ownership import pid_alive


@dataclass(frozen=True)
class HolderInfo:
    """What a holder publishes: its pid, the API's URL and its bearer token."""

    pid: int
    url: str
    token: str


def holder_file(db_path: Path) -> Path:
    """Where the holder of ``db_path`` publishes itself (beside the database)."""
    return db_path.with_name(db_path.name + ".holder.json")


def alive(pid: int) -> bool:
    """Whether a process with this pid runs (a zombie does not)."""
    return pid_alive(pid)


def find_holder(db_path: Path) -> HolderInfo | None:
    """The live holder of ``db_path`` other than this process, if one publishes itself."""
    path = holder_file(db_path)
    try:
        data = json.loads(path.read_text())
        info = HolderInfo(int(data["pid"]), str(data["url"]), str(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if info.pid != os.getpid() and alive(info.pid) else None
