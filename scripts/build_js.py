"""Build the widgets' front-end: js/*.js -> iterion_nb/static/*.js (no network, no npm).

The modules are plain ES modules with no imports, so building is copying
with a banner; a test checks that iterion_nb/static is up to date.
Run: python scripts/build_js.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANNER = "// Built from js/{name} by scripts/build_js.py: edit the source, then rebuild.\n"


def built() -> dict[Path, str]:
    """What each shipped module should contain."""
    return {
        ROOT / "iterion_nb" / "static" / src.name: BANNER.format(name=src.name) + src.read_text()
        for src in sorted((ROOT / "js").glob("*.js"))
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
