from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server of this test session (loopback, temporary directory): its URL.

    Skipped where no PostgreSQL binaries exist, except in CI (``CI`` set), where it fails.
    """
    from tests.pgserver import NoPostgres, PgServer

    try:
        server = PgServer.start()
    except NoPostgres as err:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(err))
    try:
        yield server.url
    finally:
        server.stop()
