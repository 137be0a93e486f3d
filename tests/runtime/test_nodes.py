"""Every node kind, through a real Session on the in-memory and DuckDB stores."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

import iterion_nb as it
from iterion_nb.errors import VarsError
from iterion_nb.runtime.ports import BackendRequest, BackendResult

from .conftest import SessionFactory, run_to_end

AGENT_FLOW = """\
vars:
  topic: string = "tea"

schema verdict:
  approved: bool
  reason: string

prompt sys:
  You judge things.

prompt ask:
  Is {{vars.topic}} good? Run {{run.id}}.

agent writer:
  model: "m-${MODEL_SUFFIX:-x}"
  user: ask
  publish: draft

judge check:
  system: sys
  user: "Draft: {{outputs.writer.text}} / {{artifacts.draft.text}}"
  output: verdict

workflow w:
  entry: writer
  writer -> check
  check -> done when approved
  check -> fail when not approved
"""


async def test_agent_and_judge_render_prompts_publish_and_validate(
    make_session: SessionFactory,
) -> None:
    seen: dict[str, BackendRequest] = {}

    def writer(req: BackendRequest) -> BackendResult:
        seen["writer"] = req
        return BackendResult("Tea is good.", tokens_in=10, tokens_out=5, cost_usd=0.01)

    def check(req: BackendRequest) -> dict[str, Any]:
        seen["check"] = req
        return {"approved": True, "reason": "fine"}

    session = make_session({"writer": writer, "check": check})
    run = await run_to_end(session, AGENT_FLOW)
    assert run.status == "finished"
    assert seen["writer"].user == f"Is tea good? Run {run.id}."
    assert seen["writer"].model == "m-x"
    assert seen["check"].system == "You judge things."
    assert seen["check"].user == "Draft: Tea is good. / Tea is good."
    assert seen["check"].output_schema is not None
    assert run.outputs == {"writer": {"text": "Tea is good."}, "check": {"approved": True,
                           "reason": "fine"}}  # fmt: skip
    events = await run.events()
    types = [e.type for e in events]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    step = next(e for e in events if e.type == "llm_step_finished")
    assert step.data == {"tokens_in": 10, "tokens_out": 5, "cost_usd": 0.01}
    written = next(e for e in events if e.type == "artifact_written")
    assert written.data == {"name": "draft", "version": 1}
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_fail_terminal_fails_for_good(make_session: SessionFactory) -> None:
    session = make_session({"writer": lambda r: "meh", "check": lambda r: {"approved": False,
                            "reason": "no"}})  # fmt: skip
    run = await run_to_end(session, AGENT_FLOW)
    assert run.status == "failed"
    assert run.error == "the workflow reached 'fail'"
    with pytest.raises(it.IterionError, match="cannot be resumed"):
        await run.resume()


async def test_output_violating_its_schema_fails_resumably_naming_the_field(
    make_session: SessionFactory,
) -> None:
    session = make_session({"writer": lambda r: "x", "check": lambda r: {"approved": "yes"}})
    run = await run_to_end(session, AGENT_FLOW)
    assert run.status == "failed_resumable"
    assert run.error is not None
    assert "node 'check'" in run.error
    assert "field 'approved' should be bool, got a string" in run.error
    assert "field 'reason' is missing" in run.error


async def test_missing_or_mistyped_variables_fail_before_the_run(
    make_session: SessionFactory,
) -> None:
    session = make_session()
    wf = it.compile(AGENT_FLOW.replace('topic: string = "tea"', "topic: string\n  n: int = 1"))
    with pytest.raises(VarsError, match="variable 'topic'"):
        await session.start(wf)
    with pytest.raises(VarsError, match="unknown variable 'topci'"):
        await session.start(wf, vars={"topic": "x", "topci": "y"})
    with pytest.raises(VarsError, match="variable 'n' should be int"):
        await session.start(wf, vars={"topic": "x", "n": "three"})
    assert await session.runs() == []


ROUTERS = """\
schema pick:
  go_left: bool

agent a:
  output: pick

router cond:
  mode: condition

router rr:
  mode: round_robin

router chooser:
  mode: llm
  user: "choose"

compute left:
  expr:
    side: "'left'"

compute right:
  expr:
    side: "'right'"

compute after_rr:
  expr:
    n: "loop.again.iteration"

