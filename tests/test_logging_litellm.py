"""litellm's loggers go through art's logging setup: each line once, in art's format."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest

from art.llm.provider import load_litellm
from art.logging import LITELLM_LOGGERS, configure_logging


@pytest.fixture
def litellm_handlers(restore_logging):
    """litellm's own handlers, put back after the test."""
    load_litellm()
    loggers = [logging.getLogger(name) for name in LITELLM_LOGGERS]
    saved = [list(logger.handlers) for logger in loggers]
    yield
    for logger, handlers in zip(loggers, saved, strict=True):
        logger.handlers[:] = handlers


def _put_back_litellms_handler() -> None:
    import litellm._logging as litellm_logging

    for name in LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        if litellm_logging.handler not in logger.handlers:
            logger.addHandler(litellm_logging.handler)


@pytest.mark.usefixtures("litellm_handlers")
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "console"])
def test_a_litellm_line_is_written_once_by_arts_handler(as_json, capsys):
    _put_back_litellms_handler()  # as litellm leaves it on import
    out = io.StringIO()
    configure_logging(json=as_json, level="DEBUG", stream=out)
    logging.getLogger("LiteLLM").warning("\nLiteLLM completion() model= gpt-x")
    logging.getLogger("LiteLLM Router").info("router line")

    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert len(lines) == 2, lines
    assert sum("completion() model= gpt-x" in line for line in lines) == 1
    if as_json:
        first = json.loads(lines[0])
        assert first["event"] == "LiteLLM completion() model= gpt-x"
        assert first["logger"] == "LiteLLM" and first["level"] == "warning"
    captured = capsys.readouterr()
    assert "gpt-x" not in captured.out and "router line" not in captured.out
    assert "gpt-x" not in captured.err  # litellm's own handler wrote nothing


@pytest.mark.usefixtures("litellm_handlers")
def test_litellm_imported_after_configure_logging_is_adopted_on_import():
    _put_back_litellms_handler()
    out = io.StringIO()
    configure_logging(json=True, stream=out)
    _put_back_litellms_handler()  # litellm imported now, after the configuration
    load_litellm.cache_clear()
    load_litellm()  # art's import of litellm adopts its loggers
    logging.getLogger("LiteLLM").warning("late line")
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["late line"]


@pytest.mark.usefixtures("litellm_handlers")
def test_without_arts_configuration_litellms_handler_stays():
    # private: the class marks the handler configure_logging installed; the test removes it
    from art.logging import _ArtHandler

    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not isinstance(h, _ArtHandler)]
    _put_back_litellms_handler()
    import litellm._logging as litellm_logging

    from art.logging import adopt_litellm_loggers

    adopt_litellm_loggers()
    assert litellm_logging.handler in logging.getLogger("LiteLLM").handlers


@pytest.mark.slow  # a fresh interpreter imports litellm
def test_the_lines_litellm_logs_while_art_imports_it_are_arts_too():
    script = (
        "from art.logging import configure_logging\n"
        "from art.llm.provider import load_litellm\n"
        "configure_logging(json=True, level='DEBUG')\n"
        "load_litellm()\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # litellm's own handler writes its DEBUG lines to stdout
    records = [json.loads(line) for line in done.stderr.splitlines()]  # every line JSON
    litellm_lines = [r["event"] for r in records if r.get("logger") == "LiteLLM"]
    assert litellm_lines  # litellm does log while importing at DEBUG
