"""Suite-wide settings. Area fixtures live beside their tests (tests/<area>/conftest.py)."""

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

# Hypothesis keeps its example database and caches outside the checkout (read when first used).
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "art-tests-hypothesis")
)

# litellm otherwise downloads its model price map at import and retries without network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Never let a test fall back to a real provider or the user's storage.
os.environ.pop("ART_MODEL", None)
os.environ.setdefault("ART_STORAGE", "memory://")


POSTGRES_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "postgres.sh"


def _postgres_binaries_present() -> bool:
    return any(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or bool(shutil.which("initdb"))


def _no_postgres(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL database for tests, one server for the whole session.

    It comes from `ART_TEST_POSTGRES_URL` if set; otherwise, when the server binaries are
    installed, the session starts its own with `.ci/postgres.sh` and stops it at the end.
    Without either, PostgreSQL tests skip, except under `CI`, where they fail.
    """
    url = os.environ.get("ART_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    if not _postgres_binaries_present():
        _no_postgres("no ART_TEST_POSTGRES_URL and no PostgreSQL binaries (.ci/postgres.sh)")
    started = subprocess.run(
        [str(POSTGRES_SCRIPT), "start"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "ART_PG_OWNER": str(os.getpid())},  # reaped if we die
    )
    if started.returncode != 0:
        _no_postgres(f".ci/postgres.sh start failed:\n{started.stderr}")
    exported = dict(
        line.removeprefix("export ").split("=", 1)
        for line in started.stdout.splitlines()
        if line.startswith("export ")
    )
    try:
        yield exported["ART_TEST_POSTGRES_URL"]
    finally:
        subprocess.run(
            [str(POSTGRES_SCRIPT), "stop", exported["ART_TEST_POSTGRES_DIR"]],
            capture_output=True,
            timeout=300,
        )


@pytest.fixture
def restore_logging():
    """Put the root logger and structlog back as they were (for tests that configure them)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (subprocesses, valgrind, benchmarks, examples)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the slow tests out of a plain run, so the edit-test loop stays short.

    `--slow` (the README's and CI's command), any `-m` expression, or a test named by its
    node id keeps them in.
    """
    named = any("::" in arg for arg in config.args)
    if config.getoption("--slow") or config.option.markexpr or named:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