workflow w:
  entry: a
  a -> cond
  cond -> left when go_left
  cond -> right when not go_left
  left -> rr
  right -> rr
  rr -> chooser
  rr -> after_rr
  after_rr -> rr as again(2)
  chooser -> done
  chooser -> fail
"""


async def test_condition_round_robin_and_llm_routers(make_session: SessionFactory) -> None:
    picked: list[tuple[str, ...]] = []

    def chooser(req: BackendRequest) -> str:
        picked.append(req.choices)
        return "done"

    session = make_session({"a": lambda r: {"go_left": False}, "chooser": chooser})
    run = await run_to_end(session, ROUTERS)
    assert run.status == "finished", run.error
    assert run.outputs["right"] == {"side": "right"}
    assert "left" not in run.outputs
    # round robin: 1st pass -> chooser? no: rr alternates chooser, after_rr
    route = [e.data["to"] for e in await run.events() if e.type == "edge_selected"
             and e.data["from"] == "rr"]  # fmt: skip
    assert route == ["chooser"]
    assert picked == [("done", "fail")]


async def test_round_robin_alternates(make_session: SessionFactory) -> None:
    flow = ROUTERS.replace("  rr -> chooser\n  rr -> after_rr", "  rr -> after_rr\n  rr -> chooser")
    session = make_session({"a": lambda r: {"go_left": True}, "chooser": lambda r: ["done"]})
    run = await run_to_end(session, flow)
    assert run.status == "finished", run.error
    route = [e.data["to"] for e in await run.events() if e.type == "edge_selected"
             and e.data["from"] == "rr"]  # fmt: skip
    assert route == ["after_rr", "chooser"]
    assert run.outputs["after_rr"] == {"n": 0}


TOOLS = """\
vars:
  word: string = "it's; rm -rf /tmp/nothing"

schema parsed:
  n: int

tool echo:
  command: "printf %s {{vars.word}}"

tool json_out:
  command: "cat"
  output: parsed

tool failing:
  command: "echo broken >&2; exit 3"

workflow w:
  entry: echo
  echo -> json_out with { n: "{{outputs.echo.exit_code}}" }
  json_out -> done
"""


async def test_tool_quotes_values_reads_stdin_and_parses_json(
    make_session: SessionFactory,
) -> None:
    session = make_session()
    run = await run_to_end(
        session, TOOLS.replace('\ntool failing:\n  command: "echo broken >&2; exit 3"\n', "")
    )
    assert run.status == "finished", run.error
    assert run.outputs["echo"] == {"stdout": "it's; rm -rf /tmp/nothing", "stderr": "",
                                   "exit_code": 0}  # fmt: skip
    assert run.outputs["json_out"] == {"n": 0}
    called = [e.data["command"] for e in await run.events() if e.type == "tool_called"]
    assert called[0] == "printf %s 'it'\"'\"'s; rm -rf /tmp/nothing'"


async def test_tool_failure_carries_stderr(make_session: SessionFactory) -> None:
    session = make_session()
    flow = TOOLS.replace("entry: echo", "entry: failing").replace(
        "  json_out -> done", "  json_out -> done\n  failing -> done"
    )
    run = await run_to_end(session, flow)
    assert run.status == "failed_resumable"
    assert run.error == "node 'failing': command exited with 3: broken"
    errors = [e.data for e in await run.events() if e.type == "tool_error"]
    assert errors == [{"command": "echo broken >&2; exit 3", "exit_code": 3, "stderr": "broken"}]


async def test_hanging_tool_hits_its_timeout(make_session: SessionFactory) -> None:
    flow = (
        'tool slow:\n  command: "sleep 30"\n  timeout: "300ms"\n\n'
        "workflow w:\n  entry: slow\n  slow -> done\n"
    )
    run = await run_to_end(make_session(), flow)
    assert run.status == "failed_resumable"
    assert run.error == "node 'slow': command timed out after 0.3s: sleep 30"


async def test_compute_reads_input_and_namespaces(make_session: SessionFactory) -> None:
    flow = """\
vars:
  xs: int[] = [3, 1, 3]

schema nums:
  a: int
  b: int

schema out:
  total: int
  tags: int[]
  label: string

compute start:
  output: nums
  expr:
    a: "2"
    b: "length(vars.xs)"

