"""The Markdown report keeps agent- and person-written text inert, checked by rendering it.

The report is rendered with markdown-it-py (CommonMark, tables on, raw HTML
on) with its link validation switched off, as a permissive renderer would
be: nothing written by an agent or a person may come out as an image, a
link or HTML, yet every character of it must still be shown.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from html import unescape
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

import iterion_nb as it
from iterion_nb.report.build import ReportData
from iterion_nb.report.markdown import to_markdown
from iterion_nb.report.mdsafe import fenced, inline
from iterion_nb.runtime.records import Event, Interaction, Option, Run

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

#: What agents and people have been seen to write, and the obfuscations of it.
HOSTILE = [
    "![](https://tracker.example/pixel.png)",
    "![alt](http://tracker.example/p.gif 'title')",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](javascript&#58;alert(1))",
    "[click](javascript&colon;alert(1))",
    "[click](&#106;avascript:alert(1))",
    "[click](%6A%61vascript:alert(1))",
    "[click](java\tscript:alert(1))",
    "[click](<java\tscript:alert(1)>)",
    "[click](javascript\\:alert(1))",
    "[click]( javascript:alert(1) )",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[click](vbscript:msgbox(1))",
    "[ref][1]\n\n[1]: javascript:alert(1)",
    "[ref]\n[ref]: https://tracker.example/r",
    "<javascript:alert(1)>",
    "<https://tracker.example/auto>",
    "<img src=https://tracker.example/i.png>",
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "<iframe src=https://evil.example></iframe>",
    "<a href='javascript:alert(1)'>x</a>",
    "<svg onload=alert(1)>",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "\\[not a link\\](javascript:alert(1))",
    "\\![x](https://tracker.example/esc.png)",
    "`code` [x](javascript:alert(1)) `more`",
    "a | b | c",
    "line one\nline two\r\n[x](javascript:alert(1))",
    "```\n[x](javascript:alert(1))\n```",
]

MARKUP = list("[]()<>!&#;:\\|`*_~\n\t")
SAFE_TAGS = {"h1", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "pre", "code",
             "blockquote", "strong", "em"}  # fmt: skip
DANGEROUS_SCHEMES = ("javascript:", "data:", "vbscript:")


class Tags(HTMLParser):
    """Every tag and attribute of rendered HTML, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def render(markdown: str) -> Tags:
    md = MarkdownIt("commonmark").enable("table")
    md.validateLink = lambda url: True  # type: ignore[method-assign]  # a permissive renderer
    parser = Tags()
    parser.feed(md.render(markdown))
    return parser


def scheme(url: str) -> str:
    """The scheme a browser would see: entities and percent codes decoded, controls dropped."""
    url = unquote(unescape(url))
    return re.sub(r"[\x00-\x20\x7f]", "", url).lower()


def assert_inert(rendered: Tags) -> None:
    for tag, attrs in rendered.tags:
        assert tag in SAFE_TAGS, (tag, attrs)
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            if name == "class" and tag == "code" and (value or "").startswith("language-"):
                continue
            assert name == "style" and tag in ("th", "td"), (tag, name, value)
            assert not scheme(value or "").startswith(DANGEROUS_SCHEMES)


def report(text: str) -> ReportData:
    """A report in which ``text`` is every piece an agent or a person could write."""
    run = Run(
        id="r1", workflow=text, source_hash="h", status="failed", created_at=AT,
        updated_at=AT, error=text,
    )  # fmt: skip
    question = Interaction(
        id="q1", run_id="r1", node_id=text, kind="async", questions=(text, text),
        requested_at=AT, options=(Option(id=text, label=text),), answered_at=AT,
        answers=text, answered_by=text,
    )  # fmt: skip
    events = [
        Event(run_id="r1", seq=1, type="node_started", at=AT, node_id=text),
        Event(run_id="r1", seq=2, type=text, at=AT, data={"text": text}, node_id=text),
    ]
    return ReportData(
        run=run, workflow=None, events=events, interactions=[question], generated_at=AT,
        outputs={text: {"text": text, text: [text]}}, usage={"tokens": 3},
    )  # fmt: skip


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_renders_as_text_and_nothing_else(text: str) -> None:
    rendered = render(to_markdown(report(text)))
    assert_inert(rendered)
    visible = "".join(rendered.text)
    assert visible.count(" ".join(text.split())) >= 8  # title, error, node, question, answer …


def test_remote_images_and_script_links_render_without_the_fix_too() -> None:
    # The test's renderer is the permissive one it claims to be: the same
    # Markdown, unescaped, does make an image and a javascript: link.
    rendered = render("![](https://tracker.example/p.png) [x](javascript&#58;alert(1))")
    tags = {tag: dict(attrs) for tag, attrs in rendered.tags}
    assert tags["img"]["src"] == "https://tracker.example/p.png"
    assert scheme(tags["a"]["href"] or "").startswith("javascript:")


def test_outputs_stay_whole_in_a_fence_they_cannot_close() -> None:
    value = {"a": "```\n[x](javascript:alert(1))", "b": "````` ~~~ <img src=x>"}
    lines = fenced('{"k": "` `` ```` ````` "}', "json")
    assert lines[0] == "``````json" and lines[-1] == "``````"
    data = report("ok")
    data.outputs = {"n": value}
    rendered = render(to_markdown(data))
    assert_inert(rendered)
    blocks = [t for t in rendered.text if "javascript" in t or "~~~" in t]
    assert json.dumps(value, indent=2) + "\n" in blocks


def test_the_graph_shows_source_text_as_text() -> None:
    source = (
        "schema o:\n  v: string\n\n"
        'emit e:\n  event: "<img src=https://tracker.example/e.png>"\n\n'
        'wait a:\n  event: "<img src=https://tracker.example/e.png>"\n  timeout: "1m"\n'
        "  output: o\n\n"
        "workflow w:\n  entry: e\n  e -> a\n"
        "  a -> done when \"v == '<img src=https://tracker.example/p.png> #60; ```'\"\n"
        "  a -> done\n"
    )
    data = report("ok")
    data.workflow = it.compile(source)
    markdown = to_markdown(data)
    graph = markdown.split("## Workflow")[1].split("## Timeline")[0]
    assert "<" not in graph.replace("<br/>", "").replace("<small>", "").replace("</small>", "")
    assert "#35;60;" in graph  # a '#' of the source cannot spell a Mermaid entity
    rendered = render(markdown)
    assert_inert(rendered)
    assert sum(tag == "pre" for tag, _ in rendered.tags) == 2  # the graph and one output


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(MARKUP), max_size=60))
def test_any_text_is_one_cell_shown_exactly(text: str) -> None:
    markdown = "| a |\n|---|\n| " + inline(text) + " |\n"
    rendered = render(markdown)
    assert_inert(rendered)
    cells: list[Any] = [tag for tag, _ in rendered.tags if tag == "td"]
    assert len(cells) == 1
    body = "".join(rendered.text).split("a", 1)[1]
    expected = re.sub(r"[\x00-\x1f\x7f\x85\u2028\u2029]", " ", text)

    def shown(value: str) -> str:  # emphasis may take *, _ and ~ as markup: not compared
        return " ".join(re.sub(r"[*_~]", "", value).split())

    assert shown(body) == shown(expected)
