from __future__ import annotations

from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.backends.tools import BUILTINS, REGISTRY, ToolContext, ToolError, resolve_tools


@it.tool
def word_count(text: str, unique: bool = False) -> int:
    """Count the words of a text.

    Longer explanation that is not part of the description.
    """
    words = text.split()
    return len(set(words)) if unique else len(words)


@it.tool(name="shout")
async def make_loud(text: str) -> dict[str, str]:
    """Upper-case a text."""
    return {"loud": text.upper()}


def test_schema_and_description_come_from_the_function() -> None:
    spec = REGISTRY["word_count"].spec
    assert spec.description == "Count the words of a text."
    assert spec.input_schema["required"] == ["text"]
    assert spec.input_schema["properties"]["unique"]["type"] == "boolean"
    assert "shout" in REGISTRY and REGISTRY["shout"].spec.description == "Upper-case a text."


async def test_registered_tools_run_validated(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    assert await REGISTRY["word_count"].run({"text": "a b a", "unique": True}, ctx) == "2"
    assert await REGISTRY["shout"].run({"text": "hé"}, ctx) == '{"loud": "HÉ"}'
    with pytest.raises(ToolError, match="invalid input for word_count: text: Field required"):
        await REGISTRY["word_count"].run({}, ctx)


async def test_file_tools_stay_inside_the_working_directory(tmp_path: Path) -> None:
    ctx = ToolContext(tmp_path)
    write, read, listing = BUILTINS["write_file"], BUILTINS["read_file"], BUILTINS["list_files"]
    assert await write.run({"path": "notes/a.txt", "content": "hello"}, ctx) == (
        "wrote 5 characters to notes/a.txt"
    )
    assert await read.run({"path": "notes/a.txt"}, ctx) == "hello"
    assert await listing.run({}, ctx) == '["notes/a.txt"]'
    for escape in ("../outside.txt", "/etc/passwd", "notes/../../x"):
        with pytest.raises(ToolError, match="outside the run's working directory"):
            await read.run({"path": escape}, ctx)
    with pytest.raises(ToolError, match=r"no file 'missing\.txt'"):
        await read.run({"path": "missing.txt"}, ctx)


async def test_readonly_agents_cannot_write(tmp_path: Path) -> None:
    assert "write_file" not in resolve_tools(("read_file", "write_file"), readonly=True)
    with pytest.raises(ToolError, match="readonly"):
        await BUILTINS["write_file"].run({"path": "x", "content": "y"}, ToolContext(tmp_path, True))
    assert not (tmp_path / "x").exists()


def test_unknown_tool_names_are_reported() -> None:
    with pytest.raises(KeyError, match="unknown tool 'nope'"):
        resolve_tools(("nope",), readonly=False)
