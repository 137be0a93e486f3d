"""``bash scripts/quickstart.sh`` opens the tour in JupyterLab, as root and as a user.

The script runs as it is (its install step is skipped when nothing changed);
the test only adds ``--no-browser`` and where to listen, and stops the server
once it serves the quickstart notebook. As root, JupyterLab refuses to start
unless given ``--allow-root``: the script passes it then. The unprivileged run
uses ``nobody``, allowed to read the checkout's venv (which may sit under
root's home) and nothing more.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .test_browser import free_port

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
#: Root runs the script itself and as an unprivileged user; anyone else, as themselves.
WHO = ["root", "a user"] if os.geteuid() == 0 else ["a user"]


def as_user(home: Path) -> list[str]:
    """The command prefix that drops root for ``nobody`` (when root runs the tests)."""
    if os.geteuid() != 0:
        return []
    os.chown(home, NOBODY, NOBODY)
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--"]  # fmt: skip


@pytest.mark.timeout(300)
@pytest.mark.parametrize("who", WHO)
def test_quickstart_opens_the_tour_in_jupyterlab(who: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    prefix = [] if who == "root" else as_user(home)
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "ITERION_NB_STORE": str(home / "store")}  # fmt: skip
    log = home / "lab.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [*prefix, "bash", str(ROOT / "scripts" / "quickstart.sh"), "--no-browser",
             f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
             "--ServerApp.port_retries=0", "--LabApp.news_url=",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 240
            while True:
                assert server.poll() is None, f"JupyterLab did not start:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"no JupyterLab in time:\n{log.read_text()}"
                try:
                    with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                        break
                except OSError:
                    time.sleep(0.2)
            page = f"{url}/lab/tree/notebooks/01_quickstart.ipynb?token={token}"
            with urllib.request.urlopen(page, timeout=30) as response:
                assert response.status == 200
            # the whole checkout is served (examples, docs), and the browser is sent to the tour
            contents = f"{url}/api/contents/examples?token={token}"
            with urllib.request.urlopen(contents, timeout=30) as response:
                assert response.status == 200
            (opener,) = (home / "runtime").glob("jpserver-file-to-run-*-open.html")
            assert f"{url}/lab/tree/notebooks/01_quickstart.ipynb" in opener.read_text()
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    text = log.read_text()
    assert "--allow-root" not in text, text  # JupyterLab never asked for it
    shutil.rmtree(home, ignore_errors=True)
