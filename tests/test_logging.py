"""configure_logging: console and JSON output, the ART_LOG_JSON switch, redaction everywhere."""

from __future__ import annotations

import io
import json
import logging
import warnings

import pytest
import structlog

from art.logging import configure_logging

KEY = "sk-proj-abcdefghijklmnop1234"


# Each test configures logging globally; put the defaults back afterwards.
pytestmark = pytest.mark.usefixtures("restore_logging")


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_output_has_level_logger_timestamp_and_fields():
    out = io.StringIO()
    configure_logging(json=True, stream=out)
    structlog.get_logger("art.test").info("plan created", steps=3, thread_id="t1")

    [record] = _json_lines(out.getvalue())
    assert record["event"] == "plan created"
    assert record["level"] == "info"
    assert record["logger"] == "art.test"
    assert record["steps"] == 3 and record["thread_id"] == "t1"
    assert record["timestamp"].endswith("Z")


def test_console_output_is_human_readable_not_json():
    out = io.StringIO()
    configure_logging(json=False, stream=out)
    structlog.get_logger("art.test").warning("step failed", step_id="s2")

    text = out.getvalue()
    assert "step failed" in text and "step_id=s2" in text and "warning" in text
    assert "[art.test]" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])
    assert "\x1b[" not in text  # a StringIO is not a terminal: no colour codes


def test_env_switch_selects_json(monkeypatch):
    out = io.StringIO()
    monkeypatch.setenv("ART_LOG_JSON", "1")
    configure_logging(stream=out)
    structlog.get_logger("art.test").info("hello")
    assert _json_lines(out.getvalue())[0]["event"] == "hello"

    out2 = io.StringIO()
    monkeypatch.setenv("ART_LOG_JSON", "0")
    configure_logging(stream=out2)
    structlog.get_logger("art.test").info("hello")
    assert not out2.getvalue().startswith("{")


def test_secrets_are_redacted_in_fields_messages_and_nested_values():
    out = io.StringIO()
    configure_logging(json=True, stream=out)
    log = structlog.get_logger("art.test")
    log.info(
        f"calling provider with {KEY}",
        api_key=KEY,
        llm_params={"api_base": "http://x", "apiKey": KEY, "headers": {"Authorization": "x"}},
        note=f"Authorization: Bearer {KEY}",
    )
    text = out.getvalue()
    assert KEY not in text
    [record] = _json_lines(text)
    assert record["api_key"] == "***"
    assert record["llm_params"]["apiKey"] == "***"
    assert record["llm_params"]["api_base"] == "http://x"  # not a secret: kept
    assert "sk-***" in record["event"]


def test_exception_text_is_redacted_too():
    out = io.StringIO()
    configure_logging(json=True, stream=out)
    try:
        raise RuntimeError(f"provider refused key {KEY}")
    except RuntimeError:
        structlog.get_logger("art.test").exception("call failed")
    text = out.getvalue()
    assert KEY not in text
    [record] = _json_lines(text)
    assert "RuntimeError: provider refused key sk-***" in record["exception"]


def test_stdlib_loggers_share_the_format_and_redaction():
    out = io.StringIO()
    configure_logging(json=True, stream=out)
    # (not "LiteLLM": once imported, litellm masks its own logger's records itself)
    logging.getLogger("some.http.client").warning("retrying with api_key=%s", KEY)
    [record] = _json_lines(out.getvalue())
    assert record["logger"] == "some.http.client"
    assert record["level"] == "warning"
    assert KEY not in record["event"] and "api_key=***" in record["event"]


def test_level_filters_and_reconfiguring_replaces_the_handler():
    out = io.StringIO()
    configure_logging(json=True, level="WARNING", stream=out)
    log = structlog.get_logger("art.test")
    log.info("quiet")
    log.warning("loud")
    assert [r["event"] for r in _json_lines(out.getvalue())] == ["loud"]

    second = io.StringIO()
    configure_logging(json=True, level="DEBUG", stream=second)
    log.debug("detail")
    assert [r["event"] for r in _json_lines(second.getvalue())] == ["detail"]
    assert "detail" not in out.getvalue()  # the first handler was removed, not duplicated


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging(level="LOUD", stream=io.StringIO())


def test_other_handlers_on_the_root_logger_never_see_a_key_from_structlog():
    seen: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    configure_logging(json=True, stream=io.StringIO())
    capture = Capture()
    logging.getLogger().addHandler(capture)
    structlog.get_logger("art.test").info("calling", api_key=KEY, note=f"key {KEY}")
    assert seen and all(KEY not in str(record.msg) for record in seen)


def test_configure_logging_renders_the_records_of_art_modules():
    from art.core.log import get_logger

    stream = io.StringIO()
    configure_logging(json=True, level="DEBUG", stream=stream)
    get_logger("art.probe").debug("visible", step_id="s1")
    (line,) = [entry for entry in _json_lines(stream.getvalue()) if entry["event"] == "visible"]
    assert line["step_id"] == "s1"
    assert line["level"] == "debug"


def test_default_stream_follows_sys_stderr(monkeypatch):
    configure_logging(json=True)
    swapped = io.StringIO()
    monkeypatch.setattr("sys.stderr", swapped)
    structlog.get_logger("art.test").warning("to the current stderr")
    assert _json_lines(swapped.getvalue())[0]["event"] == "to the current stderr"


def test_python_warnings_become_log_lines_in_the_same_format():
    out = io.StringIO()
    with warnings.catch_warnings():  # puts warnings.showwarning back afterwards
        warnings.simplefilter("always")
        configure_logging(json=True, stream=out)
        warnings.warn(f"an old parameter, key {KEY}", DeprecationWarning, stacklevel=1)

    [record] = _json_lines(out.getvalue())  # one JSON line, not Python's plain text
    assert record["logger"] == "py.warnings" and record["level"] == "warning"
    assert "DeprecationWarning: an old parameter" in record["event"]
    assert KEY not in record["event"]  # redacted like every other line
