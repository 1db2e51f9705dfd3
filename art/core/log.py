"""The loggers art's modules use: structlog in front, the standard library behind.

A library must not print unless the application asks it to. These loggers hand their
records to `logging.getLogger(name)`, so an unconfigured application sees only warnings
(Python's last-resort handler) and `art.logging.configure_logging` (or any stdlib setup)
decides everything else. Secrets are masked before a record leaves art.
"""

from __future__ import annotations

import logging

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger


def _redact(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    from art.core.redaction import redact

    return redact(event_dict)


_PROCESSORS: list[Processor] = [
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.stdlib.PositionalArgumentsFormatter(),
    _redact,
    structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
]


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger for `name` whose records go to the stdlib logger of that name."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    return logger
