"""The catalogue of diagnostic codes.

``C…`` codes follow iterion's numbering so users of one recognise the other.
``S…`` codes are our own syntax problems, ``C05x`` our own checks of
declarations and properties, which iterion reports under other names, and
``C3xx`` (a band iterion does not use) our limits on hostile input and our
checks against the backends.
``docs/diagnostics.md`` documents every entry; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SeverityName = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """A code's default severity and one-line title."""

    severity: SeverityName
    title: str


_E: SeverityName = "error"
_W: SeverityName = "warning"

CODES: dict[str, CodeInfo] = {
    # syntax
    "S001": CodeInfo(_E, "syntax error"),
    "S002": CodeInfo(_E, "tab used for indentation"),
    "S003": CodeInfo(_E, "unterminated string"),
    "S004": CodeInfo(_E, "unterminated template"),
    "S005": CodeInfo(_E, "inconsistent dedent"),
    "S006": CodeInfo(_E, "source is not UTF-8 text"),
    "S007": CodeInfo(_E, "source too large"),
    "S008": CodeInfo(_E, "unexpected character"),
    "S009": CodeInfo(_E, "a dsl: version this build does not read"),
    # iterion's numbering
    "C001": CodeInfo(_E, "unknown node in an edge"),
    "C002": CodeInfo(_E, "unknown schema"),
    "C003": CodeInfo(_E, "unknown prompt"),
    "C004": CodeInfo(_E, "bad template reference"),
    "C005": CodeInfo(_E, "loop declared twice with different bounds"),
    "C006": CodeInfo(_E, "no workflow"),
    "C007": CodeInfo(_E, "more than one workflow"),
    "C008": CodeInfo(_E, "missing or unknown entry"),
    "C009": CodeInfo(_E, "session inherit/fork at a convergence point"),
    "C010": CodeInfo(_E, "several unconditional edges from a non-router"),
    "C011": CodeInfo(_E, "duplicate condition"),
    "C012": CodeInfo(_E, "conditions not exhaustive and no fallback"),
    "C013": CodeInfo(_E, "condition field is not bool"),
    "C014": CodeInfo(_E, "condition field missing"),
    "C016": CodeInfo(_W, "unreachable node"),
    "C017": CodeInfo(_E, ".history outside a loop"),
    "C019": CodeInfo(_E, "undeclared cycle"),
    "C020": CodeInfo(_E, "round_robin router with fewer than 2 edges"),
    "C021": CodeInfo(_E, "llm router with fewer than 2 edges"),
    "C022": CodeInfo(_E, "when on an llm router edge"),
    "C023": CodeInfo(_E, "llm-only property on another router"),
    "C026": CodeInfo(_E, "loop bound below 1"),
    "C027": CodeInfo(_E, "bad reasoning effort"),
    "C029": CodeInfo(_E, "outputs. of an undeclared node"),
    "C031": CodeInfo(_E, "field missing from output schema"),
    "C033": CodeInfo(_E, "undeclared variable"),
    "C034": CodeInfo(_E, "field missing from input schema"),
    "C035": CodeInfo(_E, "unknown artifact"),
    "C039": CodeInfo(_E, "compute without expressions"),
    "C040": CodeInfo(_E, "expression does not parse"),
    "C041": CodeInfo(_E, "duplicate node name"),
    "C042": CodeInfo(_E, "node named done or fail"),
    "C046": CodeInfo(_E, "bad budget value"),
    # our declaration and property checks
    "C350": CodeInfo(_E, "unknown property"),
    "C351": CodeInfo(_E, "property given twice"),
    "C352": CodeInfo(_E, "property value of the wrong kind"),
    "C353": CodeInfo(_E, "required property missing"),
    "C354": CodeInfo(_E, "value not among the allowed ones"),
    "C355": CodeInfo(_E, "bad duration"),
    "C356": CodeInfo(_E, "unknown type"),
    "C357": CodeInfo(_E, "default value does not match its type"),
    "C358": CodeInfo(_E, "name declared twice"),
    "C359": CodeInfo(_E, "bad environment reference"),
    "C360": CodeInfo(_E, "parallel branches meet at a node without await"),
    # events
    "C024": CodeInfo(_E, "MCP server declared twice"),
    "C025": CodeInfo(_E, "MCP server misconfigured, or unknown in mcp:"),
    "C050": CodeInfo(_E, "attachment declared twice"),
    "C051": CodeInfo(_E, "attachment named like a variable"),
    "C052": CodeInfo(_E, "accept_mime entry not type/subtype"),
    "C053": CodeInfo(_E, "unknown attachment"),
    "C054": CodeInfo(_E, "unknown attachment field"),
    "C048": CodeInfo(_E, "memory enabled without a scope"),
    "C070": CodeInfo(_E, "preset sets an unknown variable"),
    "C071": CodeInfo(_E, "preset value of the wrong type"),
    "C072": CodeInfo(_E, "preset declared twice"),
    "C080": CodeInfo(_W, "unknown capability"),
    "C081": CodeInfo(_E, "malformed capability"),
    "C083": CodeInfo(_W, "setting of an undeclared cursor"),
    "C084": CodeInfo(_E, "cursor value it does not accept"),
    "C085": CodeInfo(_E, "malformed cursor declaration"),
    "C086": CodeInfo(_E, "cursor declared twice"),
    "C196": CodeInfo(_E, "emit or wait without event"),
    "C197": CodeInfo(_E, "wait without timeout"),
    "C198": CodeInfo(_W, "event nobody emits, or nobody waits for"),
    # asynchronous interaction (ADR-081)
    "C240": CodeInfo(_E, "interaction: async on a human node"),
    "C241": CodeInfo(_E, "await_answers without a positive timeout"),
    "C242": CodeInfo(_W, "await_answers from: names a missing or non-async node"),
    "C361": CodeInfo(_E, "expires_in not positive, or on_expire without expires_in"),
    "C362": CodeInfo(_W, "with key not in the destination's input schema"),
    "C363": CodeInfo(_W, "upstream property ignored here (worktree, sandbox, memory, …)"),
    "C364": CodeInfo(_E, "malformed tool name, or an MCP tool of an unknown server"),
    "C365": CodeInfo(_W, "cycle no loop bounds, next to a loop (upstream accepts it)"),
    "C366": CodeInfo(
        _W,
        "interaction_model or interaction_prompt where no model answers,"
        " or min_answers where no person does",
    ),
    # limits on hostile input (ours)
    "C300": CodeInfo(_E, "nesting too deep"),
    "C301": CodeInfo(_E, "number too large"),
    "C302": CodeInfo(_E, "duration too long"),
    # backends (ours)
    "C310": CodeInfo(_W, "model the node's backend cannot serve"),
}
