#!/usr/bin/env bash
# First command of the README: install iterion-nb into .venv and run the main job.
# For now the main job validates the async-questions example and prints its graph;
# it needs no network beyond the package index and no API key.
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