compute sum:
  input: nums
  output: out
  expr:
    total: "a * 10 + b"
    tags: "unique(vars.xs)"
    label: "if(a > 1, 'big', 'small')"

workflow w:
  entry: start
  start -> sum
  sum -> done
"""
    run = await run_to_end(make_session(), flow)
    assert run.status == "finished", run.error
    assert run.outputs["sum"] == {"total": 23, "tags": [3, 1], "label": "big"}


async def test_loop_exhaustion_fails_naming_the_loop(make_session: SessionFactory) -> None:
    flow = """\
schema v:
  ok: bool

agent try_it:
  output: v

workflow w:
  entry: try_it
  try_it -> done when ok
  try_it -> try_it when not ok as retry(3)
"""
    backend_calls: list[int] = []

    def never(req: BackendRequest) -> dict[str, bool]:
        backend_calls.append(1)
        return {"ok": False}

    run = await run_to_end(make_session({"try_it": never}), flow)
    assert run.status == "failed_resumable"
    assert run.error == "node 'try_it': loop 'retry' is exhausted (3 iterations)"
    assert len(backend_calls) == 4  # the first try and three retries
    assert len(run.outputs) == 1
    await run.refresh()
    assert run.outputs["try_it"] == {"ok": False}


async def test_human_gate_pauses_and_resumes_with_answers(make_session: SessionFactory) -> None:
    flow = """\
human approve:
  instructions: "Ship {{vars.what}}?"

compute after:
  expr:
    said: "outputs.approve.text"

vars:
  what: string = "v2"

workflow w:
  entry: approve
  approve -> after
  after -> done
"""
    session = make_session()
    run = await run_to_end(session, flow)
    assert run.status == "paused_waiting_human"
    (question,) = await run.pending_questions()
    assert (question.kind, question.question, question.node_id) == ("human", "Ship v2?", "approve")
    resumed = await session.resume(run.id, answers={question.id: "yes, ship it"})
    assert await resumed.wait(10) == "finished"
    assert resumed.outputs["after"] == {"said": "yes, ship it"}
    types = [e.type for e in await run.events()]
    for expected in ("human_input_requested", "run_paused", "interaction_answered",
                     "run_resumed", "human_answers_recorded", "run_finished"):  # fmt: skip
        assert expected in types


TWO_PEOPLE = """\
human review:
  instructions: "Ship it?"
  min_answers: 2

compute tally:
  expr:
    first: "outputs.review.text"
    every: "outputs.review.answers"

workflow w:
  entry: review
  review -> tally
  tally -> done
