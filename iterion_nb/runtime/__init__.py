"""Executes the IR against ports only (engine, branches, budgets, checkpoints).

Arrives with the runtime issue; ``ports.py`` will declare Store and Backend.
Never imports duckdb, HTTP clients, provider SDKs or Jupyter libraries.
"""
