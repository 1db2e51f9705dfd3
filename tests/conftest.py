"""Suite-wide settings. Area fixtures live beside their tests (tests/<area>/conftest.py)."""

import logging
import os
import tempfile
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
