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
  echo "== pytest: the tests that run a real kernel, under ipykernel 7.3 (widget messages on a subshell thread)"
  # in this same venv: swap the pinned ipykernel for 7.3 (a few seconds, where a second
  # venv took minutes to install), and put the pinned one back however the pass ends
  pinned="$(.venv/bin/python -c 'import ipykernel; print(ipykernel.__version__)')"
  swap() {
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "ipykernel==$1" \
      > .venv/pip-ipykernel.log 2>&1 || { cat .venv/pip-ipykernel.log >&2; return 1; }
  }
  trap 'swap "$pinned" || echo "could not put ipykernel $pinned back: rerun scripts/test.sh" >&2' EXIT
  swap 7.3.0  # (pip's note about the overridden pin goes to the log)
  .venv/bin/python -c 'import ipykernel; assert ipykernel.__version__ == "7.3.0", ipykernel.__version__'
  # only what sends widget messages to a real kernel (the widget and magic models without
  # one, the sidebar, whose answers go through the server, and the quickstart's server do
  # not depend on the kernel's version)
  pytest -q tests/jupyter/test_browser.py tests/jupyter/test_kernel_crash.py \
    tests/jupyter/test_kernel_magics.py tests/jupyter/test_saved_notebook.py notebooks
fi
