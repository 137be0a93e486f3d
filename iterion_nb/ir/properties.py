"""Which properties each node kind accepts, and which are required."""

from __future__ import annotations

_LLM = (
    "model",
    "backend",
    "input",
    "output",
    "publish",
    "system",
    "user",
    "tools",
    "mcp",
    "tool_max_steps",
    "max_tokens",
    "reasoning_effort",
    "readonly",
    "session",
    "interaction",
    "interaction_prompt",
    "interaction_model",
    "tool_policy",
    "cursors",
    "memory",
    "await",
)

ALLOWED: dict[str, tuple[str, ...]] = {
    "agent": _LLM,
    "judge": _LLM,
    "router": (
        "mode",
        "model",
        "backend",
        "system",
        "user",
        "multi",
        "reasoning_effort",
        "await",
    ),
    "human": (
        "input",
        "output",
        "publish",
        "instructions",
        "interaction",
        "min_answers",
        "model",
        "system",
        "interaction_prompt",
        "interaction_model",
        "expires_in",
        "on_expire",
        "await",
    ),
    "tool": ("command", "script", "language", "input", "output", "publish", "timeout", "await"),
    "compute": ("expr", "input", "output", "publish", "await"),
    "emit": ("event", "with", "await"),
    "wait": ("event", "timeout", "output", "publish", "await"),
    "await_answers": ("from", "timeout", "await"),
    "fail": ("code", "message", "resumable"),
    "mcp_server": ("transport", "command", "args", "url"),
    "cursor": ("description", "values", "bands"),
}

#: Router properties that only make sense when ``mode: llm``.
LLM_ROUTER_ONLY = ("model", "backend", "system", "user", "multi", "reasoning_effort")

WORKFLOW_PROPERTIES = ("entry", "default_backend", "budget", "mcp", "interaction", "tool_policy")
BUDGET_PROPERTIES = (
    "max_parallel_branches",
    "max_duration",
    "max_cost_usd",
    "max_tokens",
    "max_iterations",
)
