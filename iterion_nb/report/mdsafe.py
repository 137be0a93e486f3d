r"""Text written by agents and people, made inert inside a Markdown report.

A Markdown report is rendered by whatever opens it (JupyterLab, GitHub, an
editor's preview), so everything an agent or a person wrote must come out as
the text it is: no image fetched from a remote server when the report is
shown (``![](https://tracker/pixel.png)``), no link that runs code when it is
clicked (``[x](javascript:…)``, ``data:``, ``vbscript:``), no raw HTML.

Filtering URLs is easy to get wrong: an entity (``javascript&#58;``), mixed
case (``JaVaScRiPt:``), a tab that browsers drop (``java<TAB>script:``) or a
backslash escape (``javascript\:``) all still reach the browser as
``javascript:``. So the text never gets to be a link, an image or HTML at
all, whatever its URLs look like:

- ``&``, ``<`` and ``>`` become entities: no raw HTML, no ``<…>`` autolink,
  and no entity the text spells out (``&#58;``) is decoded into a character;
- ``\``, ``[`` and ``]`` are backslash-escaped: without an unescaped ``[``
  there is no link, image or link reference definition, whatever the URL;
  so is the backtick, since inside a code span escapes and entities would
  show as typed;
- ``|`` is escaped and line breaks and control characters become spaces, so
  a table cell stays one cell of one row.

Bare ``http(s)://`` URLs may still be made clickable by renderers that
autolink them (GFM); they are never fetched and never run code. Emphasis
(``*a*``, ``_a_``) is left alone: it changes how text looks, not what it
does, and escaping it would clutter every name with an underscore in the
Markdown itself.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"[&<>\\\[\]|`]")
_REPLACEMENT = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")
_BACKTICKS = re.compile(r"`+")


def inline(value: object) -> str:
    """``value`` as literal text for a table cell, a heading or a sentence."""
    text = str(value)
    if "\n" in text or "\r" in text:
        text = " ".join(text.split())
    text = _CONTROL.sub(" ", text)
    return _SPECIAL.sub(lambda m: _REPLACEMENT.get(m.group()) or "\\" + m.group(), text)


def fenced(text: str, info: str = "") -> list[str]:
    """``text`` as a fenced code block whose fence no line of it can close.

    The fence is one backtick longer than the longest run of backticks in
    ``text`` (at least three), so the text is shown exactly as it is.
    """
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]
