"""Build a RunContext for tests: the ids, config, counters and event bus of one run."""

from __future__ import annotations

import uuid
from typing import Any

from art.config import ExecutionConfig
from art.core.spans import SpanContext
from art.engine.context import RunContext
from art.observe.events import EventBus

__all__ = ["make_run_context"]

_RUN_FIELDS = frozenset(RunContext.__dataclass_fields__)


def make_run_context(**overrides: Any) -> RunContext:
    """A RunContext with a fresh EventBus and default ExecutionConfig.

    Keyword arguments set RunContext fields (`thread_id`, `events`, `config`, ...);
    `config` may be a dict, and ExecutionConfig fields may be given directly
    (`make_run_context(max_plan_attempts=2)`).
    """
    config_fields = {k: overrides.pop(k) for k in list(overrides) if k not in _RUN_FIELDS}
    config = overrides.pop("config", None)
    if config is None:
        config = ExecutionConfig()
    elif isinstance(config, dict):
        config = ExecutionConfig.model_validate(config)
    if config_fields:
        config = config.merged(config_fields)
    values: dict[str, Any] = {
        "thread_id": "test-thread",
        "run_id": uuid.uuid4().hex,
        "span": SpanContext.root(),
        "events": EventBus(),
    }
    values.update(overrides)
    return RunContext(config=config, **values)
