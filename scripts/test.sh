#!/usr/bin/env bash
# Second command of the README, and what CI runs: install everything into .venv,
# then lint, type-check, check the layer contracts and run the whole test suite
# (pytest with the notebooks under --nbval, and the browser tests in Debian's
# Chromium). Then the Jupyter tests again under an ipykernel 7.0-7.3 release,
# whose widget messages arrive on a subshell thread.
# Fails if any step fails, including pytest collecting no test (exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
export PATH="$PWD/.venv/bin:$PATH"

# Chromium for the browser tests: Debian's package (Playwright downloads no browser).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== apt-get install chromium"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is missing: install it (Debian: apt-get install chromium) or set ITERION_NB_CHROMIUM" >&2
  fi
fi

echo "== ruff";          ruff check iterion_nb tests benchmarks examples scripts && ruff format --check iterion_nb tests benchmarks examples scripts
echo "== mypy --strict"; mypy
echo "== import-linter"; lint-imports
echo "== pytest";        pytest "$@"

if [ "$#" -eq 0 ]; then
  echo "== pytest tests/jupyter notebooks, under ipykernel 7.3 (widget messages on a subshell thread)"
  [ -x .venv-ipykernel73/bin/python ] || "$PYTHON" -m venv .venv-ipykernel73
  .venv-ipykernel73/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
  # then swap the pinned 7.4 for 7.3 (pip's note about the overridden pin goes to the log)
  if ! .venv-ipykernel73/bin/python -m pip install --quiet --disable-pip-version-check \
      "ipykernel==7.3.0" > .venv-ipykernel73/pip.log 2>&1; then
    cat .venv-ipykernel73/pip.log >&2; exit 1
  fi
  .venv-ipykernel73/bin/python -c 'import ipykernel; assert ipykernel.__version__ == "7.3.0", ipykernel.__version__'
  PATH="$PWD/.venv-ipykernel73/bin:$PATH" .venv-ipykernel73/bin/python -m pytest -q tests/jupyter notebooks
fi
