#!/usr/bin/env bash
# First command of the README: install iterion-nb with JupyterLab into .venv and
# open the quickstart notebook. Everything runs offline (scripted model, embedded
# DuckDB store); no API key.
#
#   bash scripts/quickstart.sh              # opens notebooks/01_quickstart.ipynb in JupyterLab
#   bash scripts/quickstart.sh --headless   # runs it without a browser and prints the result
#                                           # (also validates, draws and runs the .iter example)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[jupyter]"

if [ "${1:-}" != "--headless" ]; then
  exec .venv/bin/jupyter lab notebooks/01_quickstart.ipynb
fi

echo "== iterion-nb validate examples/async_questions.iter"
.venv/bin/iterion-nb validate examples/async_questions.iter
echo
echo "== iterion-nb graph examples/async_questions.iter   (paste into any Mermaid viewer)"
.venv/bin/iterion-nb graph examples/async_questions.iter
echo
echo "== python examples/run_async.py   (the agent asks, keeps working, and gets the answers)"
.venv/bin/python examples/run_async.py
echo
echo "== notebooks/01_quickstart.ipynb, executed headless"
.venv/bin/python scripts/run_notebook.py notebooks/01_quickstart.ipynb
