"""anywidget models; ``static/`` holds the bundle built from ``js/``."""
