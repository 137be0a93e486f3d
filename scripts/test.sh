#!/usr/bin/env bash
# Second command of the README, and what CI runs: install everything into .venv,
# then lint, type-check, check the layer contracts and run the whole test suite.
# Fails if any step fails, including pytest collecting no test (exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff";          ruff check iterion_nb tests benchmarks examples && ruff format --check iterion_nb tests benchmarks examples
echo "== mypy --strict"; mypy
echo "== import-linter"; lint-imports
echo "== pytest";        pytest "$@"
