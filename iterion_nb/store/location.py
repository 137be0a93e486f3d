"""Where the run store lives: argument, then ``ITERION_NB_STORE``, then ``./.iterion/``."""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the store (a ``.duckdb`` file or a directory).
STORE_ENV = "ITERION_NB_STORE"
DEFAULT_DIR = ".iterion"
DEFAULT_FILE = "iterion.duckdb"


def resolve_store_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The DuckDB file to use.

    ``path`` (or the environment variable) may name the file itself (ending
    in ``.duckdb``) or a directory that holds ``iterion.duckdb``. Without
    either, it is ``.iterion/iterion.duckdb`` under the working directory.
    """
    chosen = os.fspath(path) if path is not None else os.environ.get(STORE_ENV) or DEFAULT_DIR
    target = Path(chosen).expanduser()
    if target.suffix != ".duckdb":
        target = target / DEFAULT_FILE
    return target.absolute()
