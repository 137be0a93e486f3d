from __future__ import annotations

from iterion_nb.dsl import ast, parse_source
from iterion_nb.dsl.diagnostics import Diagnostics
from iterion_nb.dsl.source import Source, Span


def parse(text: str) -> tuple[ast.Module, Diagnostics]:
    diags = Diagnostics()
    return parse_source(Source("t.iter", text), diags), diags


WORKFLOW = """\
vars:
  topic: string = "tea"
  tags: string[] = ["a", "b"]

schema verdict:
  approved: bool
  tone: string [enum: "formal", "casual"]

agent a:
  tools: [read_file, list_files]
  tool_max_steps: 4

workflow w:
  vars:
    extra: int = 2
  entry: a
  budget:
    max_cost_usd: 1.5
  a -> done when not approved
  a -> a when "length(outputs.a.text) > 3" as retry(3) with {
    note: "again",
    n: "{{loop.retry.iteration}}"
  }
"""


def test_whole_grammar_parses_without_diagnostics() -> None:
    module, diags = parse(WORKFLOW)
    assert list(diags) == []
    kinds = [type(d).__name__ for d in module.declarations]
    assert kinds == ["VarsDecl", "SchemaDecl", "NodeDecl", "WorkflowDecl"]


def test_vars_and_schema_fields() -> None:
    module, _ = parse(WORKFLOW)
    vars_decl = module.declarations[0]
    assert isinstance(vars_decl, ast.VarsDecl)
    tags = vars_decl.vars[1]
    assert (tags.name, tags.type.name, tags.type.is_list) == ("tags", "string", True)
    assert isinstance(tags.default, ast.ListValue)
    schema = module.declarations[1]
    assert isinstance(schema, ast.SchemaDecl)
    assert [e.text for e in schema.fields[1].enum] == ["formal", "casual"]


def test_edges_carry_conditions_loops_mappings_and_spans() -> None:
    module, _ = parse(WORKFLOW)
    wf = module.declarations[-1]
    assert isinstance(wf, ast.WorkflowDecl)
    first, second = wf.edges
    assert isinstance(first.when, ast.WhenField)
    assert (first.when.field, first.when.negated) == ("approved", True)
    assert first.src_span == Span(19, 3, 19, 4)
    assert isinstance(second.when, ast.WhenExpr)
    assert second.when.text == "length(outputs.a.text) > 3"
    assert second.when.text_span.column == 16  # just inside the quote
    assert second.loop is not None and (second.loop.name, second.loop.bound.text) == ("retry", "3")
    assert second.with_ is not None
    assert [e.key for e in second.with_.entries] == ["note", "n"]
    assert wf.vars[0].vars[0].name == "extra"


def test_block_properties_hold_nested_entries() -> None:
    module, _ = parse(WORKFLOW)
    wf = module.declarations[-1]
    assert isinstance(wf, ast.WorkflowDecl)
    budget = next(p for p in wf.properties if p.name == "budget")
    assert isinstance(budget.value, ast.BlockValue)
    assert [(e.name, e.value) for e in budget.value.entries] == [
        ("max_cost_usd", ast.NumberValue("1.5", Span(18, 19, 18, 22)))
    ]


def test_errors_are_collected_and_parsing_continues() -> None:
    text = 'agent a:\n  model "x"\nagent b:\n  tools: [x,, y]\nwibble\nworkflow w:\n  entry: a\n'
    module, diags = parse(text)
    lines = [(d.code, d.line) for d in diags]
    assert lines == [("S001", 2), ("S001", 4), ("S001", 5)]
    names = [getattr(d, "name", None) for d in module.declarations]
    assert names == ["a", "b", "w"]


def test_edges_outside_workflow_get_a_hint() -> None:
    _, diags = parse("a -> b\n")
    (diag,) = list(diags)
    assert "inside the workflow" in diag.message


def test_every_node_keyword_parses() -> None:
    text = "".join(
        f"{kind} n{i}:\n  await: wait_all\n\n" for i, kind in enumerate(ast.NODE_KEYWORDS)
    )
    module, diags = parse(text)
    assert list(diags) == []
    assert [d.kind for d in module.declarations if isinstance(d, ast.NodeDecl)] == list(
        ast.NODE_KEYWORDS
    )


