"""Implementations of the Store port: in-memory and DuckDB (the remote client comes later).

Every implementation passes the conformance suite in ``tests/conformance/``.
"""

from __future__ import annotations

from iterion_nb.store.duckdb_store import DuckDBStore, open_duckdb_store
from iterion_nb.store.location import STORE_ENV, resolve_store_path
from iterion_nb.store.memory import MemoryStore

__all__ = ["STORE_ENV", "DuckDBStore", "MemoryStore", "open_duckdb_store", "resolve_store_path"]
