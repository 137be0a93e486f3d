from __future__ import annotations

from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.ir.templates import EnvPart, RefPart, TextPart, parse_template


def parse(text: str) -> tuple[list[object], Diagnostics]:
    diags = Diagnostics()
    return list(parse_template(text, 3, 5, diags).parts), diags


def test_references_keep_their_position() -> None:
    parts, diags = parse("Hi {{ vars.name }}!")
    assert list(diags) == []
    assert parts[0] == TextPart("Hi ")
    ref = parts[1]
    assert isinstance(ref, RefPart)
    assert ref.path == ("vars", "name")
    assert (ref.span.line, ref.span.column, ref.span.end_column) == (3, 8, 23)


def test_env_references_with_defaults() -> None:
    parts, diags = parse("${MODEL:-scripted}/${REGION}")
    assert list(diags) == []
    assert [(p.name, p.default) for p in parts if isinstance(p, EnvPart)] == [
        ("MODEL", "scripted"),
        ("REGION", None),
    ]


def test_render_uses_lookup_and_env() -> None:
    diags = Diagnostics()
    template = parse_template("{{vars.n}} x {{outputs.a}} ${WHO:-you} ${EMPTY}", 1, 1, diags)
    values = {("vars", "n"): 3, ("outputs", "a"): {"k": [1]}}
    text = template.render(lambda path: values[path], env={"EMPTY": ""})
    assert text == '3 x {"k": [1]} you '


def test_malformed_and_unterminated() -> None:
    _, diags = parse("{{ two words }} and {{vars.x")
    assert [(d.code, d.column) for d in diags] == [("C004", 5), ("S004", 25)]


def test_bad_env_reference() -> None:
    _, diags = parse("${} and ${OPEN")
    assert [d.code for d in diags] == ["C359", "C359"]
