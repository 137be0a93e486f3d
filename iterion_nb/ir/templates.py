"""Templates: text with ``{{namespace.path}}`` references and ``${ENV}`` variables.

Parsing keeps the source position of every reference, so that the compiler
can point at a bad one. Rendering takes a lookup function, so the runtime
decides where values come from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.dsl.limits import shorten
from iterion_nb.dsl.source import Span

# Possessive quantifiers: no backtracking state per segment, so a reference
# of a million segments is checked in linear time (it was 6x slower per
# segment at that size).
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*+(?:\.[A-Za-z_][A-Za-z0-9_]*+)*+\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, slots=True)
class TextPart:
    """Literal text."""

    text: str


@dataclass(frozen=True, slots=True)
class RefPart:
    """A ``{{a.b.c}}`` reference; ``{{!a.b.c}}`` is raw (inserted as it is, even in a command)."""

    path: tuple[str, ...]
    span: Span
    raw: bool = False


@dataclass(frozen=True, slots=True)
class EnvPart:
    """A ``${NAME}`` or ``${NAME:-default}`` environment variable.

    In a script (``keep``), one that is unset and has no default stays as written:
    ``${name}`` is as likely a JavaScript template literal's.
    """

    name: str
    default: str | None
    span: Span
    keep: bool = False


Part = TextPart | RefPart | EnvPart


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template."""

    parts: tuple[Part, ...]

    @property
    def refs(self) -> tuple[RefPart, ...]:
        """The ``{{...}}`` references, in order."""
        return tuple(p for p in self.parts if isinstance(p, RefPart))

    @property
    def env_names(self) -> tuple[str, ...]:
        """The environment variables it reads."""
        return tuple(p.name for p in self.parts if isinstance(p, EnvPart))

    @property
    def is_static(self) -> bool:
        """Whether it is plain text with no reference or variable."""
        return all(isinstance(p, TextPart) for p in self.parts)

    def render(
        self,
        lookup: Callable[[tuple[str, ...]], object],
        env: Mapping[str, str] | None = None,
        raw: Callable[[tuple[str, ...]], object] | None = None,
    ) -> str:
        """Render with ``lookup(path)`` for references and ``env`` for ``${...}``.

        Strings are inserted as they are, other values as JSON, null as "".
        ``{{!ref}}`` references use ``raw(path)`` when given (a command quotes
        what ``lookup`` gives, not what ``raw`` gives).
        """
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, TextPart):
                out.append(part.text)
            elif isinstance(part, RefPart):
                chosen = raw if part.raw and raw is not None else lookup
                out.append(stringify(chosen(part.path)))
            else:
                value = (env or {}).get(part.name)
                if value is None and part.default is None and part.keep:
                    out.append(f"${{{part.name}}}")
                else:
                    out.append(value if value is not None else part.default or "")
        return "".join(out)


def stringify(value: object) -> str:
    """How a value appears inside rendered text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def parse_template(
    text: str, line: int, column: int, diags: Diagnostics, *, script: bool = False
) -> Template:
    """Parse one line of template text that starts at ``line:column``.

    Templates never span lines: a prompt block is parsed line by line, and a
    string cannot hold a raw newline. In a ``script`` (a tool's ``script:``), a
    ``${...}`` that is not an environment reference is text, as upstream.
    """
    parts: list[Part] = []
    pos = 0
    while pos < len(text):
        start = text.find("{{", pos)
        if start < 0:
            _text_with_env(text[pos:], line, column + pos, parts, diags, script)
            break
        if start > pos:
            _text_with_env(text[pos:start], line, column + pos, parts, diags, script)
        end = text.find("}}", start + 2)
        if end < 0:
            diags.add(
                "S004",
                "unterminated template: '{{' has no closing '}}' on this line",
                Span.point(line, column + start, 2),
            )
            break
        inner = text[start + 2 : end]
        span = Span(line, column + start, line, column + end + 2)
        path = inner.strip()
        raw = path.startswith("!")  # upstream's {{!input.x}}: not quoted in a command
        path = path[1:].lstrip() if raw else path
        if not _PATH.match(path):
            shown = shorten(path) or "nothing"
            diags.add(
                "C004",
                f"malformed template reference '{{{{{shorten(inner)}}}}}': expected a dotted"
                f" name such as vars.x, found {shown!r}",
                span,
            )
        else:
            parts.append(RefPart(tuple(path.split(".")), span, raw))
        pos = end + 2
    return Template(_merge(parts))


def parse_lines(
    lines: list[tuple[str, int, int]], diags: Diagnostics, *, script: bool = False
) -> Template:
    """Parse a multi-line text block given as ``(text, line, column)`` rows."""
    parts: list[Part] = []
    for index, (text, line, column) in enumerate(lines):
        if index:
            parts.append(TextPart("\n"))
        if "{{" not in text and "${" not in text:
            if text:
                parts.append(TextPart(text))  # plain prose, the common case: nothing to parse
        else:
            parts.extend(parse_template(text, line, column, diags, script=script).parts)
    return Template(_merge(parts))


def _text_with_env(
    text: str, line: int, column: int, parts: list[Part], diags: Diagnostics, script: bool = False
) -> None:
    # str.find, not a regex: r"\$\{([^}]*)\}" rescans the rest of the line from
    # every "${" that has no "}", which is quadratic in a line of "${${${...".
    pos = 0
    while (start := text.find("${", pos)) >= 0:
        end = text.find("}", start + 2)
        if end < 0 and script:
            break  # the rest is the script's own text
        if end < 0:
            diags.add(
                "C359",
                "unterminated environment reference: '${' has no closing '}'",
                Span.point(line, column + start, 2),
            )
            break
        if start > pos:
            parts.append(TextPart(text[pos:start]))
        span = Span(line, column + start, line, column + end + 1)
        body = text[start + 2 : end]
        name, sep, default = body.partition(":-")
        if script and not _ENV_NAME.match(name):
            parts.append(TextPart(text[start : end + 1]))  # JavaScript's `${a.b}`, say
        elif not _ENV_NAME.match(name):
            diags.add(
                "C359",
                f"bad environment reference '${{{shorten(body)}}}': expected ${{NAME}} or"
                " ${NAME:-default}",
                span,
            )
        else:
            parts.append(EnvPart(name, default if sep else None, span, keep=script))
        pos = end + 1
    if pos < len(text):
        parts.append(TextPart(text[pos:]))


def _merge(parts: list[Part]) -> tuple[Part, ...]:
    """Adjacent text parts joined into one (once per run: ``+`` per part was quadratic)."""
    merged: list[Part] = []
    run: list[str] = []
    for part in parts:
        if isinstance(part, TextPart):
            run.append(part.text)
            continue
        if run:
            merged.append(TextPart("".join(run)))
            run = []
        merged.append(part)
    if run:
        merged.append(TextPart("".join(run)))
    return tuple(merged)
