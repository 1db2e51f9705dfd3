"""`art run` at its doors: a `--tools` module that exits at import, and thread ids that no
storage can keep as given."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from art.cli.app import EXIT_OK, EXIT_USAGE, app

pytestmark = pytest.mark.usefixtures("restore_logging")
ENV = {"COLUMNS": "160", "NO_COLOR": "1", "ART_DEBUG": ""}


def test_a_tools_module_that_exits_at_import_is_an_error_not_a_silent_success(
    tmp_path, scripted_model
) -> None:
    model = scripted_model(planning={"steps": []}, synthesis="answered")
    quitter = tmp_path / "quitter.py"
    quitter.write_text("import sys\nsys.exit(0)\n")
    args = ["run", "q", "--model", model.model, "--storage", "memory://"]

    result = CliRunner().invoke(app, [*args, "--tools", f"{quitter}:TOOLS"], env=ENV)

    assert result.exit_code == EXIT_USAGE, result.output
    assert "called sys.exit(0)" in result.output
    assert "answered" not in result.output


@pytest.mark.parametrize("thread_id", ["t\x00x", "t\udc80"])
def test_art_run_refuses_a_thread_id_storage_cannot_keep(scripted_model, thread_id) -> None:
    model = scripted_model(planning={"steps": []}, synthesis="answered")
    args = ["run", "q", "--model", model.model, "--storage", "memory://", "-T", thread_id]

    result = CliRunner().invoke(app, args, env=ENV)

    assert result.exit_code != EXIT_OK
    assert "must not hold NUL or a lone surrogate" in result.output
