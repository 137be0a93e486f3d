"""C310: a node's ``model:`` that its backend cannot serve is a warning at compile time."""

from __future__ import annotations

import pytest

import iterion_nb as it
from iterion_nb.ir.models import serves

CLAW = ["scripted", "scripted/fast", " scripted ", "", "anthropic/claude-sonnet-4-5",
        "openai/gpt-4o", "anthropic/x"]  # fmt: skip
NOT_CLAW = ["claude-sonnet-4-5", "sonnet", "gpt-4o", "anthropic/", "openai", "Scripted",
            "mistral/large", "x"]  # fmt: skip
CLAUDE_CODE = ["claude-sonnet-4-5", "claude-3-5-haiku-20241022", "claude-test", "sonnet",
               "opus", "haiku", "opusplan", "default", "sonnet[1m]",
               "us.anthropic.claude-3-7-sonnet-20250219-v1:0",
               "arn:aws:bedrock:us-east-1:123:inference-profile/x", ""]  # fmt: skip
NOT_CLAUDE_CODE = ["anthropic/claude-sonnet-4-5", "scripted", "openai/gpt-4o", "gpt-4o",
                   "Sonnet", " sonnet", "claude", "claude-"]  # fmt: skip


@pytest.mark.parametrize("model", CLAW)
def test_claw_serves(model: str) -> None:
    assert serves("claw", model)


@pytest.mark.parametrize("model", NOT_CLAW)
def test_claw_does_not_serve(model: str) -> None:
    assert not serves("claw", model)


@pytest.mark.parametrize("model", CLAUDE_CODE)
def test_claude_code_serves(model: str) -> None:
    assert serves("claude_code", model)


@pytest.mark.parametrize("model", NOT_CLAUDE_CODE)
def test_claude_code_does_not_serve(model: str) -> None:
    assert not serves("claude_code", model)


@pytest.mark.parametrize("model", CLAW + NOT_CLAW)
def test_the_claw_rule_agrees_with_the_provider_resolver(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ir layer may not import the backends, so the rule is a copy: keep it honest.
    from iterion_nb.backends.providers import ProviderResolver

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    try:
        ProviderResolver()(model)
        resolved = True
    except ValueError:
        resolved = False
    assert serves("claw", model) == resolved


def flow(model: str, backend: str = "", default: str = "") -> str:
    node_backend = f"  backend: {backend}\n" if backend else ""
    workflow_default = f"  default_backend: {default}\n" if default else ""
    return (
        f'vars:\n  m: string = "scripted"\n\nagent a:\n  model: "{model}"\n{node_backend}\n'
        f"workflow w:\n  entry: a\n{workflow_default}  a -> done\n"
    )


def warnings(text: str) -> list[tuple[str, int, int, str]]:
    result = it.analyze(text)
    assert result.ok  # a warning never stops compilation
    return [(d.code, d.line, d.column, d.message) for d in result.diagnostics]


def test_a_model_its_backend_cannot_serve_is_a_warning_at_the_model() -> None:
    ((code, line, column, message),) = warnings(flow("claude-sonnet-4-5"))
    assert (code, line, column) == ("C310", 5, 10)
    assert "write 'anthropic/claude-sonnet-4-5'" in message


def test_the_node_backend_then_the_workflow_default_decides() -> None:
    assert warnings(flow("claude-sonnet-4-5", backend="claude_code")) == []
    assert warnings(flow("claude-sonnet-4-5", default="claude_code")) == []
    assert warnings(flow("scripted", default="claude_code"))[0][0] == "C310"
    assert warnings(flow("scripted", backend="claw", default="claude_code")) == []


def test_claude_code_does_not_strip_the_anthropic_prefix() -> None:
    ((*_, message),) = warnings(flow("anthropic/claude-sonnet-4-5", backend="claude_code"))
    assert "write 'claude-sonnet-4-5'" in message


@pytest.mark.parametrize("model", ["{{vars.m}}", "${MODEL}", "${MODEL:-gpt-4o}", "x-{{vars.m}}"])
def test_models_known_only_at_run_time_are_not_checked(model: str) -> None:
    assert warnings(flow(model)) == []
    assert warnings(flow(model, backend="claude_code")) == []


def test_llm_routers_and_human_nodes_are_checked_against_the_default_backend() -> None:
    text = (
        'agent a:\n  model: "scripted"\n\nagent b:\n  model: "scripted"\n\n'
        'router r:\n  mode: llm\n  model: "gpt-4o"\n\n'
        'human h:\n  interaction: llm\n  model: "sonnet"\n\n'
        "workflow w:\n  entry: h\n  h -> r\n  r -> a\n  r -> b\n  a -> done\n  b -> done\n"
    )
    assert [(code, line) for code, line, *_ in warnings(text)] == [("C310", 9), ("C310", 13)]
