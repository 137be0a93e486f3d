"""Implementations of the Store port: in-memory, DuckDB, and the remote client."""
