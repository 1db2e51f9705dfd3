"""The code base passes the pinned ruff (constraints.txt): lint rules and formatting,
Python code blocks in the docs included."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("ruff")
    command = [executable] if executable else [sys.executable, "-m", "ruff"]
    return subprocess.run(
        [*command, *args, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize("args", [("check", "."), ("format", "--check", ".")])
def test_ruff_finds_nothing(args: tuple[str, ...]) -> None:
    done = ruff(*args)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
