"""Suite-wide settings. Area fixtures live beside their tests (tests/<area>/conftest.py)."""

import logging
import os

import pytest
import structlog

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
