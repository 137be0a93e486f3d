"""Implementations of the Backend port: the in-process tool loop and Claude Code."""
