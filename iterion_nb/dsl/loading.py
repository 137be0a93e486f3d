"""Turning bytes from a file or a cell into a :class:`Source`, safely.

Anything that is not reasonable workflow text (too large, not UTF-8, binary)
becomes a diagnostic with a position instead of an exception.
"""

from __future__ import annotations

import re

from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.dsl.source import Source, Span

#: Sources larger than this are refused before lexing. Hand-written and
#: generated workflows are far smaller (a 2,000-node workflow is ~150 KB).
MAX_SOURCE_BYTES = 4 * 1024 * 1024


def _position(data: bytes, index: int) -> tuple[int, int]:
    """1-based line and column of byte ``index`` (columns count bytes)."""
    line = data.count(b"\n", 0, index) + 1
    start = data.rfind(b"\n", 0, index) + 1
    return line, index - start + 1


def decode_source(data: bytes, name: str, diags: Diagnostics) -> Source | None:
    """Decode ``data``; on a problem add a diagnostic and return None."""
    if len(data) > MAX_SOURCE_BYTES:
        diags.add(
            "S007",
            f"source is {len(data):,} bytes; the limit is {MAX_SOURCE_BYTES:,} bytes",
            Span.point(1, 1),
        )
        return None
    nul = data.find(b"\x00")
    if nul >= 0:
        line, column = _position(data, nul)
        diags.add(
            "S006",
            "source is binary (it contains a NUL byte), not workflow text",
            Span.point(line, column),
        )
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line, column = _position(data, err.start)
        diags.add(
            "S006",
            f"source is not UTF-8 text: byte 0x{data[err.start]:02x} cannot be decoded",
            Span.point(line, column),
        )
        return None
    return Source(name, text.removeprefix("\ufeff"))


def check_text(text: str, name: str, diags: Diagnostics) -> Source | None:
    """Apply the same limits to text that did not come from bytes."""
    if len(text) > MAX_SOURCE_BYTES:
        return decode_source(text.encode("utf-8", "surrogatepass"), name, diags)
    if "\x00" in text:
        return decode_source(text.encode("utf-8", "surrogatepass"), name, diags)
    lone = _SURROGATE.search(text)
    if lone is not None:  # a str from Python, not bytes: no file could hold this
        index = lone.start()
        line = text.count("\n", 0, index) + 1
        column = index - (text.rfind("\n", 0, index) + 1) + 1
        diags.add(
            "S006",
            f"source is not UTF-8 text: it holds a lone surrogate (U+{ord(lone.group()):04X})",
            Span.point(line, column),
        )
        return None
    return Source(name, text.removeprefix("\ufeff"))


_SURROGATE = re.compile("[\ud800-\udfff]")
