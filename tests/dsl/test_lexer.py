from __future__ import annotations

from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.dsl.lexer import tokenize
from iterion_nb.dsl.source import Source
from iterion_nb.dsl.tokens import TokenKind as K


def lex(text: str) -> tuple[list[tuple[K, str]], Diagnostics]:
    diags = Diagnostics()
    toks = tokenize(Source("t.iter", text), diags)
    return [(t.kind, t.text) for t in toks], diags


def kinds(text: str) -> list[K]:
    return [k for k, _ in lex(text)[0]]


def test_indentation_becomes_indent_and_dedent() -> None:
    assert kinds("agent a:\n  model: x\nvars:\n") == [
        K.IDENT, K.IDENT, K.COLON, K.NEWLINE,
        K.INDENT, K.IDENT, K.COLON, K.IDENT, K.NEWLINE,
        K.DEDENT, K.IDENT, K.COLON, K.NEWLINE, K.EOF,
    ]  # fmt: skip


def test_comments_and_blank_lines_do_not_change_indentation() -> None:
    text = "agent a:\n  ## a note\n\n  model: x  ## trailing\n"
    assert K.DEDENT not in kinds(text)[:-2]
    assert [t for k, t in lex(text)[0] if k is K.IDENT] == ["agent", "a", "model", "x"]


def test_prompt_body_is_one_raw_token_keeping_markdown_and_relative_indent() -> None:
    text = (
        "prompt p:\n"
        "  ## Heading kept: prompt text is not parsed\n"
        '  Say {{vars.x}}: "quoted" # and [brackets\n'
        "\n"
        "    indented more\n"
        "agent a:\n"
    )
    toks, diags = lex(text)
    raw = [t for k, t in toks if k is K.RAW]
    assert list(diags) == []
    assert raw == [
        "## Heading kept: prompt text is not parsed\n"
        'Say {{vars.x}}: "quoted" # and [brackets\n'
        "\n"
        "  indented more"
    ]
    assert (K.IDENT, "agent") in toks


def test_raw_lines_keep_their_source_positions() -> None:
    diags = Diagnostics()
    toks = tokenize(Source("t", "prompt p:\n    first\n    second\n"), diags)
    raw = next(t for t in toks if t.kind is K.RAW)
    assert [(r.line, r.column, r.text) for r in raw.lines] == [(2, 5, "first"), (3, 5, "second")]


def test_string_escapes_are_decoded() -> None:
    toks, _ = lex('x: "a \\"b\\" \\\\ \\n"\n')
    assert (K.STRING, 'a "b" \\ \n') in toks


def test_brackets_continue_across_lines() -> None:
    text = 'a -> b with {\n    k: "v",\n    j: "w"\n  }\n'
    ks = kinds(text)
    assert K.INDENT not in ks and ks.count(K.NEWLINE) == 1


def test_unclosed_bracket_stops_at_the_next_statement() -> None:
    toks, diags = lex("agent a:\n  tools: [x, y\n  model: m\n")
    assert [(d.code, d.line, d.column) for d in diags] == [("S001", 2, 10)]
    # the next line is still read as its own statement
    assert (K.IDENT, "model") in toks
    assert toks.count((K.NEWLINE, "")) == 3


def test_tab_indentation_is_reported_with_its_column() -> None:
    _, diags = lex("agent a:\n \tmodel: x\n")
    assert [(d.code, d.line, d.column) for d in diags] == [("S002", 2, 2)]


def test_single_hash_is_explained() -> None:
    _, diags = lex("# not a comment\n")
    (diag,) = list(diags)
    assert diag.code == "S008" and "##" in diag.message


def test_numbers_and_bare_durations() -> None:
    toks, _ = lex("a: 3\nb: -2.5\nc: 30m\n")
    assert [t for k, t in toks if k is K.NUMBER] == ["3", "-2.5", "30m"]


def test_arrow_is_one_token() -> None:
    assert kinds("a -> b\n")[:3] == [K.IDENT, K.ARROW, K.IDENT]
