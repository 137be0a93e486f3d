"""Hatch build hook: build the JupyterLab extension before the wheel is made.

``pip install .`` and ``pip install -e .`` run it (through hatchling), so the
wheel ships the prebuilt extension and nothing is built at install time.
It runs ``npm ci`` (the committed ``package-lock.json``) when ``node_modules``
is missing or older than the lock, then ``tsc`` and ``jupyter-builder build``
(``@jupyter/builder``, rspack) into ``labextension/dist``. A hash of the
sources is kept in ``labextension/.build-stamp``: an unchanged extension is
not built again (the second ``pip install -e .`` of the test command costs
nothing). Without Node.js and npm, an extension already built (an sdist
ships it) is used as it is; with none, the build fails and says why.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: What the build reads: a change to any of these builds the extension again.
INPUTS = ("package.json", "package-lock.json", "tsconfig.json", "src", "style")


def digest(folder: Path) -> str:
    """A hash of the extension's sources (file names and contents)."""
    sha = hashlib.sha256()
    for name in INPUTS:
        path = folder / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if file.suffix == ".tsbuildinfo" or not file.exists():
                continue
            sha.update(str(file.relative_to(folder)).encode() + b"\0" + file.read_bytes() + b"\0")
    return sha.hexdigest()


class LabExtensionBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Builds ``labextension/`` into ``labextension/dist`` unless it is up to date."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Called by hatchling before each build target (wheel, editable, sdist)."""
        folder = Path(self.root) / "labextension"
        dist, stamp = folder / "dist", folder / ".build-stamp"
        wanted = digest(folder)
        built = (dist / "package.json").is_file()
        if built and stamp.is_file() and stamp.read_text().strip() == wanted:
            return
        npm = shutil.which("npm")
        if npm is None:
            if built:
                self.app.display_warning(
                    "npm not found: using the JupyterLab extension built in labextension/dist"
                )
                return
            raise RuntimeError(
                "building iterion-nb needs Node.js (20 or later) and npm, for its JupyterLab"
                " extension (labextension/): install them, or install a released wheel"
            )
        self.app.display_info("building the JupyterLab extension (labextension/)")
        if self._stale_modules(folder):
            self._run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], folder)
        self._run([npm, "exec", "--no", "--", "tsc", "--sourceMap", "false"], folder)
        self._run([sys.executable, "-m", "jupyter_builder.main", "build", "."], folder)
        if not (dist / "package.json").is_file():
            raise RuntimeError("the JupyterLab extension build produced no labextension/dist")
        stamp.write_text(wanted + "\n")

    @staticmethod
    def _stale_modules(folder: Path) -> bool:
        installed = folder / "node_modules" / ".package-lock.json"
        lock = folder / "package-lock.json"
        return not installed.is_file() or installed.stat().st_mtime < lock.stat().st_mtime

    def _run(self, command: list[str], cwd: Path) -> None:
        env = dict(os.environ)
        # jupyter-builder, installed in the build environment, beside this interpreter
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[:3])} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
