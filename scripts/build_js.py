"""Build the widgets' front-end: js/*.js -> iterion_nb/static/*.js (no network, no npm).

The modules are plain ES modules with no imports. What they share lives in
``js/_common.js`` (a file whose name starts with ``_`` is a part, not a
module): building puts the parts at the top of each module, after a banner.
A test checks that iterion_nb/static is up to date.
Run: python scripts/build_js.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANNER = "// Built from js/{name} by scripts/build_js.py: edit the source, then rebuild.\n"


def built() -> dict[Path, str]:
    """What each shipped module should contain."""
    sources = sorted((ROOT / "js").glob("*.js"))
    parts = "".join(p.read_text() + "\n" for p in sources if p.name.startswith("_"))
    return {
        ROOT / "iterion_nb" / "static" / src.name: BANNER.format(name=src.name)
        + parts
        + src.read_text()
        for src in sources
        if not src.name.startswith("_")
    }


def main() -> int:
    """Write the shipped modules."""
    for path, text in built().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
