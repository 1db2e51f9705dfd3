"""The built wheel holds one top-level import name, `art`, with tools and adapters inside."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_has_one_top_level_name_with_tools_and_adapters_inside(tmp_path):
    # setuptools builds in the source tree (build/, *.egg-info): build a copy, not the checkout.
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "art", source / "art", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {"art"}
    for module in (
        "art/tools/calculator.py",
        "art/adapters/sqlite.py",
        "art/testing/plugin.py",
        "art/py.typed",
        "art/server/app.py",
        "art/server/static/index.html",
        "art/server/static/app.js",
        "art/server/static/inspector.css",
    ):
        assert module in names
    assert not any(name.startswith(("tools/", "adapters/", "tests/")) for name in names)
