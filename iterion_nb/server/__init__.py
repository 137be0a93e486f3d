"""Jupyter server extension entry points (the REST API behind Jupyter's auth)."""