"""


async def test_a_gate_asking_two_people_gives_the_next_node_every_answer(
    make_session: SessionFactory,
) -> None:
    """`{{outputs.h.answers}}` of a `min_answers: 2` gate: once refused at compile (C031)."""
    flow = TWO_PEOPLE
    alone = flow.replace("  min_answers: 2\n", "")
    assert [d.code for d in it.analyze(alone).diagnostics] == ["C031"]  # one answer: no list
    session = make_session()
    run = await run_to_end(session, flow)
    first, second = await run.pending_questions()
    await run.answer(first.id, "yes", answered_by="ada")
    await run.answer(second.id, "not yet", answered_by="bob")
    assert await run.wait(10) == "finished"
    assert run.outputs["tally"] == {"first": "yes", "every": ["yes", "not yet"]}


SEVERAL_OR_MODEL = "schema verdict:\n  ship: bool\n  why: string\n\n" + TWO_PEOPLE.replace(
    "  min_answers: 2\n", "  interaction: llm_or_human\n  min_answers: 2\n  output: verdict\n"
)


async def test_a_gate_asking_two_people_reads_alike_when_the_model_answers(
    make_session: SessionFactory,
) -> None:
    """``llm_or_human`` with ``min_answers: 2``: the model's answer once gave the schema's shape.

    The next node's ``outputs.review.answers`` then failed the run when the
    model answered, and ``outputs.review.ship`` when people did.
    """
    verdict = {"ship": True, "why": "tests pass"}
    run = await run_to_end(make_session({"review": lambda r: verdict}), SEVERAL_OR_MODEL)
    assert run.status == "finished", run.error
    assert run.outputs["review"] == {"text": json.dumps(verdict, sort_keys=True),
                                     "answers": [verdict]}  # fmt: skip
    assert run.outputs["tally"]["every"] == [verdict]
    # people: the same shape, one item per person
    run = await run_to_end(make_session({"review": lambda r: None}), SEVERAL_OR_MODEL)
    first, second = await run.pending_questions()
    await run.answer(first.id, {"ship": True, "why": "fine"}, answered_by="ada")
    await run.answer(second.id, {"ship": False, "why": "flaky"}, answered_by="bob")
    assert await run.wait(10) == "finished"
    assert [a["ship"] for a in run.outputs["tally"]["every"]] == [True, False]
    # so a schema field is no output of the gate, whoever answers: refused at compile
    fields = SEVERAL_OR_MODEL.replace('"outputs.review.answers"', '"outputs.review.ship"')
    assert [d.code for d in it.analyze(fields).diagnostics] == ["C031"]


def test_min_answers_where_only_a_model_answers_is_a_warning() -> None:
    only_model = SEVERAL_OR_MODEL.replace("llm_or_human", "llm")  # the model's form, as one
    only_model = only_model.replace('"outputs.review.answers"', '"outputs.review.ship"')
    only_model = only_model.replace('"outputs.review.text"', '"outputs.review.why"')
    (warning,) = it.analyze(only_model).diagnostics
    assert (warning.code, warning.span.line) == ("C366", 8)
    assert "'min_answers:' has no effect on human 'review' with interaction: llm" in warning.message
    # on an agent the property is not one at all: that alone is said (not a "human" C366)
    agent = "agent a:\n  interaction: llm\n  min_answers: 2\n\n"
    agent += "workflow w:\n  entry: a\n  a -> done\n"
    assert [d.code for d in it.analyze(agent).diagnostics] == ["C350"]


async def test_answering_the_gate_resumes_the_run(make_session: SessionFactory) -> None:
    flow = 'human ok:\n  instructions: "Go?"\n\nworkflow w:\n  entry: ok\n  ok -> done\n'
    run = await run_to_end(make_session(), flow)
    question = await run.next_question(timeout=5)
    assert question is not None
    assert (await run.answer(question.id, "go")).items() >= {
        "queued": False,
        "resumed": True,
    }.items()
    assert await run.wait(10) == "finished"
    assert run.outputs["ok"] == {"text": "go"}


async def test_llm_human_and_llm_or_human(make_session: SessionFactory) -> None:
    flow = """\
human a:
  instructions: "Pick one"
  interaction: llm

human b:
  instructions: "Pick again"
  interaction: llm_or_human

workflow w:
  entry: a
  a -> b
  b -> done
"""
    session = make_session({"a": lambda r: "first", "b": lambda r: None})
    run = await run_to_end(session, flow)
    assert run.outputs["a"] == {"text": "first"}
    assert run.status == "paused_waiting_human"
    (question,) = await run.pending_questions()
    assert question.node_id == "b"


async def test_source_file_json_payloads(tmp_path: Path, make_session: SessionFactory) -> None:
    # a workflow compiled from a file keeps its source for resume
    path = tmp_path / "flow.iter"
    path.write_text('human ok:\n  instructions: "Go?"\n\nworkflow w:\n  entry: ok\n  ok -> done\n')
    session = make_session()
    run = await session.start(it.compile_file(path))
    await run.wait(5)
    record = await run.refresh()
    assert record.source == path.read_text()
    assert json.loads(json.dumps(record.checkpoint)) == record.checkpoint


async def test_a_schema_less_agent_that_answers_a_json_object_outputs_the_object(
    make_session: SessionFactory,
) -> None:
    flow = 'agent a:\n  model: "m"\n\nagent b:\n  model: "m"\n\nworkflow w:\n  entry: a\n'
    flow += "  a -> b\n  b -> done\n"
    session = make_session({"a": lambda req: '{"k": 1, "v": "é"}', "b": lambda req: "plain text"})
    run = await run_to_end(session, flow)
    assert run.outputs == {"a": {"k": 1, "v": "é"}, "b": {"text": "plain text"}}


# -- values no store keeps: the node fails, naming the field and why ---------------------------
DOUBLING = """\
vars:
  seed: string

schema S:
  s: string

compute seed:
  output: S
  expr:
    s: "vars.seed"

compute grow:
  input: S
  output: S
  expr:
    s: "input.s + input.s"

