"""Bad input gets a diagnostic with a position, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.dsl.loading import MAX_SOURCE_BYTES

CASES: dict[str, tuple[bytes, str, int, int]] = {
    # name: (content, code, line, column)
    "empty": (b"", "C006", 1, 1),
    "only comments": (b"## nothing here\n\n", "C006", 1, 1),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00garbage", "S006", 1, 8),
    "latin-1": ("workflow w:\n  entry: caf\xe9\n".encode("latin-1"), "S006", 2, 13),
    "tabs": (b'agent a:\n\tmodel: "x"\n\nworkflow w:\n  entry: a\n  a -> done\n', "S002", 2, 1),
    "unterminated string": (
        b'agent a:\n  model: "x\n\nworkflow w:\n  entry: a\n  a -> done\n',
        "S003",
        2,
        10,
    ),
    "unterminated template": (
        b"prompt p:\n  hi {{vars.x\n\nagent a:\n  user: p\n\n"
        b"workflow w:\n  entry: a\n  a -> done\n",
        "S004",
        2,
        6,
    ),
    "inconsistent dedent": (
        b'agent a:\n    model: "x"\n  tools: [t]\n\nworkflow w:\n  entry: a\n  a -> done\n',
        "S005",
        3,
        1,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_a_positioned_diagnostic(name: str) -> None:
    data, code, line, column = CASES[name]
    result = it.analyze(data, "bad.iter")
    assert result.workflow is None
    assert (code, line, column) in [(d.code, d.line, d.column) for d in result.diagnostics]
    with pytest.raises(it.CompileError) as info:
        it.compile(data, "bad.iter")
    assert f"bad.iter:{line}:{column}: error[{code}]" in str(info.value)


def test_ten_megabyte_file_is_refused_quickly_with_a_position(tmp_path: Path) -> None:
    big = tmp_path / "big.iter"
    line = b'agent a:\n  model: "scripted"\n'
    big.write_bytes(line * (10 * 1024 * 1024 // len(line) + 1))
    assert big.stat().st_size > MAX_SOURCE_BYTES
    result = it.analyze(big.read_bytes(), str(big))
    ((code, ln, col),) = [(d.code, d.line, d.column) for d in result.diagnostics]
    assert (code, ln, col) == ("S007", 1, 1)


def test_huge_text_string_is_refused_too() -> None:
    text = "## x\n" * (MAX_SOURCE_BYTES // 5 + 10)
    assert [d.code for d in it.analyze(text).diagnostics] == ["S007"]


def test_nul_in_text_is_binary() -> None:
    assert [d.code for d in it.analyze("agent a:\x00\n").diagnostics] == ["S006"]


@pytest.mark.parametrize("name", ["empty", "binary", "tabs", "unterminated string"])
def test_cli_reports_without_traceback(name: str, tmp_path: Path) -> None:
    data, code, line, column = CASES[name]
    path = tmp_path / "bad.iter"
    path.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "iterion_nb.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"{path}:{line}:{column}: error[{code}]" in proc.stdout
