"""``backend: claude_code``: agent nodes run by the Claude Code CLI (via ``claude-agent-sdk``)."""

from iterion_nb.backends.claude_code.backend import ClaudeCodeBackend

__all__ = ["ClaudeCodeBackend"]
