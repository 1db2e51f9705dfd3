"""The public packages export exactly their public names (httpx's test_exported_members):
a name that appears or disappears from one of them is a change to the public API."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

EXPORTS = {
    "art": [
        "AgentCallbacks", "AgentFinalResponse", "ArtError", "ArtInstance", "ArtInstanceConfig",
        "BufferConfig", "ChatResponse", "ChatStreamChunk", "ConfigurationError",
        "ConversationMessage", "DisplayOutput", "EvalReport", "Event", "EventContext",
        "ExecutionConfig",
        "ExecutionContext", "ExecutionMetadata", "ForkError", "HookVeto", "IToolExecutor",
        "ModelError", "ModelErrorCode", "Persona", "Plan", "PlanError", "ProcessOptions",
        "QueueConfig",
        "ResponseError", "RunError", "RunErrorCode", "RunHandle", "RunRecord", "SpanContext",
        "Step", "StepRecord", "StorageAdapter", "StorageError", "Suspension", "SuspensionError",
        "ThreadBusyError", "TokenUsage", "ToolErrorCode", "ToolExample",
        "ToolRegistrationError", "ToolRegistry", "ToolResult", "ToolSchema", "achat", "aplan",
        "aevaluate", "aprocess", "aresume_execution", "asubmit", "chat", "chat_stream",
        "check_for_suspended_state", "configure", "create_art_instance", "evaluate",
        "load_dataset", "plan", "process",
        "resume_execution", "safe_stringify", "submit", "tool",
    ],
    "art.tools": [
        "AskHuman", "Calculator", "HttpGet", "ListFiles", "ReadFile", "Show", "builtin_tools",
    ],
    "art.testing": [
        "Answer", "FakeProvider", "HTTPStatus", "Hang", "Malformed", "PlanSnapshotExtension",
        "ProviderRequest", "Reply", "ScriptError", "ScriptedCall", "ScriptedModel",
        "make_run_context", "render_plan_text", "replies",
    ],
    "art.errors": [
        "RETRYABLE_MODEL_ERRORS", "ArtError", "ConfigurationError", "ForkError", "ModelError",
        "ModelErrorCode", "PlanError", "ResponseError", "RunErrorCode", "StorageError",
        "SuspensionError", "ThreadBusyError", "ToolErrorCode", "ToolRegistrationError",
    ],
    "art.server": ["Principal", "ServerSettings", "create_app", "serve", "serve_in_thread"],
    "art.queue": [
        "Attempt", "QueueConfig", "QueueStats", "QueuedRun", "RunHandle", "RunQueue",
        "RunStatus", "Schedule", "WorkerInfo", "run_worker",
    ],
    "art.adapters.mcp": [
        "MCPClient", "MCPConfig", "MCPServerConfig", "MCPServerError", "MCPTool",
        "ServerStatus", "aserve", "create_mcp_server", "load_mcp_config", "serve",
        "streamable_http_app", "tool_names", "tool_result",
    ],
    "art.adapters.memory": ["MemoryStorage"],
    "art.adapters.sqlite": [
        "MIGRATIONS", "SCHEMA_VERSION", "SQLiteStorage", "connect", "storage_error",
    ],
    "art.adapters.postgres": [
        "DEFAULT_CONNECT_TIMEOUT_S", "MIGRATIONS", "SCHEMA_VERSION", "PostgresStorage",
    ],
    "art.adapters.local": [
        "DEMO_GGUF", "DEMO_MODEL", "INSTALL_COMMAND", "PORTABLE_CMAKE_ARGS", "PROVIDER",
        "LocalLLM", "available", "demo_model_path", "register", "resolve_model_path",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_a_public_module_exports_exactly_its_public_names(module):
    exported = importlib.import_module(module)
    assert sorted(exported.__all__) == sorted(EXPORTS[module])
    missing = [name for name in exported.__all__ if getattr(exported, name, None) is None]
    assert missing == []


@pytest.mark.parametrize("module", ["art.errors", "art.tools", "art.adapters.memory"])
def test_every_public_name_a_module_defines_is_exported(module):
    exported = importlib.import_module(module)
    defined = {
        name
        for name, value in vars(exported).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module
    }
    assert defined <= set(exported.__all__)


def test_the_adapters_package_exports_nothing_of_its_own():
    # Its modules are the public paths: art.adapters.memory, .sqlite, .postgres, .local, .mcp.
    adapters = importlib.import_module("art.adapters")
    own = [
        name
        for name, value in vars(adapters).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    ]
    assert own == []