def test_a_header_missing_only_its_colon_is_one_error_not_three() -> None:
    from iterion_nb.ir.compile import analyze

    text = 'agent a\n  model: "scripted"\n\nworkflow w\n  entry: a\n  a -> done\n'
    result = analyze(text, "t.iter")
    found = [(d.code, d.line, d.message) for d in result.diagnostics]
    assert found == [
        ("S001", 1, "expected ':' after 'agent a', found end of line"),
        ("S001", 4, "expected ':' after 'workflow w', found end of line"),
    ]  # not also "entry 'a' is not a declared node", "unknown node 'a'", "no workflow"
    assert result.workflow is None  # still an error: nothing runs


def test_a_header_missing_its_colon_without_a_block_still_stops_there() -> None:
    _, diags = parse("agent a\nworkflow w:\n  entry: a\n")
    assert [(d.code, d.line) for d in diags] == [("S001", 1)]


def _edges(body: str) -> tuple[tuple[ast.EdgeDecl, ...], Diagnostics]:
    module, diags = parse(f"workflow w:\n  entry: a\n{body}")
    workflow = module.declarations[0]
    assert isinstance(workflow, ast.WorkflowDecl)
    return workflow.edges, diags


def test_edge_clauses_come_in_any_order() -> None:
    """Upstream's parser reads ``when``, ``as`` and ``with`` in any order."""
    orders = [
        '  j -> a when not ok as fix(3) with { x: "1" }',
        '  j -> a as fix(3) when not ok with { x: "1" }',
        '  j -> a with { x: "1" } when not ok as fix(3)',
        '  j -> a as fix(3) with { x: "1" } when not ok',
    ]
    for line in orders:
        (edge,), diags = _edges(line + "\n")
        assert list(diags) == [], line
        assert isinstance(edge.when, ast.WhenField) and edge.when.negated, line
        assert edge.loop is not None and edge.loop.name == "fix", line
        assert edge.with_ is not None and edge.with_.entries[0].key == "x", line
    (edge,), diags = _edges("  j -> a as fix(3) else\n")
    assert list(diags) == [] and edge.otherwise and edge.loop is not None


def test_an_edge_clause_given_twice_is_an_error_where_it_repeats() -> None:
    cases = [
        ("  j -> a when ok as fix(3) when not ok\n", "when", "duplicate 'when' clause"),
        ('  j -> a as fix(3) with { x: "1" } as other(2)\n', " as", "duplicate 'as' clause"),
        ('  j -> a with { x: "1" } with { y: "2" }\n', "with", "duplicate 'with' clause"),
        ("  j -> a when ok as fix(3) else\n", "else", "'when' or 'else', not both"),
        ("  j -> a else else\n", "else", "duplicate 'else' clause"),
    ]
    for line, word, message in cases:
        (edge,), diags = _edges(line)
        (diag,) = list(diags)
        column = line.rindex(word) + 1 + (word[0] == " ")  # at the clause that repeats
        assert (diag.code, diag.line, diag.column) == ("S001", 3, column), line
        assert message in diag.message, line
        # the edge is kept, with its first clauses, so nothing else is reported about it
        assert edge.dst == "a"


def test_a_misspelt_keyword_is_one_error_that_names_the_keyword_meant() -> None:
    from iterion_nb.ir.compile import analyze

    text = (
        'varss:\n  topic: string\n\nagnet poet:\n  model: "scripted"\n'
        '  user: "{{vars.topic}}"\n\nworkflw w:\n  entry: poet\n  poet -> done\n'
    )
    result = analyze(text, "t.iter")
    found = [(d.code, d.line, d.message.rpartition(", found ")[2]) for d in result.diagnostics]
    assert found == [
        ("S001", 1, "'varss'; did you mean 'vars'?"),
        ("S001", 4, "'agnet'; did you mean 'agent'?"),
        ("S001", 8, "'workflw'; did you mean 'workflow'?"),
    ]  # read as meant: not also "entry 'poet' is not a declared node", "unknown node 'poet'"
    assert result.workflow is None  # still an error: nothing runs


def test_an_unknown_keyword_close_to_none_is_skipped_with_its_block() -> None:
    _, diags = parse('wibble poet:\n  model: 1\nagent a:\n  model: "x"\n')
    assert [(d.code, d.line) for d in diags] == [("S001", 1)]
    assert "did you mean" not in next(iter(diags)).message
