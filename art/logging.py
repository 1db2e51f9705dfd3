"""Logging through structlog: readable in a terminal, JSON for machines, secrets always redacted.

art's own modules log through `art.core.log.get_logger` (structlog in front of the stdlib logger
of the same name) and never configure anything: unconfigured, only warnings reach stderr.
The application decides by calling `configure_logging` once. Records from the standard
library's `logging` (litellm, httpx, ...) go through the same processors, so every line,
whoever wrote it, is rendered the same way and passes the redaction processor. litellm
installs a handler of its own on its loggers when it is imported; once art's logging is
configured that handler is taken off (when art imports litellm, as soon as litellm has
installed it), so each litellm line is written once, by art's.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = [
    "JSON_ENV",
    "adopt_litellm_loggers",
    "adopting_litellm_loggers",
    "configure_logging",
    "redact_processor",
]

JSON_ENV = "ART_LOG_JSON"
_TRUE = {"1", "true", "yes", "on"}


def redact_processor(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Mask API keys, tokens and passwords anywhere in the event dict (keys and free text)."""
    from art.core.redaction import redact

    return redact(event_dict)


def _strip_message(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """A standard-library record's message without the blank lines around it (litellm
    starts some with a newline)."""
    if isinstance(event := event_dict.get("event"), str):
        event_dict["event"] = event.strip()
    return event_dict


def _json_from_env() -> bool:
    return os.environ.get(JSON_ENV, "").strip().lower() in _TRUE


def _level_number(level: str | int) -> int:
    if isinstance(level, int):
        return level
    number = logging.getLevelNamesMapping().get(level.upper())
    if number is None:
        raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR")
    return number


class _ArtHandler(logging.StreamHandler[TextIO]):
    """Marks the handler configure_logging installed, so calling it again replaces it."""


class _StderrHandler(_ArtHandler):
    """Writes to whatever `sys.stderr` is at the time (test runners and CLIs swap it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:  # type: ignore[override]  # read at each write, never set
        return sys.stderr


def configure_logging(
    json: bool | None = None,
    level: str | int = "INFO",
    *,
    stream: TextIO | None = None,
) -> None:
    """Send art's logs (and the standard library's) to `stream` (default: `sys.stderr`,
    whatever it is when a line is written).

    `json=None` reads `ART_LOG_JSON` (1/true/yes): JSON lines when set, otherwise the
    human-readable console format (coloured when `stream` is a terminal and `NO_COLOR`
    is unset). Calling it again replaces the previous configuration.
    """
    as_json = _json_from_env() if json is None else json
    level_number = _level_number(level)

    # Runs for structlog and stdlib records alike, before rendering.
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Processor
    if as_json:
        renderer = structlog.processors.JSONRenderer()
    else:
        colors = _is_terminal(stream or sys.stderr) and "NO_COLOR" not in os.environ
        renderer = structlog.dev.ConsoleRenderer(
            colors=colors, exception_formatter=structlog.dev.plain_traceback
        )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _strip_message],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # Tracebacks become text before redaction, so an exception message that
            # quotes a key is masked too (and local variables are never rendered).
            structlog.processors.format_exc_info,
            redact_processor,
            renderer,
        ],
    )

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _ArtHandler)]:
        root.removeHandler(handler)
    handler = _ArtHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(level_number)
    # Python's warnings (a tool example art leaves out, a library's deprecation) become
    # records of the `py.warnings` logger, so they are rendered like every other line.
    logging.captureWarnings(True)

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            # Redacted here too, so other handlers on the root logger never see a key.
            redact_processor,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Module-level loggers created before this call must see the new configuration.
        cache_logger_on_first_use=False,
    )
    if "litellm._logging" in sys.modules:  # imported already; otherwise art adopts it later
        adopt_litellm_loggers()


#: The loggers litellm writes to (it attaches its own stream handler to each on import).
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def adopt_litellm_loggers() -> None:
    """Take litellm's own handlers off its loggers when `configure_logging` has run, so its
    records reach art's handler once (litellm's writes plain text, some of it to stdout).

    art calls this after importing litellm; without art's handler it does nothing."""
    if not any(isinstance(h, _ArtHandler) for h in logging.getLogger().handlers):
        return
    for name in LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if _is_litellms(h)]:
            logger.removeHandler(handler)
        logger.propagate = True


@contextlib.contextmanager
def adopting_litellm_loggers() -> Iterator[None]:
    """While in the block, an import of litellm has its loggers adopted the moment
    `litellm._logging` has run: the rest of litellm's import already logs (at DEBUG,
    to stdout), before any code after the import could take its handler off."""
    finder = _LitellmLoggingFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class _LitellmLoggingFinder(importlib.abc.MetaPathFinder):
    """Finds `litellm._logging` where Python would, with a loader that adopts it once run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "litellm._logging":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _AdoptingLoader(spec.loader)
        return spec


class _AdoptingLoader(importlib.abc.Loader):
    """Runs a module with its own loader, then adopts litellm's loggers."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        adopt_litellm_loggers()


def _is_litellms(handler: logging.Handler) -> bool:
    litellm_logging = sys.modules.get("litellm._logging")
    return type(handler).__module__.startswith("litellm") or handler is getattr(
        litellm_logging, "handler", None
    )


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
