"""One golden fixture per diagnostic code, each with a valid twin.

``tests/fixtures/diagnostics/CODE.iter`` must trigger CODE and render exactly
as ``CODE.expected``; ``CODE_ok.iter`` differs by the fix and must compile
with no diagnostic at all. Regenerate the renderings after a deliberate
message change with ``UPDATE_GOLDEN=1 pytest tests/ir/test_diagnostics_golden.py``
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.dsl.codes import CODES
from iterion_nb.dsl.diagnostics import render_all

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "diagnostics"
#: S007 (source too large) needs a multi-megabyte input; tests/test_bad_input.py
#: generates one instead of committing it.
GENERATED = {"S007"}
FIXTURE_CODES = sorted(set(CODES) - GENERATED)


def _analyze(path: Path) -> it.CompileResult:
    name = f"fixtures/{path.name}"
    return it.analyze(path.read_bytes(), name)


def test_every_code_has_a_fixture_pair() -> None:
    missing = [c for c in FIXTURE_CODES if not (FIXTURES / f"{c}.iter").exists()]
    twins = [c for c in FIXTURE_CODES if not (FIXTURES / f"{c}_ok.iter").exists()]
    assert missing == [] and twins == []


@pytest.mark.parametrize("code", FIXTURE_CODES)
def test_fixture_triggers_its_code(code: str) -> None:
    result = _analyze(FIXTURES / f"{code}.iter")
    found = {d.code for d in result.diagnostics}
    assert code in found
    # The fixture is minimal: nothing else goes wrong in it.
    assert found == {code}
    diag = next(d for d in result.diagnostics if d.code == code)
    assert diag.severity.value == CODES[code].severity
    assert diag.line >= 1 and diag.column >= 1


@pytest.mark.parametrize("code", FIXTURE_CODES)
def test_fixture_renders_as_golden(code: str) -> None:
    result = _analyze(FIXTURES / f"{code}.iter")
    rendered = render_all(result.diagnostics, result.source) + "\n"
    golden = FIXTURES / f"{code}.expected"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered, encoding="utf-8")
    assert rendered == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("code", FIXTURE_CODES)
def test_valid_twin_is_clean(code: str) -> None:
    result = _analyze(FIXTURES / f"{code}_ok.iter")
    assert [(d.code, d.message) for d in result.diagnostics] == []
    assert result.workflow is not None
