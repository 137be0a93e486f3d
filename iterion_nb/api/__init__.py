"""The REST handlers, mounted by the store holder and by the Jupyter server extension."""
