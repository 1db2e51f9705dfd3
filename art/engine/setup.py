"""What one call of `process`, `stream` or `resume_execution` runs with: its tools, its
system context and its metadata, from the call's options, the stored run and the
instance, after the `run:before` hooks.

A `run:before` hook gets `{"query", "thread_id", "continued", "tools", "system_context",
"metadata"}` (`tools` as names) and may return the data with any of the last three
changed: `tools` as the `tools` option takes them (names, `"*"`, tools to add), the
other two as dicts. A hook that raises vetoes the run (code `VETOED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from art.errors import ConfigurationError
from art.observe.events import RunScope

if TYPE_CHECKING:
    from art.config import ProcessOptions
    from art.core.spans import SpanContext
    from art.observe.events import EventBus
    from art.storage.contract import RunRecord
    from art.tooling.registry import ToolRegistry

__all__ = ["RunSetup", "set_up_run"]


@dataclass(frozen=True, slots=True)
class RunSetup:
    """The tools, system context and metadata of one call's run, and its root span
    (`run:before` is the first event of the run tree)."""

    registry: ToolRegistry
    system_context: dict[str, Any]
    metadata: dict[str, Any]
    span: SpanContext

    @property
    def display_tools(self) -> frozenset[str]:
        return frozenset(
            tool.schema.name for tool in self.registry if tool.schema.mode == "display"
        )


async def set_up_run(
    tools: ToolRegistry,
    record: RunRecord,
    options: ProcessOptions,
    events: EventBus,
    *,
    continued: bool,
    span: SpanContext,
) -> RunSetup:
    """The run's setup: `options` over what `record` stored, over the instance's `tools`;
    then the `run:before` hooks (only hooks see that event: a stream's first event is
    `session:start`). Raises HookVeto when a hook vetoes the run, and ConfigurationError
    for an unknown tool or a hook's edit of the wrong type."""
    registry = tools if options.tools is None else tools.selected(options.tools)
    system_context = _given(options.system_context, record.system_context, "system_context")
    metadata = _given(options.metadata, record.metadata, "metadata")
    if events.hooked("run:before"):
        data = await events.emit(
            "run:before",
            {
                "query": record.query,
                "thread_id": record.thread_id,
                "continued": continued,
                "tools": registry.names(),
                "system_context": dict(system_context),
                "metadata": dict(metadata),
            },
            thread_id=record.thread_id,
            run_id=record.run_id,
            span=span,
            scope=RunScope(
                session_id=record.session_id or options.session_id,
                message_id=record.message_id,
                metadata=metadata,
            ),
            hooks_only=True,
        )
        edited = data.get("tools")
        if isinstance(edited, str | bytes) or not isinstance(edited, list | tuple | None):
            raise ConfigurationError(f"tools must be a list, got {type(edited).__name__}")
        if edited is not None and list(edited) != registry.names():
            registry = registry.combined(tools).selected(edited)
        system_context = _given(data.get("system_context"), system_context, "system_context")
        metadata = _given(data.get("metadata"), metadata, "metadata")
    return RunSetup(registry=registry, system_context=system_context, metadata=metadata, span=span)


def _given(value: Any, default: dict[str, Any], name: str) -> dict[str, Any]:
    if value is None:
        return default
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name} must be a dict, got {type(value).__name__}")
    return dict(value)
