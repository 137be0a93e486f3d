"""A real model's API with no key: the run says which variable to set, and resumes once set.

The SDKs' own words ("Could not resolve authentication method …", "Missing
credentials …") name neither the node's model nor where to set the key; the
run fails resumably, naming both, and a resume with the key set goes on. The
real ``anthropic`` and ``openai`` clients, against the loopback model server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import iterion_nb as it
from iterion_nb.testing.anthropic_server import ScenarioServer

FLOW = """\
schema out:
  text: string

agent writer:
  model: "{model}"
  output: out

workflow w:
  entry: writer
  writer -> done
"""
SCENARIO = {"nodes": {"writer": [{"output": {"text": "written"}}]}}
#: model: (the variables named, the key's variable, the base URL's, the API's path)
KEYS = {
    "anthropic/claude-test": (
        "ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "",
    ),
    "openai/gpt-test": ("OPENAI_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"),
}  # fmt: skip


@pytest.mark.parametrize("model", sorted(KEYS))
async def test_a_missing_key_is_named_and_the_run_resumes_once_set(
    model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    named, key, base, suffix = KEYS[model]
    db = tmp_path / "runs.duckdb"
    session = it.Session(db)
    try:
        run = await session.start(it.compile(FLOW.format(model=model)))
        assert await run.wait(30) == "failed_resumable"
        assert run.error == (
            f"node 'writer': backend failed: model '{model}' needs an API key and none is"
            f" set: set {named}"
            " in the environment of the process that executes the run (this one, or the"
            " cluster's workers), then resume the run"
        )
    finally:
        await session.close()
    with ScenarioServer(SCENARIO) as server:
        monkeypatch.setenv(key, "sk-test")
        monkeypatch.setenv(base, server.url + suffix)
        session = it.Session(db)
        try:
            resumed = await session.resume(run.id)
            assert await resumed.wait(30) == "finished", resumed.error
            assert resumed.outputs["writer"] == {"text": "written"}
        finally:
            await session.close()
