"""The bounds on recorded data: strict parsing of what a person gives, a check of what runs make."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from iterion_nb.safe_data import MAX_DATA_CHARS, DataError, loads, problem


def nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"a": [1, {"b": float("nan")}]}, "'a[1].b' is not a finite number (nan)"),
        ([0, float("-inf")], "'[1]' is not a finite number (-inf)"),
        ({"n": 10**4300}, "'n' is an integer of 4,300 digits or more"),
        ({"s": "a\udcffb"}, "'s' holds a lone surrogate (not UTF-8)"),
        ({"a\ud800": 1}, "has a key with a lone surrogate (not UTF-8)"),
        ({"m": {(1, 2): "x"}}, "'m' has a key that is not text (tuple)"),
        ({"o": {1, 2}}, "'o' is not JSON data (set)"),
        ({"p": MappingProxyType({"a": 1})}, "'p' is not JSON data (mappingproxy)"),
        (["x" * MAX_DATA_CHARS], f"is larger than {MAX_DATA_CHARS:,} characters as JSON"),
        ("x" * (MAX_DATA_CHARS - 1), f"is larger than {MAX_DATA_CHARS:,} characters as JSON"),
        (float("inf"), "is not a finite number (inf)"),
        (nested(201), "nests deeper than 200"),
        ({"a": [{"k\x00": 1}]}, "'a[0]' has a key holding U+0000"),
        ({"k\x1b[2J": float("nan")}, "'[\"k\\u001b[2J\"]' is not a finite number (nan)"),
    ],
)
def test_what_no_store_keeps_is_named_where_it_is(value: Any, said: str) -> None:
    found = problem(value)
    assert found is not None and found.endswith(said), found


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(2**63), 2**63 - 1, 1.5, "", "tea \u00e9\U0001f375", [], {},
     {"a": [1, 2.5, None, False, "s", {"b": []}]}, nested(64), "x" * (MAX_DATA_CHARS - 2),
     # what json has always written, and a model, a tool or Python may give
     {"big": 2**70, "neg": -(10**4299)}, nested(200), {"v": "a\x00b"},
     {1: "a", False: "b", None: "c", 2.5: "d"},
     (1, [2, (3,)])],
)  # fmt: skip
def test_what_every_store_keeps_passes(value: Any) -> None:
    assert problem(value) is None


@pytest.mark.parametrize(
    ("text", "code", "said"),
    [
        ("NaN", "bad_json", "the value is not JSON: NaN is not a JSON value"),
        ("[1e400]", "bad_json", "a number in the value is out of range"),
        ("9" * 5000, "bad_json", "a number in the value is out of range (64 bits)"),
        ("[" * 5000 + "]" * 5000, "too_deep", "the value nests deeper than 64"),
        ("[" * 65 + "]" * 65, "too_deep", "the value nests deeper than 64"),
        ("9223372036854775808", "bad_json", "a number in the value is out of range (64 bits)"),
        ('{"/tmp/x": [NaN]}', "bad_json", "the value is not JSON: NaN"),
        ('{"/tmp/x": "\\udc00"}', "bad_json", "the value holds a lone surrogate (not UTF-8)"),
        ('{"a": {"b": 1, "b": 2}}', "bad_json", 'the value repeats the key "b" in one object'),
        ('"\\ud800"', "bad_json", "the value holds a lone surrogate (not UTF-8)"),
        ("{", "bad_json", "the value is not JSON: Expecting property name enclosed in double"),
    ],
)
def test_loads_refuses_with_the_problem_named(text: str, code: str, said: str) -> None:
    with pytest.raises(DataError) as refused:
        loads(text, "the value")
    assert refused.value.code == code
    assert str(refused.value).startswith(said), str(refused.value)


def test_loads_reads_json_as_json() -> None:
    assert loads('{"a": [1, 2.5, null, true, "\\u00e9"]}', "x") == {"a": [1, 2.5, None, True, "é"]}
    assert loads(str(2**63 - 1), "x") == 2**63 - 1
