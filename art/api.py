"""Module-level API (`art.process`, `art.aprocess`, ...) over a lazily built default instance.

The default instance is built on first use from the environment (`ART_MODEL`,
`ART_STORAGE`, default SQLite under the user data dir) with the built-in tools;
`configure(**fields)` rebuilds it (closing the old one). Construction is thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from art.core.json import JsonObject
from art.instance import ArtInstance, create_art_instance

if TYPE_CHECKING:
    from art.config import ArtInstanceConfig, ProcessOptions
    from art.engine.suspension import Decision, SuspendedState
    from art.llm.chat import ChatMessages, ChatResponse, ChatStreamChunk
    from art.planning.plans import Plan
    from art.queue.runs import RunHandle
    from art.responses import AgentFinalResponse
    from art.tooling.contract import IToolExecutor

__all__ = [
    "achat",
    "aplan",
    "aprocess",
    "aresume_execution",
    "asubmit",
    "chat",
    "chat_stream",
    "check_for_suspended_state",
    "configure",
    "create_art_instance",
    "default_instance",
    "plan",
    "process",
    "resume_execution",
    "submit",
]

_lock = threading.Lock()
_default: ArtInstance | None = None


def _builtin_tools() -> list[IToolExecutor]:
    try:
        from art.tools import builtin_tools
    except ImportError:
        return []
    return list(builtin_tools())


def _build(config: ArtInstanceConfig | None, fields: Mapping[str, object]) -> ArtInstance:
    fields = dict(fields)
    if config is None and "tools" not in fields:
        fields["tools"] = _builtin_tools()
    return create_art_instance(config, **fields)


def default_instance() -> ArtInstance:
    """The instance the module-level functions use, built on first call."""
    global _default
    instance = _default
    if instance is None:
        with _lock:
            if _default is None:
                _default = _build(None, {})
            instance = _default
    return instance


def configure(config: ArtInstanceConfig | None = None, **fields: object) -> ArtInstance:
    """(Re)build the default instance from `config` and/or fields; the old one is closed.

    Without `tools`, the default instance gets the built-in tools.
    """
    global _default
    instance = _build(config, fields)  # a configuration mistake leaves the old one in place
    with _lock:
        old, _default = _default, instance
    if old is not None:
        old.close()
    return instance


def _reset_default_instance() -> None:
    """Close and forget the default instance (tests; the next call builds a new one)."""
    global _default
    with _lock:
        old, _default = _default, None
    if old is not None:
        old.close()


def process(
    query: str, thread_id: str, options: ProcessOptions | Mapping[str, object] | None = None
) -> AgentFinalResponse:
    """Plan, execute and synthesize `query` on `thread_id` (sync; fine in a notebook)."""
    return default_instance().process(query, thread_id, options)


async def aprocess(
    query: str, thread_id: str, options: ProcessOptions | Mapping[str, object] | None = None
) -> AgentFinalResponse:
    """Async `process`."""
    return await default_instance().aprocess(query, thread_id, options)


def submit(
    query: str, thread_id: str, options: ProcessOptions | Mapping[str, object] | None = None
) -> RunHandle:
    """Queue `query` on `thread_id`; returns the run's handle at once (see docs/deployment.md)."""
    return default_instance().submit(query, thread_id, options)


async def asubmit(
    query: str, thread_id: str, options: ProcessOptions | Mapping[str, object] | None = None
) -> RunHandle:
    """Async `submit`."""
    return await default_instance().asubmit(query, thread_id, options)


def plan(query: str, thread_id: str | None = None) -> Plan:
    """The plan for `query`; runs nothing."""
    return default_instance().plan(query, thread_id)


async def aplan(query: str, thread_id: str | None = None) -> Plan:
    """Async `plan`."""
    return await default_instance().aplan(query, thread_id)


def resume_execution(
    thread_id: str,
    suspension_id: str,
    decision: Decision | Mapping[str, object] | bool,
    options: ProcessOptions | Mapping[str, object] | None = None,
) -> AgentFinalResponse:
    """Decide a suspended step; the run finishes once all its suspensions are decided."""
    return default_instance().resume_execution(thread_id, suspension_id, decision, options)


async def aresume_execution(
    thread_id: str,
    suspension_id: str,
    decision: Decision | Mapping[str, object] | bool,
    options: ProcessOptions | Mapping[str, object] | None = None,
) -> AgentFinalResponse:
    """Async `resume_execution`."""
    return await default_instance().aresume_execution(thread_id, suspension_id, decision, options)


def check_for_suspended_state(thread_id: str) -> SuspendedState | None:
    """The thread's suspended run and its pending suspensions, or None."""
    return default_instance().check_for_suspended_state(thread_id)


def chat(
    messages: ChatMessages,
    *,
    model: str | None = None,
    system_prompt: str | None = None,
    llm_params: Mapping[str, object] | None = None,
    response_format: JsonObject | None = None,
) -> ChatResponse:
    """One LLM call outside any run, through the default instance (see `ArtInstance.achat`)."""
    return default_instance().chat(
        messages,
        model=model,
        system_prompt=system_prompt,
        llm_params=llm_params,
        response_format=response_format,
    )


async def achat(
    messages: ChatMessages,
    *,
    model: str | None = None,
    system_prompt: str | None = None,
    llm_params: Mapping[str, object] | None = None,
    response_format: JsonObject | None = None,
) -> ChatResponse:
    """Async `chat`."""
    return await default_instance().achat(
        messages,
        model=model,
        system_prompt=system_prompt,
        llm_params=llm_params,
        response_format=response_format,
    )


async def chat_stream(
    messages: ChatMessages,
    *,
    model: str | None = None,
    system_prompt: str | None = None,
    llm_params: Mapping[str, object] | None = None,
) -> AsyncIterator[ChatStreamChunk]:
    """`achat`, streamed (see `ArtInstance.chat_stream`)."""
    chunks = default_instance().chat_stream(
        messages, model=model, system_prompt=system_prompt, llm_params=llm_params
    )
    async for chunk in chunks:
        yield chunk
