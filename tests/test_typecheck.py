"""The art package passes mypy --strict, configured
in pyproject.toml, and every `type: ignore` in it names its error codes and says why."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("art",)
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[a-z, -]+\])?(?P<rest>.*)$")


# In the plain run too: mypy's cache (tests/typecheck.py) makes a second run take seconds.
def test_mypy_strict_finds_nothing():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "typecheck.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_the_type_check_is_strict_and_ignores_nothing_wholesale():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    blanket = {"ignore_errors", "ignore_missing_imports", "disable_error_code", "follow_imports"}
    assert not blanket & set(config)
    assert "overrides" not in config


def test_every_type_ignore_names_its_codes_and_says_why():
    unexplained = []
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines, 1):
                match = IGNORE.search(line)
                if match is None:
                    continue
                reason = match["rest"].strip().lstrip("#").strip()
                above = lines[number - 2].strip() if number > 1 else ""
                if not match["codes"] or not (reason or above.startswith("#")):
                    unexplained.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert unexplained == []
