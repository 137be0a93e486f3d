"""Store URLs however they are misspelt: refused as URLs, never paths; passwords never shown.

A name that starts like a PostgreSQL URL (``postgresql:``, ``postgres//``,
``postgresql/…@…``) is a misspelt URL, refused before anything is opened or
created; a password in it is masked wherever the name is shown. A user part
holding an ``@`` that is not percent-encoded is refused too (libpq would cut
the password at it and take the rest for the host). The cases that would
connect run against the session's real PostgreSQL server.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

import pytest

from iterion_nb.errors import StoreError
from iterion_nb.session import Session
from iterion_nb.store import STORE_ENV, resolve_store_path
from iterion_nb.store.location import (
    EXPECTED_URL,
    check_store_spec,
    is_store_url,
    mask_secrets,
    mask_url,
    without_password,
)
from iterion_nb.store.postgres_store import PostgresStore
from iterion_nb.store.remote import open_store
from tests.cli.test_cli import SCRIPT

#: Misspelt PostgreSQL URLs, each with what its refusal says is wrong.
MISSPELT = {
    "postgresql:/iterion:SECRET@127.0.0.1:55432/agents": "'postgresql:' is not followed by '//'",
    "postgresql:iterion:SECRET@127.0.0.1:55432/agents": "'postgresql:' is not followed by '//'",
    "POSTGRES:iterion:SECRET@127.0.0.1/agents": "'POSTGRES:' is not followed by '//'",
    "postgresql//iterion:SECRET@127.0.0.1:55432/agents": "the ':' after 'postgresql' is missing",
    "Postgres//iterion:SECRET/agents": "the ':' after 'Postgres' is missing",
    "postgres/iterion:SECRET@127.0.0.1:55432/agents": "'postgres/' then an '@': taken for",
    "postgresql:/h/db": "'postgresql:' is not followed by '//'",
}
#: Spelt right, but libpq could not take the password apart: refused, masked.
MALFORMED = {
    "postgresql://iterion:SE@CRET@127.0.0.1:55432/agents": "an '@' in the user or password",
    "postgresql://iterion:SECRET/agents": "its port is not a number",  # the host left out
    "postgresql://h:99999/db?password=SECRET": "its port is not a number",
    "postgresql://u:SECRET#x@h/db": "an '@' after the host",
    "postgresql://u:1?SECRET@h/db": "an '@' after the host",
}
#: Local paths that only look a little like a URL: they stay paths.
PATHS = [
    "postgresql",
    "postgresql/runs",
    "postgres-data/store",
    "postgresql_runs/a@b",
    "./postgresql//a@b",
    "./postgres:x@y",
    "runs/postgresql:a@b",
]


@pytest.mark.parametrize("spec", [*MISSPELT, *MALFORMED])
def test_a_misspelt_or_malformed_url_is_refused_naming_the_form_expected(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert is_store_url(spec)
    with pytest.raises(StoreError) as info:
        check_store_spec(spec)
    said = str(info.value)
    assert f"is malformed: {(MISSPELT | MALFORMED)[spec]}" in said
    assert f"(expected {EXPECTED_URL}, " in said and "percent-encoded: @ as %40" in said
    assert "SECRET" not in said and "CRET" not in said
    with pytest.raises(StoreError, match="is a URL, not a DuckDB path") as as_path:
        resolve_store_path(spec)
    assert "SECRET" not in str(as_path.value)
    for opened in (lambda: open_store(spec), lambda: Session(spec, workdir=tmp_path)):
        with pytest.raises(StoreError) as opening:
            opened()
        refusal = str(opening.value)
        assert "cannot open the store" in refusal or "is malformed" in refusal, refusal
        assert "SECRET" not in refusal, refusal
    monkeypatch.setenv(STORE_ENV, spec)
    with pytest.raises(StoreError) as from_env:
        open_store()
    assert "SECRET" not in str(from_env.value)
    assert list(tmp_path.iterdir()) == []  # no directory named after the URL


@pytest.mark.parametrize("spec", PATHS)
def test_a_path_only_named_like_postgres_stays_a_path(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert not is_store_url(spec)
    check_store_spec(spec)
    assert resolve_store_path(spec) == (tmp_path / spec / "iterion.duckdb").absolute()


@pytest.mark.parametrize("spec", [*MISSPELT, *MALFORMED])
def test_a_malformed_url_is_shown_with_its_password_masked(spec: str) -> None:
    assert "SECRET" not in mask_url(spec) and "CRET" not in mask_url(spec)
    assert "SECRET" not in without_password(spec)


@pytest.mark.parametrize(
    "spec",
    ["postgresql://u:SECRET@h/db?x=\udcff", "postgresql://u:SEC\udcffRET@h/db",
     "postgresql://h/db?password=SECRET&x=\udcff"],
)  # fmt: skip
def test_a_url_that_is_not_utf8_is_refused_with_its_password_masked(spec: str) -> None:
    """Once ``UnicodeEncodeError`` from masking, which argparse showed as ``invalid
    store_arg value: 'postgresql://u:SECRET@…'``: the password in the clear."""
    with pytest.raises(StoreError, match=r"^the store URL postgresql://.* is not valid UTF-8") as e:
        check_store_spec(spec)
    assert "SECRET" not in str(e.value) and "CRET" not in str(e.value), e.value
    cli = subprocess.run(
        [str(SCRIPT), "runs", "list", "--store", spec], capture_output=True, text=True,
        check=False, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 2 and "is not valid UTF-8 text" in cli.stderr, cli.stderr
    assert "SECRET" not in cli.stderr and "CRET" not in cli.stderr, cli.stderr


def test_a_well_formed_url_keeps_its_user_and_hosts_when_masked() -> None:
    assert mask_url("postgresql://h1:5432,h2:5433/db") == "postgresql://h1:5432,h2:5433/db"
    assert mask_url("postgresql://u:SE%40CRET@h:5/db") == "postgresql://u:***@h:5/db"
    assert mask_url("postgresql://[::1]:5432/db") == "postgresql://[::1]:5432/db"


def test_a_password_in_running_text_is_masked_however_the_url_is_spelt() -> None:
    text = (
        "a postgresql:iterion:SECRET@h/db b postgresql:/iterion:SECRET@h c"
        " postgresql//iterion:SECRET@h/db d POSTGRES/iterion:SECRET@h e"
        " postgresql://iterion:SECRET@h/db"
    )
    masked = mask_secrets(text)
    assert "SECRET" not in masked
    assert masked.count("iterion:***@h") == 5
    assert mask_secrets("see postgresql and libpq's error: refused") == (
        "see postgresql and libpq's error: refused"
    )


def test_an_at_sign_in_the_password_is_refused_then_accepted_percent_encoded(
    postgres_url: str,
) -> None:
    """Not encoded, libpq would take ``CRET@127.0.0.1`` for the host; encoded, it connects."""
    raw = postgres_url.replace("postgres@", "postgres:SE@CRET@")
    with pytest.raises(StoreError) as info:
        open_store(raw)
    said = str(info.value)
    assert "an '@' in the user or password that is not percent-encoded" in said
    assert "CRET" not in said and "resolve host" not in said
    encoded = postgres_url.replace("postgres@", "postgres:SE%40CRET@")
    store = open_store(f"{encoded}?schema=u_{uuid.uuid4().hex[:12]}")  # trust auth: accepted
    try:
        assert isinstance(store, PostgresStore)
        assert "CRET" not in store.display_url and "SE%40" not in repr(store)
    finally:
        asyncio.run(store.close())
