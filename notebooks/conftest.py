"""The notebooks under nbval: each runs in a kernel of its own, with a fresh default store.

The notebooks use the default store (as a person does in JupyterLab, where
the server names it in ``ITERION_NB_STORE``). Here each notebook's kernel is
started with ``ITERION_NB_STORE`` pointing at a new temporary directory, so
runs of one notebook never show in another, and nothing is written beside
the notebooks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

STORE_ENV = "ITERION_NB_STORE"
_stores: dict[Any, str] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """While the first cell of a notebook is set up (its kernel starts), set the store."""
    notebook = item.parent
    if not str(item.path).endswith(".ipynb") or notebook in _stores:
        yield
        return
    _stores[notebook] = tempfile.mkdtemp(prefix="iterion-nbval-")
    before = os.environ.get(STORE_ENV)
    os.environ[STORE_ENV] = _stores[notebook]
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STORE_ENV, None)
        else:
            os.environ[STORE_ENV] = before


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The kernels are gone: remove their stores."""
    for path in _stores.values():
        shutil.rmtree(path, ignore_errors=True)
