"""The built wheel holds one top-level import name, `art`, with tools and adapters inside."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_has_one_top_level_name_with_tools_and_adapters_inside(tmp_path):
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
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
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
    ):
        assert module in names
    assert not any(name.startswith(("tools/", "adapters/", "tests/")) for name in names)
