"""Run mypy --strict over the art package.

    python tests/typecheck.py

The cache lives outside the checkout, in the temporary directory."""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parent.parent


def package_sources() -> list[BuildSource]:
    """One source per module of the package, named as it imports."""
    sources: list[BuildSource] = []
    for path in sorted((ROOT / "art").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        sources.append(BuildSource(str(path.relative_to(ROOT)), ".".join(parts)))
    return sources


def cache_dir() -> str:
    """One cache per checkout, emptied when pyproject.toml changes (a cache written under
    other options or dependencies misleads mypy)."""
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"art-mypy-{checkout}"
    config = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp = cache / "pyproject.sha256"
    if not stamp.is_file() or stamp.read_text() != config:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        stamp.write_text(config)
    return str(cache)


def main() -> int:
    # the options come from [tool.mypy] in pyproject.toml; "art" only satisfies the parser
    _, options = process_options(["--config-file", str(ROOT / "pyproject.toml"), "art"])
    options.cache_dir = cache_dir()
    try:
        result = build.build(package_sources(), options)
    except CompileError as error:
        messages = error.messages
    else:
        messages = result.errors
    for message in messages:
        print(message)
    print(f"{len(messages)} mypy messages" if messages else "mypy --strict: no issues")
    return 1 if messages else 0


if __name__ == "__main__":
    sys.exit(main())
