#!/usr/bin/env bash
# First command of the README: install iterion-nb into .venv and run the main job:
# validate the async-questions example, print its graph, then run it offline (scripted
# model, embedded DuckDB store) and answer its questions as a person would.
# It needs no network beyond the package index and no API key.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
echo "== iterion-nb validate examples/async_questions.iter"
.venv/bin/iterion-nb validate examples/async_questions.iter
echo
echo "== iterion-nb graph examples/async_questions.iter   (paste into any Mermaid viewer)"
.venv/bin/iterion-nb graph examples/async_questions.iter
echo
echo "== python examples/run_async.py   (the agent asks, keeps working, and gets the answers)"
.venv/bin/python examples/run_async.py
