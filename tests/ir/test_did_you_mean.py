"""'did you mean …?' on names a person mistyped: nodes, properties, variables, fields, options."""

from __future__ import annotations

import pytest

from iterion_nb.dsl.diagnostics import did_you_mean
from iterion_nb.ir import analyze

BASE = """\
vars:
  topic: string

schema draft:
  text: string
  score: int

prompt writer_user:
  Write about {{vars.topic}}.

agent writer:
  model: "scripted"
  user: writer_user
  output: draft

agent reviewer:
  model: "scripted"
  user: "Review {{outputs.writer.text}}."

workflow w:
  entry: writer
  writer -> reviewer
  reviewer -> done
"""


def messages(source: str) -> list[str]:
    return [d.message for d in analyze(source, "w.iter").diagnostics]


#: (text in BASE, the typo put there, what the message says)
TYPOS = [
    (
        "  writer -> reviewer",
        "  writer -> reveiwer",
        "unknown node 'reveiwer' in edge; did you mean 'reviewer'?",
    ),
    (
        "  entry: writer",
        "  entry: wirter",
        "entry 'wirter' is not a declared node; did you mean 'writer'?",
    ),
    (
        "  reviewer -> done",
        "  reviewer -> dnoe",
        "unknown node 'dnoe' in edge; did you mean 'done'?",
    ),
    (
        '  model: "scripted"\n  user: writer_user',
        '  modle: "scripted"\n  user: writer_user',
        "no property 'modle'; did you mean 'model'?",
    ),
    (
        "Write about {{vars.topic}}",
        "Write about {{vars.topc}}",
        "undeclared variable 'topc'; did you mean 'topic'?",
    ),
    (
        "{{outputs.writer.text}}",
        "{{outputs.writer.txet}}",
        "has no field 'txet'; did you mean 'text'?",
    ),
    (
        "{{outputs.writer.text}}",
        "{{outputs.writr.text}}",
        "no node is named 'writr'; did you mean 'writer'?",
    ),
    (
        "{{outputs.writer.text}}",
        "{{ouputs.writer.text}}",
        "unknown namespace 'ouputs' in 'ouputs.writer.text'; did you mean 'outputs'?",
    ),
    (
        "  output: draft",
        "  output: drfat",
        "unknown schema 'drfat'; did you mean 'draft'?",
    ),
    (
        "  user: writer_user",
        "  user: writer_usr",
        "unknown prompt 'writer_usr'; did you mean 'writer_user'?",
    ),
    (
        "  score: int",
        "  score: itn",
        "unknown type 'itn'; did you mean 'int'?",
    ),
    (
        '  user: "Review',
        '  readonly: ture\n  user: "Review',
        "found 'ture'; did you mean 'true'?",
    ),
]


@pytest.mark.parametrize(("old", "new", "hint"), TYPOS)
def test_a_typo_gets_the_name_it_meant(old: str, new: str, hint: str) -> None:
    assert old in BASE
    found = messages(BASE.replace(old, new, 1))
    assert any(hint in m for m in found), found


def test_no_guess_when_nothing_is_close() -> None:
    found = messages(BASE.replace("  writer -> reviewer", "  writer -> zzz", 1))
    assert "unknown node 'zzz' in edge" in found
    assert did_you_mean("x", ["model", "user"]) == ""
    assert did_you_mean("Model", ["model"]) == "; did you mean 'model'?"


def test_an_answer_that_is_almost_an_option_gets_the_option() -> None:
    from datetime import UTC, datetime

    from iterion_nb.errors import InvalidAnswerError
    from iterion_nb.runtime.lifecycle import check_fits
    from iterion_nb.runtime.records import Interaction, Option

    options = (Option("formal", "Formal"), Option("casual", "Casual"))
    asked = Interaction("q", "r", "n", "async", ("Tone?",), datetime.now(UTC), options=options,
                        allow_free_text=False)  # fmt: skip
    with pytest.raises(InvalidAnswerError, match="did you mean 'formal'"):
        check_fits(asked, "fromal")
    assert check_fits(asked, "Casual") == "casual"
