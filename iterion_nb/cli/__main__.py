"""``python -m iterion_nb.cli``."""

from __future__ import annotations

from iterion_nb.cli.entry import main

raise SystemExit(main())
