#!/usr/bin/env bash
# First command of the README: install iterion-nb with JupyterLab into .venv and
# open the quickstart notebook. Everything runs offline (scripted model, embedded
# DuckDB store); no API key.
#
#   bash scripts/quickstart.sh              # opens notebooks/01_quickstart.ipynb in JupyterLab
#   bash scripts/quickstart.sh --no-browser # ... and any other options go to `jupyter lab`
#   bash scripts/quickstart.sh --headless   # runs it without a browser and prints the result
#                                           # (also validates, draws and runs the .iter example)
#
# Works as a user and as root (JupyterLab refuses root unless told --allow-root).
# The install runs again only when pyproject.toml changed since the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
STAMP=.venv/.quickstart-installed
WANT="$(cksum < pyproject.toml)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ] \
    || ! .venv/bin/python -c "import iterion_nb, jupyterlab" >/dev/null 2>&1; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[jupyter]"
  echo "$WANT" > "$STAMP"
fi

if [ "${1:-}" != "--headless" ]; then
  AS_ROOT=()
  [ "$(id -u)" = 0 ] && AS_ROOT=(--allow-root)
  # the kernels this server starts use its store (it tells them in ITERION_NB_STORE)
  # serve the whole checkout (examples, docs) and open the tour; the store is .iterion/ here
  exec .venv/bin/jupyter lab ${AS_ROOT[@]+"${AS_ROOT[@]}"} --ServerApp.root_dir="$PWD" "$@" \
    notebooks/01_quickstart.ipynb
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
