"""``%%iterion`` and ``%iterion``: thin magics that delegate to the session."""
