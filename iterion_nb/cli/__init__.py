"""The ``iterion-nb`` command."""
