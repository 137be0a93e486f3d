"""``%iterion resume RUN --workflow NAME [--force]`` through a real IPython shell.

NAME is a workflow an earlier ``%%iterion`` cell of the kernel defined: the
run resumes on its source, refused when it changed unless ``--force`` (and
always when it is another workflow's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from iterion_nb.magics import LiveRun
from tests.jupyter.test_magics import ok, run

FAILING = 'tool t:\n  command: "exit 3"\n\nworkflow w:\n  entry: t\n  t -> done\n'
FIXED = FAILING.replace("exit 3", "echo fixed")
OTHER = FIXED.replace("workflow w:", "workflow other:")


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """The magics, a run of FAILING (``r``) that failed resumably, and FIXED bound to ``fixed``."""
    monkeypatch.chdir(tmp_path)  # where the tool runs
    ip = InteractiveShell.instance()
    ip.user_ns.update({"store": str(tmp_path / "store")})
    run(ip, "%load_ext iterion_nb")
    ip.user_ns["r"] = ok(ip, "%%iterion --run --store $store\n" + FAILING)
    assert ok(ip, "%iterion wait {r.id}") == "failed_resumable"
    ok(ip, "%%iterion fixed\n" + FIXED)
    yield ip
    run(ip, "%unload_ext iterion_nb")


def as_stored(shell: InteractiveShell) -> Any:
    """What a refused resume must leave as it was: status, checkpoint, source, events."""
    return ok(
        shell,
        "_rec = await r.refresh()\n"
        "(_rec.status, _rec.checkpoint, _rec.source, _rec.updated_at,"
        " [e.type for e in await r.events()])",
    )


def refused(shell: InteractiveShell, line: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line UsageError the magic line gives."""
    capsys.readouterr()
    result = run(shell, line)
    err = capsys.readouterr().err
    assert not result.success
    assert err.startswith("UsageError: %iterion resume") and err.count("\n") == 1, err
    return err


def test_the_fixed_workflow_resumes_with_force(shell: InteractiveShell) -> None:
    resumed = ok(shell, "%iterion resume {r.id} --workflow fixed --force")
    assert isinstance(resumed, LiveRun)
    assert ok(shell, "%iterion wait {r.id}") == "finished"
    assert ok(shell, "r.outputs")["t"]["stdout"] == "fixed\n"
    assert ok(shell, "(await r.refresh()).source") == FIXED


def test_a_changed_workflow_without_force_is_refused_and_the_run_untouched(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    before = as_stored(shell)
    assert before[0] == "failed_resumable" and before[1] is not None
    run_id = shell.user_ns["r"].id
    err = refused(shell, "%iterion resume {r.id} --workflow fixed", capsys)
    assert err.startswith(
        f"UsageError: %iterion resume: the workflow of run '{run_id}' changed since it started;"
        f" add --force (%iterion resume {run_id} --workflow fixed --force)"
    )
    assert "recorded workflow 'w'" in err and "workflow 'fixed' of this kernel has sha256" in err
    assert as_stored(shell) == before


def test_force_alone_is_refused(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    before = as_stored(shell)
    err = refused(shell, "%iterion resume {r.id} --force", capsys)
    assert err == (
        "UsageError: %iterion resume: --force needs --workflow NAME: without it the run resumes"
        " its recorded source (give the edited workflow, defined in a `%%iterion NAME` cell,"
        " with --workflow NAME --force)\n"
    )
    assert as_stored(shell) == before


def test_another_workflow_or_an_unknown_name_is_refused(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    before = as_stored(shell)
    ok(shell, "%%iterion other\n" + OTHER)
    err = refused(shell, "%iterion resume {r.id} --workflow other --force", capsys)
    assert "is a run of workflow 'w', not 'other'" in err
    err = refused(shell, "%iterion resume {r.id} --workflow nothing --force", capsys)
    assert "no workflow is named 'nothing' in this kernel" in err
    assert as_stored(shell) == before
