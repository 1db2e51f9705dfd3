"""art: a Plan-Execute-Synthesize agent orchestration engine.

One LLM call plans a DAG of tool steps, the engine runs independent steps at the
same time, and one LLM call writes the answer. Public names are imported on first
use, so `import art` stays fast (litellm alone takes seconds to import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from art.core.version import __version__ as __version__

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
    # evaluation over a dataset of questions
    "evaluate": "art.evaluation.run",
    "aevaluate": "art.evaluation.run",
    "load_dataset": "art.evaluation.dataset",
    "EvalReport": "art.evaluation.report",
    # tools
    "IToolExecutor": "art.tooling.contract",
    "ToolSchema": "art.tooling.contract",
    "ToolExample": "art.tooling.contract",
    "ToolResult": "art.tooling.contract",
    "ExecutionContext": "art.tooling.contract",
    "tool": "art.tooling.functions",
    "ToolRegistry": "art.tooling.registry",
    "safe_stringify": "art.core.serialization",
    # plans and responses
    "Plan": "art.planning.plans",
    "Step": "art.planning.plans",
    "AgentFinalResponse": "art.responses",
    "ConversationMessage": "art.responses",
    "ExecutionMetadata": "art.responses",
    "StepRecord": "art.responses",
    "DisplayOutput": "art.responses",
    "RunError": "art.responses",
    "TokenUsage": "art.core.usage",
    "SpanContext": "art.core.spans",
    "ChatResponse": "art.llm.chat",
    "ChatStreamChunk": "art.llm.chat",
    # events and callbacks
    "Event": "art.observe.events",
    "EventContext": "art.observe.events",
    "HookVeto": "art.observe.events",
    "AgentCallbacks": "art.observe.callbacks",
    # state
    "StorageAdapter": "art.storage.contract",
    "Suspension": "art.storage.contract",
    "RunRecord": "art.storage.contract",
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
    "ForkError": "art.errors",
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
    # `name as name`: re-exported for type checkers (mypy --strict reads no dynamic __all__)
    from art.api import achat as achat
    from art.api import aplan as aplan
    from art.api import aprocess as aprocess
    from art.api import aresume_execution as aresume_execution
    from art.api import asubmit as asubmit
    from art.api import chat as chat
    from art.api import chat_stream as chat_stream
    from art.api import check_for_suspended_state as check_for_suspended_state
    from art.api import configure as configure
    from art.api import create_art_instance as create_art_instance
    from art.api import plan as plan
    from art.api import process as process
    from art.api import resume_execution as resume_execution
    from art.api import submit as submit
    from art.config import ArtInstanceConfig as ArtInstanceConfig
    from art.config import BufferConfig as BufferConfig
    from art.config import ExecutionConfig as ExecutionConfig
    from art.config import Persona as Persona
    from art.config import ProcessOptions as ProcessOptions
    from art.config import QueueConfig as QueueConfig
    from art.core.serialization import safe_stringify as safe_stringify
    from art.core.spans import SpanContext as SpanContext
    from art.core.usage import TokenUsage as TokenUsage
    from art.errors import ArtError as ArtError
    from art.errors import ConfigurationError as ConfigurationError
    from art.errors import ForkError as ForkError
    from art.errors import ModelError as ModelError
    from art.errors import ModelErrorCode as ModelErrorCode
    from art.errors import PlanError as PlanError
    from art.errors import ResponseError as ResponseError
    from art.errors import RunErrorCode as RunErrorCode
    from art.errors import StorageError as StorageError
    from art.errors import SuspensionError as SuspensionError
    from art.errors import ThreadBusyError as ThreadBusyError
    from art.errors import ToolErrorCode as ToolErrorCode
    from art.errors import ToolRegistrationError as ToolRegistrationError
    from art.evaluation.dataset import load_dataset as load_dataset
    from art.evaluation.report import EvalReport as EvalReport
    from art.evaluation.run import aevaluate as aevaluate
    from art.evaluation.run import evaluate as evaluate
    from art.instance import ArtInstance as ArtInstance
    from art.llm.chat import ChatResponse as ChatResponse
    from art.llm.chat import ChatStreamChunk as ChatStreamChunk
    from art.observe.callbacks import AgentCallbacks as AgentCallbacks
    from art.observe.events import Event as Event
    from art.observe.events import EventContext as EventContext
    from art.observe.events import HookVeto as HookVeto
    from art.planning.plans import Plan as Plan
    from art.planning.plans import Step as Step
    from art.queue.runs import RunHandle as RunHandle
    from art.responses import AgentFinalResponse as AgentFinalResponse
    from art.responses import ConversationMessage as ConversationMessage
    from art.responses import DisplayOutput as DisplayOutput
    from art.responses import ExecutionMetadata as ExecutionMetadata
    from art.responses import RunError as RunError
    from art.responses import StepRecord as StepRecord
    from art.storage.contract import RunRecord as RunRecord
    from art.storage.contract import StorageAdapter as StorageAdapter
    from art.storage.contract import Suspension as Suspension
    from art.tooling.contract import ExecutionContext as ExecutionContext
    from art.tooling.contract import IToolExecutor as IToolExecutor
    from art.tooling.contract import ToolExample as ToolExample
    from art.tooling.contract import ToolResult as ToolResult
    from art.tooling.contract import ToolSchema as ToolSchema
    from art.tooling.functions import tool as tool
    from art.tooling.registry import ToolRegistry as ToolRegistry
