"""art: a Plan-Execute-Synthesize agent orchestration engine.

One LLM call plans a DAG of tool steps, the engine runs independent steps at the
same time, and one LLM call writes the answer. Public names are imported on first
use, so `import art` stays fast (litellm alone takes seconds to import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # module-level API over the lazily built default instance
    "process": "art.api",
    "aprocess": "art.api",
    "plan": "art.api",
    "aplan": "art.api",
    "resume_execution": "art.api",
    "aresume_execution": "art.api",
    "submit": "art.api",
    "asubmit": "art.api",
    "check_for_suspended_state": "art.api",
    "chat": "art.api",
    "achat": "art.api",
    "chat_stream": "art.api",
    "create_art_instance": "art.api",
    "configure": "art.api",
    "ArtInstance": "art.instance",
    # configuration
    "ArtInstanceConfig": "art.config",
    "ExecutionConfig": "art.config",
    "BufferConfig": "art.config",
    "Persona": "art.config",
    "ProcessOptions": "art.config",
    "QueueConfig": "art.config",
    # queued runs
    "RunHandle": "art.queue.runs",
    # tools
    "IToolExecutor": "art.tooling",
    "ToolSchema": "art.tooling",
    "ToolExample": "art.tooling",
    "ToolResult": "art.tooling",
    "ExecutionContext": "art.tooling",
    "tool": "art.function_tools",
    "ToolRegistry": "art.registry",
    "safe_stringify": "art.serialization",
    # plans and responses
    "Plan": "art.plans",
    "Step": "art.plans",
    "AgentFinalResponse": "art.responses",
    "ConversationMessage": "art.responses",
    "ExecutionMetadata": "art.responses",
    "StepRecord": "art.responses",
    "DisplayOutput": "art.responses",
    "RunError": "art.responses",
    "TokenUsage": "art.usage",
    "SpanContext": "art.spans",
    "ChatResponse": "art.chat_client",
    "ChatStreamChunk": "art.chat_client",
    # events and callbacks
    "Event": "art.events",
    "EventContext": "art.events",
    "HookVeto": "art.events",
    "AgentCallbacks": "art.callbacks",
    # state
    "StorageAdapter": "art.state",
    "Suspension": "art.state",
    "RunRecord": "art.state",
    # errors
    "ArtError": "art.errors",
    "ConfigurationError": "art.errors",
    "ToolRegistrationError": "art.errors",
    "PlanError": "art.errors",
    "ModelError": "art.errors",
    "ThreadBusyError": "art.errors",
    "StorageError": "art.errors",
    "SuspensionError": "art.errors",
    "ResponseError": "art.errors",
    "ToolErrorCode": "art.errors",
    "ModelErrorCode": "art.errors",
    "RunErrorCode": "art.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'art' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from art.api import (
        achat,
        aplan,
        aprocess,
        aresume_execution,
        asubmit,
        chat,
        chat_stream,
        check_for_suspended_state,
        configure,
        create_art_instance,
        plan,
        process,
        resume_execution,
        submit,
    )
    from art.callbacks import AgentCallbacks
    from art.chat_client import ChatResponse, ChatStreamChunk
    from art.config import (
        ArtInstanceConfig,
        BufferConfig,
        ExecutionConfig,
        Persona,
        ProcessOptions,
        QueueConfig,
    )
    from art.errors import (
        ArtError,
        ConfigurationError,
        ModelError,
        ModelErrorCode,
        PlanError,
        ResponseError,
        RunErrorCode,
        StorageError,
        SuspensionError,
        ThreadBusyError,
        ToolErrorCode,
        ToolRegistrationError,
    )
    from art.events import Event, EventContext, HookVeto
    from art.function_tools import tool
    from art.instance import ArtInstance
    from art.plans import Plan, Step
    from art.queue.runs import RunHandle
    from art.registry import ToolRegistry
    from art.responses import (
        AgentFinalResponse,
        ConversationMessage,
        DisplayOutput,
        ExecutionMetadata,
        RunError,
        StepRecord,
    )
    from art.serialization import safe_stringify
    from art.spans import SpanContext
    from art.state import RunRecord, StorageAdapter, Suspension
    from art.tooling import ExecutionContext, IToolExecutor, ToolExample, ToolResult, ToolSchema
    from art.usage import TokenUsage