workflow w:
  entry: seed
  seed -> grow with { s: "{{outputs.seed.s}}" }
  grow -> grow as g(30) with { s: "{{outputs.grow.s}}" }
  grow -> done
"""


@pytest.mark.parametrize(
    ("expr", "said"),
    [
        (" * ".join(["1000000000000000000.5"] * 18),
         "node 'a': 'x': '*' gives a number too large to hold"),
        ("9223372036854775807 + 1", "node 'a': 'x': '+' gives an integer beyond 64 bits"),
        ("-9223372036854775807 - 2", "node 'a': 'x': '-' gives an integer beyond 64 bits"),
        ("9223372036854775807 * 9223372036854775807 / 3",
         "node 'a': 'x': '*' gives an integer beyond 64 bits"),
    ],
)  # fmt: skip
async def test_a_number_too_large_to_hold_fails_the_node(
    expr: str, said: str, make_session: SessionFactory
) -> None:
    """Once: an infinity or a 5,000-digit int left the run `running`, its error lost."""
    flow = f'compute a:\n  expr:\n    x: "{expr}"\n\nworkflow w:\n  entry: a\n  a -> done\n'
    run = await run_to_end(make_session(), flow)
    assert (run.status, run.error) == ("failed_resumable", said)
    failed = [e.data["error"] for e in await run.events() if e.type == "node_failed"]
    assert failed == [said]


async def test_text_that_doubles_each_round_stops_at_the_size_limit(
    make_session: SessionFactory,
) -> None:
    """Once 3 GB of memory, a frozen event loop, a lost lease and a run left `interrupted`."""
    # 63 MiB of outputs to record: longer than run_to_end's 20 s on a loaded machine
    run = await make_session().start(it.compile(DOUBLING), vars={"seed": "ab" * 2**19})
    await run.wait(timeout=90)
    assert run.status == "failed_resumable"
    assert run.error == "node 'grow': output is larger than 67,108,864 characters as JSON"
    grown = [e.data["output"]["s"] for e in await run.events() if e.type == "node_finished"]
    assert len(grown[-1]) == 2**25  # the last round that fit: 1 Mi characters doubled 5 times


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"approved": True, "reason": float("inf")}, "output 'reason' is not a finite number"),
        ({"approved": True, "reason": "a\ud800"}, "output 'reason' holds a lone surrogate"),
        ({"approved": True, "reason": 10**4300}, "output 'reason' is an integer of 4,300 digits"),
        ({"approved": True, "reason": MappingProxyType({})}, "output 'reason' is not JSON data"),
    ],
)  # fmt: skip
async def test_a_backend_output_no_store_keeps_fails_the_node(
    answer: dict[str, Any], said: str, make_session: SessionFactory
) -> None:
    """A model or tool output goes through the same check as an expression's result."""
    session = make_session({"writer": lambda r: answer})
    run = await run_to_end(session, AGENT_FLOW)
    assert run.status == "failed_resumable"
    assert run.error is not None and run.error.startswith(f"node 'writer': {said}"), run.error


async def test_what_json_always_wrote_still_passes(make_session: SessionFactory) -> None:
    """Big integers (an id), keys that are numbers, deep nesting: recorded as before."""
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]
    answer = {"id": 12345678901234567890123, "counts": {1: 2, 2: 3}, "deep": deep}
    run = await run_to_end(make_session({"writer": lambda r: answer}), AGENT_FLOW.replace(
        "  writer -> check\n  check -> done when approved\n  check -> fail when not approved",
        "  writer -> done",
    ))  # fmt: skip
    assert run.status == "finished", run.error
    assert run.outputs["writer"]["id"] == 12345678901234567890123


async def test_a_tool_printing_nan_fails_its_node(make_session: SessionFactory) -> None:
    """Python's json reads NaN and Infinity; no store writes them back."""
    flow = (
        "schema parsed:\n  n: float\n\n"
        'tool nan:\n  command: "echo \'{\\"n\\": NaN}\'"\n  output: parsed\n\n'
        "workflow w:\n  entry: nan\n  nan -> done\n"
    )
    run = await run_to_end(make_session(), flow)
    assert run.status == "failed_resumable"
    assert (
        run.error is not None
        and "node 'nan'" in run.error
        and "NaN" in run.error.replace("nan", "NaN")
    ), run.error
