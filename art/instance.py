"""ArtInstance: wires the config, LLM, tools, storage and events into plan → execute → synthesize.

Every path is written once, async (`aprocess`, `aresume_execution`, ...); the sync
methods are thin bridges through a private event loop (`art._sync.Portal`), so they
also work inside a running loop (a notebook).

One run per thread at a time: a run holds the thread's storage lease, and a second
caller gets a response with error code THREAD_BUSY. A run interrupted at any point is
continued by the next `process` with the same query (finished steps are reused, steps
that were running run again); a different query marks it abandoned and starts anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError

from art._log import get_logger
from art._models import ArtModel, trusted
from art._sync import Portal
from art.config import ArtInstanceConfig, ExecutionConfig, ProcessOptions
from art.context import RunContext, RunStats
from art.errors import (
    ConfigurationError,
    ModelError,
    PlanError,
    RunErrorCode,
    SuspensionError,
    ThreadBusyError,
)
from art.events import Event, EventBus, Hook, HookVeto, RunEvents, RunScope
from art.responses import (
    AgentFinalResponse,
    ConversationMessage,
    DisplayOutput,
    ExecutionMetadata,
    MessageMetadata,
    RunError,
    StepRecord,
)
from art.spans import SpanContext, new_trace_id
from art.state import RunRecord, StorageAdapter, StoredEvent, Suspension, ThreadSummary
from art.suspension import (
    Decision,
    SuspendedState,
    apply_decision,
    latest_by_step,
    parse_decision,
    suspended_message,
)

if TYPE_CHECKING:
    from art.adapters.mcp.client import MCPClient
    from art.execution import ExecutionOutcome, Executor
    from art.llm import LLMClient
    from art.plans import Plan
    from art.registry import ToolRegistry
    from art.run_setup import RunSetup

__all__ = ["ArtInstance", "ThreadState", "create_art_instance", "no_model_message"]

log = get_logger(__name__)

# The event log kept in storage: the run's lifecycle and each step's outcome. Per-token
# chunks, tool:before/after, tool:update start/end and in_progress statuses are left out
# (the step records hold the same facts), so a 1,000-step run stores ~1,000 events.
LOGGED_EVENTS = frozenset(
    {
        "session:start",
        "session:end",
        "plan:created",
        "plan:updated",
        "message:before",
        "message:after",
        "tool:loop:before",
        "tool:loop:after",
        "step:status",
        "tool:update",
        "suspended",
        "resumed",
        "error",
    }
)
# Events whose data may quote a provider's error text: redacted before storage.
_REDACTED_EVENTS = frozenset({"error", "message:after", "session:end"})
# Logged events are written to storage in batches of about this many (and at the end).
_EVENT_BATCH = 256
_STORED_TEXT_CHARS = 2000


def _logged(name: str, data: dict[str, Any]) -> bool:
    if name == "step:status":
        return data.get("status") != "in_progress"
    if name == "tool:update":
        return data.get("stage") in ("running", "streaming")  # a tool's own progress notes
    return True


def _stored_plan(data: dict[str, Any]) -> dict[str, Any]:
    plan = data.get("plan")
    if isinstance(plan, ArtModel):  # logged only (see _phases)
        # The wire form's keys and values, left as Python values: the event is dumped to
        # JSON right after, once, instead of converting each value here first (half the
        # cost of `to_wire`, ~1 ms a 1,000-step plan).
        return {**data, "plan": plan.model_dump(by_alias=True, exclude_none=True)}
    return data


def _stored_prompt(data: dict[str, Any]) -> dict[str, Any]:
    messages = data.get("messages") or []
    return {
        "phase": data.get("phase"),
        "model": data.get("model"),
        "messages": len(messages),
        "prompt_chars": sum(len(str(m.get("content") or "")) for m in messages),
    }


def _stored_reply(data: dict[str, Any]) -> dict[str, Any]:
    if isinstance(data.get("content"), str):
        return {**data, "content": _clip(data["content"])}
    return data


def _stored_end(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "response"}


def _stored_update(data: dict[str, Any]) -> dict[str, Any]:
    if "output" in data:
        from art.serialization import safe_stringify

        return {**data, "output": safe_stringify(data["output"], max_length=_STORED_TEXT_CHARS)}
    return data


# The compact form of an event's data kept in the event log, for the events whose
# stored data is not their data as emitted; every other event is stored as it is.
_STORED_DATA: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "plan:created": _stored_plan,
    "message:before": _stored_prompt,
    "message:after": _stored_reply,
    "session:end": _stored_end,
    "tool:update": _stored_update,
}


def stored_events(
    batch: Sequence[tuple[str, dict[str, Any], SpanContext | None, datetime]],
    thread_id: str,
    run_id: str,
    trace_id: str,
    redact: Callable[[Any], Any],
) -> list[StoredEvent]:
    """A run's logged events (what `RunEvents.drain` returns) as they are stored: compact,
    with secrets masked, each with its span's ids."""
    stored = []
    # Not validated: every value below is of its field's type (one event per step).
    for name, data, span, timestamp in batch:
        compact = _STORED_DATA.get(name)
        if compact is not None:
            data = compact(data)
        if name in _REDACTED_EVENTS:
            data = redact(data)
        stored.append(
            trusted(
                StoredEvent,
                {
                    "seq": None,
                    "thread_id": thread_id,
                    "run_id": run_id,
                    "name": name,
                    "data": data,
                    "trace_id": span.trace_id if span else trace_id,
                    "span_id": span.span_id if span else None,
                    "parent_span_id": span.parent_span_id if span else None,
                    "timestamp": timestamp,
                },
            )
        )
    return stored


def _clip(text: str) -> str:
    from art.serialization import truncate

    return truncate(text, _STORED_TEXT_CHARS)


_HISTORY_LIMIT = 20
#: Plain `def` tool calls that run at once across all the runs of one instance.
TOOL_THREADS = 256


def no_model_message() -> str:
    """What to do when no model is configured: the local extra, or ART_MODEL."""
    try:
        from art.adapters.local import PORTABLE_CMAKE_ARGS
    except Exception:  # the adapter imports litellm; the hint must not depend on it
        PORTABLE_CMAKE_ARGS = (
            "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
            "-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF"
        )
    return (
        "no model configured. Either install the in-process demo model (no API key, no "
        "server; the first build compiles llama.cpp):\n"
        f'    CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install -c constraints.txt -e ".[local]"\n'
        "or name a model with ART_MODEL (or create_art_instance(model=...)), e.g.\n"
        "    ART_MODEL=openai/gpt-4o-mini                 with OPENAI_API_KEY set\n"
        "    ART_MODEL=anthropic/claude-3-5-haiku-latest  with ANTHROPIC_API_KEY set\n"
        "    ART_MODEL=ollama/llama3.2                    with "
        'llm_params={"api_base": "http://localhost:11434"}'
    )


def _local_available() -> bool:
    try:
        from art.adapters.local import available
    except Exception:
        return False
    return available()


class ThreadState(ArtModel):
    """What `get_state` returns: a thread's runs, its active run, pending suspensions, history."""

    thread_id: str
    runs: list[RunRecord] = Field(default_factory=list)
    active_run: RunRecord | None = None
    suspensions: list[Suspension] = Field(default_factory=list)
    history: list[ConversationMessage] = Field(default_factory=list)


class ArtInstance:
    """An engine: model, tools, storage and events. Build it with `art.create_art_instance`."""

    def __init__(self, config: ArtInstanceConfig | None = None, **fields: Any) -> None:
        self.config = _build_config(config, fields)
        self.model = _resolve_model(self.config)
        self.planning_model = self.config.planning_model or self.model
        self.synthesis_model = self.config.synthesis_model or self.model
        from art.registry import ToolRegistry

        self.registry = ToolRegistry(self.config.tools)  # raises ToolRegistrationError
        from art.storage import open_storage

        self.storage: StorageAdapter = open_storage(self.config.resolved_storage())
        self._owns_storage = not isinstance(self.config.storage, StorageAdapter)
        self.events = EventBus()
        self._callbacks = None
        if self.config.callbacks is not None:
            from art.callbacks import CallbackAdapter

            self._callbacks = CallbackAdapter(self.config.callbacks)
            self._callbacks.attach(self.events)
        self._mcp: MCPClient | None = None
        self._owns_mcp = False
        self._mcp_lock = threading.Lock()  # runs on two loops may register tools at once
        if self.config.mcp_servers is not None:
            from art.adapters.mcp.client import MCPClient

            given = self.config.mcp_servers
            self._mcp = given if isinstance(given, MCPClient) else MCPClient(given)
            self._owns_mcp = self._mcp is not given
        self._opened = False
        self._providers_ready = False
        self._llm: LLMClient | None = None
        self._portal_lock = threading.Lock()
        self._portal: Portal | None = None
        self._active: dict[str, _Session] = {}
        self._closed = False
        # Plain `def` tools run on threads that outlive a run (see `_tool_threads`).
        self._tool_pool: ThreadPoolExecutor | None = None
        self._tool_pool_lock = threading.Lock()  # runs may start from several threads

    def __repr__(self) -> str:
        return (
            f"ArtInstance(model={self.model!r}, tools={self.registry.names()!r}, "
            f"storage={getattr(self.storage, 'url', '') or type(self.storage).__name__!r})"
        )

    # -- events -------------------------------------------------------------------------
    def on(self, event: str, fn: Hook) -> ArtInstance:
        """Call `fn(data, context)` on every `event` ('*' for all); returns the instance,
        so calls chain: `inst.on("tool:before", a).on("tool:after", b)`."""
        self.events.on(event, fn)
        return self

    def once(self, event: str, fn: Hook) -> ArtInstance:
        """Like `on`, for the next `event` only."""
        self.events.once(event, fn)
        return self

    def off(self, event: str | None = None, fn: Hook | None = None) -> ArtInstance:
        """Remove hooks: `fn` from `event`, every hook of `event` without `fn`, and every
        hook of every event without either (or with `event="*"`). The `callbacks` the
        instance was built with stay. Returns the instance."""
        self.events.off(event, fn)
        return self

    # -- running ------------------------------------------------------------------------
    async def aprocess(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AgentFinalResponse:
        """Plan, execute and synthesize `query` on `thread_id`; never raises for run-time
        failures (they come back as `status == "error"` with a code)."""
        return await self._process(query, thread_id, options, sinks=())

    def process(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AgentFinalResponse:
        """Sync `aprocess`; works inside a running event loop too."""
        return self._sync(self.aprocess(query, thread_id, options))

    async def stream(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AsyncIterator[Event]:
        """The events of one run as they happen (synthesis tokens included), ending after
        `session:end`, whose data holds the `response`."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        end = object()
        task = asyncio.ensure_future(
            self._process(query, thread_id, options, sinks=(queue.put_nowait,))
        )
        task.add_done_callback(lambda _: queue.put_nowait(end))
        try:
            while (item := await queue.get()) is not end:
                yield item
            task.result()  # a configuration mistake raises here, as it would from aprocess
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def aplan(self, query: str, thread_id: str | None = None) -> Plan:
        """The plan for `query` (with the thread's history when given); runs nothing.

        Raises PlanError or ModelError: there is no response to carry them."""
        self._check_open()
        query = _storable(query)
        thread_id = _storable(thread_id) if thread_id is not None else None
        await self._prepare()
        history = (
            await self.storage.get_history(thread_id, limit=_HISTORY_LIMIT) if thread_id else []
        )

        run = RunContext(
            thread_id=thread_id or f"plan-{uuid.uuid4().hex[:12]}",
            run_id=uuid.uuid4().hex,
            span=SpanContext.root(),
            config=self.config.execution_config,
            events=RunEvents(self.events),  # type: ignore[arg-type]
        )
        with self._secrets_in_use(ProcessOptions()):
            return await self._planner(self._llm_client(None)).plan(run, query, history)

    def plan(self, query: str, thread_id: str | None = None) -> Plan:
        """Sync `aplan`."""
        return self._sync(self.aplan(query, thread_id))

    async def aresume_execution(
        self,
        thread_id: str,
        suspension_id: str,
        decision: Decision | Mapping[str, Any] | bool,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AgentFinalResponse:
        """Decide a suspended step and, once every suspension of the run is decided, finish
        the run. Raises SuspensionError for an unknown or already-decided suspension."""
        self._check_open()
        thread_id = _storable(thread_id)
        parsed = parse_decision(decision)
        opts = _options(options)
        config = self._config_for(opts)
        await self._prepare()
        started = time.perf_counter()
        with self._secrets_in_use(opts):
            try:
                async with self.storage.lease(thread_id):
                    return await self._resume_locked(
                        thread_id, suspension_id, parsed, opts, config, started
                    )
            except ThreadBusyError as busy:
                return await self._busy(thread_id, busy, started, sinks=())

    def resume_execution(
        self,
        thread_id: str,
        suspension_id: str,
        decision: Decision | Mapping[str, Any] | bool,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AgentFinalResponse:
        """Sync `aresume_execution`."""
        return self._sync(self.aresume_execution(thread_id, suspension_id, decision, options))

    async def acheck_for_suspended_state(self, thread_id: str) -> SuspendedState | None:
        """The thread's suspended run and its pending suspensions, or None."""
        self._check_open()
        thread_id = _storable(thread_id)
        await self._prepare()
        run = await self.storage.get_active_run(thread_id)
        if run is None or run.status != "suspended":
            return None
        pending = await self._pending(thread_id, run.run_id)
        if not pending:
            return None
        return SuspendedState(
            thread_id=thread_id, run_id=run.run_id, query=run.query, suspensions=pending
        )

    def check_for_suspended_state(self, thread_id: str) -> SuspendedState | None:
        """Sync `acheck_for_suspended_state`."""
        return self._sync(self.acheck_for_suspended_state(thread_id))

    async def aget_state(self, thread_id: str) -> ThreadState:
        """The thread's runs (oldest first), active run, pending suspensions and history."""
        self._check_open()
        thread_id = _storable(thread_id)
        await self._prepare()
        runs = await self.storage.list_runs(thread_id)
        active = await self.storage.get_active_run(thread_id)
        pending = await self._pending(thread_id, active.run_id) if active is not None else []
        history = await self.storage.get_history(thread_id, limit=_HISTORY_LIMIT)
        return ThreadState(
            thread_id=thread_id, runs=runs, active_run=active, suspensions=pending, history=history
        )

    def get_state(self, thread_id: str) -> ThreadState:
        """Sync `aget_state`."""
        return self._sync(self.aget_state(thread_id))

    async def aload_history(
        self, thread_id: str, messages: Sequence[ConversationMessage | Mapping[str, Any]]
    ) -> None:
        """Make `messages` the thread's conversation history: the earlier turns its next
        runs plan and answer with (seed 004's `loadHistory`). Each is a
        `ConversationMessage` or a dict with `role` and `content`. Raises ThreadBusyError
        while a run holds the thread, ConfigurationError for a malformed message."""
        self._check_open()
        thread_id = _storable(thread_id)
        loaded = [_history_message(thread_id, n, m) for n, m in enumerate(messages, start=1)]
        await self._prepare()
        async with self.storage.lease(thread_id):
            await self.storage.replace_history(thread_id, loaded)

    def load_history(
        self, thread_id: str, messages: Sequence[ConversationMessage | Mapping[str, Any]]
    ) -> None:
        """Sync `aload_history`."""
        self._sync(self.aload_history(thread_id, messages))

    async def aclear_history(self, thread_id: str) -> None:
        """Forget the thread's conversation history (its runs and events stay): the next
        run plans as in a new conversation. Raises ThreadBusyError while a run holds it."""
        await self.aload_history(thread_id, [])

    def clear_history(self, thread_id: str) -> None:
        """Sync `aclear_history`."""
        self._sync(self.aclear_history(thread_id))

    async def adelete_thread(self, thread_id: str) -> bool:
        """Delete everything stored for the thread: runs, step records, suspensions,
        history and events. False when nothing was stored for it. Raises ThreadBusyError
        while a run holds the thread."""
        self._check_open()
        thread_id = _storable(thread_id)
        await self._prepare()
        async with self.storage.lease(thread_id):
            return await self.storage.delete_thread(thread_id)

    def delete_thread(self, thread_id: str) -> bool:
        """Sync `adelete_thread`."""
        return bool(self._sync(self.adelete_thread(thread_id)))

    async def alist_threads(self, *, limit: int = 100) -> list[ThreadSummary]:
        """Threads, most recently updated first."""
        self._check_open()
        await self._prepare()
        return await self.storage.list_threads(limit=limit)

    def list_threads(self, *, limit: int = 100) -> list[ThreadSummary]:
        """Sync `alist_threads`."""
        return self._sync(self.alist_threads(limit=limit))

    def cancel(self, thread_id: str, reason: str = "cancelled by the caller") -> bool:
        """Stop the run this instance is executing on `thread_id`; False when there is none.

        Running tools are cancelled (sync tools see `context.cancelled`); the response
        comes back with error code CANCELLED. Safe to call from any thread.
        """
        session = self._active.get(_storable(thread_id))
        if session is None:
            return False
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is session.loop:
            session.cancel(reason)
        else:
            # The run lives on another loop (the sync methods' private one, say).
            session.run.cancellation.cancel(reason)  # tools see it at once
            session.loop.call_soon_threadsafe(session.cancel, reason)
        return True

    # -- lifecycle ----------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the storage this instance opened. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._tool_pool_lock:
            pool, self._tool_pool = self._tool_pool, None
        if pool is not None:
            # Threads of tools that ignored cancellation finish on their own.
            pool.shutdown(wait=False, cancel_futures=True)
        if self._opened and self._owns_storage:
            await self.storage.close()
        if self._mcp is not None and self._owns_mcp:
            await self._mcp.aclose()  # stops the MCP servers it started
        if self._callbacks is not None:
            self._callbacks.detach()

    def close(self) -> None:
        """Sync `aclose`, then stop the private loop of the sync methods."""
        if not self._closed:
            self._sync(self.aclose(), allow_closed=True)
        with self._portal_lock:
            portal, self._portal = self._portal, None
        if portal is not None:
            portal.close()

    def __enter__(self) -> ArtInstance:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> ArtInstance:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
        with self._portal_lock:
            portal, self._portal = self._portal, None
        if portal is not None:
            await asyncio.to_thread(portal.close)

    # -- internals ----------------------------------------------------------------------
    def _tool_threads(self) -> ThreadPoolExecutor | None:
        """The threads every run of this instance calls its plain `def` tools on, or None
        when it has none (tools registered on `registry` later count too). Made on first
        use; a thread is started only when no idle one is left, so the threads of one run
        serve the next instead of being started again. `max_concurrency` still bounds
        each run; up to TOOL_THREADS calls run at once across the instance's runs, more
        wait for a thread."""
        if self._tool_pool is None and all(
            entry.is_async
            for entry in map(self.registry.entry, self.registry.names())
            if entry is not None
        ):
            return None
        with self._tool_pool_lock:
            if self._tool_pool is None:
                self._tool_pool = ThreadPoolExecutor(
                    max_workers=TOOL_THREADS, thread_name_prefix="art-tool"
                )
            return self._tool_pool

    def _sync(self, coro: Any, *, allow_closed: bool = False) -> Any:
        if self._closed and not allow_closed:
            coro.close()
            raise ConfigurationError("this ArtInstance is closed")
        with self._portal_lock:
            if self._portal is None:
                self._portal = Portal(name="art-instance")
            portal = self._portal
        return portal.run(coro)

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("this ArtInstance is closed")

    async def _prepare(self) -> None:
        if not self._opened:
            await self.storage.open()  # idempotent: a race opens it twice, harmlessly
            self._opened = True
        if not self._providers_ready:
            models = (self.model, self.planning_model, self.synthesis_model)
            if any(m.startswith("local/") for m in models):
                import art.adapters.local  # noqa: F401 - registers the provider with litellm
            self._providers_ready = True
        if self._mcp is not None:
            # Starts the MCP servers not running yet (one that fails is left out, with a
            # warning, and tried again by a later run) and registers their tools once.
            tools = await self._mcp.astart(strict=False)
            with self._mcp_lock:
                for tool in tools:
                    if self.registry.get(tool.name) is not tool:
                        self.registry.register(tool)

    def _llm_client(self, overrides: Mapping[str, Any] | None) -> LLMClient:
        """The LLM client for a call: the instance's, or one with per-call llm_params."""
        from art.llm import LLMClient

        if overrides:
            return LLMClient({**self.config.llm_params, **overrides})
        if self._llm is None:  # built once: it scans the environment for keys to mask
            self._llm = LLMClient(self.config.llm_params)
        return self._llm

    def _secrets_in_use(self, opts: ProcessOptions) -> contextlib.AbstractContextManager[Any]:
        """Make the keys of this call's llm_params known to everything that writes for it
        (logs, storage), with the environment's (see art.redaction)."""
        from art.redaction import secrets_from_params, secrets_in_use

        return secrets_in_use(
            secrets_from_params({**self.config.llm_params, **(opts.llm_params or {})})
        )

    def _planner(self, llm: LLMClient, tools: ToolRegistry | None = None) -> Any:
        from art.planning import Planner

        return Planner(
            llm, tools or self.registry, persona=self.config.persona, model=self.planning_model
        )

    def _config_for(self, opts: ProcessOptions) -> ExecutionConfig:
        try:
            return self.config.execution_config.merged(opts.execution_config)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid execution_config override: {exc}") from None

    async def _pending(self, thread_id: str, run_id: str) -> list[Suspension]:
        found = await self.storage.list_suspensions(thread_id, pending_only=True)
        return [s for s in found if s.run_id == run_id]

    async def _process(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, Any] | None,
        *,
        sinks: Sequence[Callable[[Event], None]],
    ) -> AgentFinalResponse:
        self._check_open()
        started = time.perf_counter()
        query, thread_id = _storable(query), _storable(thread_id)
        opts = _options(options)
        config = self._config_for(opts)
        await self._prepare()
        with self._secrets_in_use(opts):
            try:
                async with self.storage.lease(thread_id):
                    return await self._process_locked(
                        query, thread_id, opts, config, started, sinks
                    )
            except ThreadBusyError as busy:
                return await self._busy(thread_id, busy, started, sinks=sinks)

    async def _process_locked(
        self,
        query: str,
        thread_id: str,
        opts: ProcessOptions,
        config: ExecutionConfig,
        started: float,
        sinks: Sequence[Callable[[Event], None]],
    ) -> AgentFinalResponse:
        active = await self.storage.get_active_run(thread_id)
        # The same query again is an idempotent retry: continue where the run stopped.
        continued = active is not None and active.query == query
        record = active if continued and active is not None else None
        if record is None:
            record = RunRecord(
                run_id=uuid.uuid4().hex,
                thread_id=thread_id,
                trace_id=new_trace_id(),
                query=query,
                user_id=opts.user_id,
                session_id=opts.session_id,
            )
        try:
            setup = await self._set_up(record, opts, continued=continued)
        except HookVeto as veto:
            return await self._refused(thread_id, _call_error(veto), started, sinks=sinks)
        if active is not None and not continued:
            log.info("run abandoned", thread_id=thread_id, run_id=active.run_id)
            active.status = "abandoned"
            await self.storage.update_run(active)
        if not continued:
            await self.storage.create_run(record)
        session = _Session(self, record, config, opts, sinks, started, setup)
        return await session.drive({"continued": continued, "tools": setup.registry.names()})

    async def _resume_locked(
        self,
        thread_id: str,
        suspension_id: str,
        decision: Decision,
        opts: ProcessOptions,
        config: ExecutionConfig,
        started: float,
    ) -> AgentFinalResponse:
        every = await self.storage.list_suspensions(thread_id, pending_only=False)
        target = next((s for s in every if s.suspension_id == suspension_id), None)
        if target is None:
            raise SuspensionError(
                f"no suspension {suspension_id!r} on thread {thread_id!r}",
                code=RunErrorCode.SUSPENSION_NOT_FOUND,
            )
        if not target.pending:
            raise SuspensionError(
                f"suspension {suspension_id!r} was already decided",
                code=RunErrorCode.SUSPENSION_ALREADY_DECIDED,
                details=target.decision,
            )
        record = await self.storage.get_run(target.run_id)
        if record is None or record.status != "suspended":
            status = record.status if record is not None else "missing"
            raise SuspensionError(
                f"suspension {suspension_id!r} belongs to run {target.run_id!r}, which is "
                f"no longer suspended (status {status})",
                code=RunErrorCode.SUSPENSION_NOT_FOUND,
            )
        try:
            setup = await self._set_up(record, opts, continued=True)
        except HookVeto as veto:
            return await self._refused(thread_id, _call_error(veto), started, sinks=())
        # Atomic: of two concurrent decisions (other processes included) one succeeds.
        decided = await self.storage.decide_suspension(
            thread_id, suspension_id, _decision_data(decision)
        )
        session = _Session(self, record, config, opts, (), started, setup)
        return await session.drive(
            {
                "continued": True,
                "tools": setup.registry.names(),
                "suspension_id": suspension_id,
                "decision": decided.decision,
            },
            resumed=decided,
        )

    async def _set_up(
        self,
        record: RunRecord,
        opts: ProcessOptions,
        *,
        continued: bool,
    ) -> RunSetup:
        """The run's tools, system context and metadata, after the `run:before` hooks;
        stored on `record` for a continued run or a resume to find."""
        from art.run_setup import set_up_run

        setup = await set_up_run(
            self.registry,
            record,
            opts,
            self.events,
            continued=continued,
            span=SpanContext.root(record.trace_id),
        )
        record.system_context = setup.system_context
        record.metadata = setup.metadata
        return setup

    async def _busy(
        self,
        thread_id: str,
        busy: ThreadBusyError,
        started: float,
        *,
        sinks: Sequence[Callable[[Event], None]],
    ) -> AgentFinalResponse:
        error = RunError(
            code=RunErrorCode.THREAD_BUSY, message=busy.message, retry_after_s=busy.retry_after_s
        )
        return await self._refused(thread_id, error, started, sinks=sinks, source="lease")

    async def _refused(
        self,
        thread_id: str,
        error: RunError,
        started: float,
        *,
        sinks: Sequence[Callable[[Event], None]],
        source: str = "run",
    ) -> AgentFinalResponse:
        """The response of a run that never started (a busy thread, a vetoed run)."""
        span = SpanContext.root()
        events = RunEvents(self.events, sinks=sinks)
        if events.wants("error"):
            await events.emit(
                "error",
                {
                    "source": source,
                    "code": error.code,
                    "message": error.message,
                    "recoverable": True,
                },
                thread_id=thread_id,
                span=span,
            )
        return AgentFinalResponse(
            response=ConversationMessage(
                thread_id=thread_id, role="assistant", content=f"{error.code}: {error.message}"
            ),
            metadata=ExecutionMetadata(
                thread_id=thread_id,
                trace_id=span.trace_id,
                status="error",
                total_duration_ms=(time.perf_counter() - started) * 1000.0,
                error=error,
            ),
        )


class _Session:
    """One `process` or resume of one run, under the thread's lease."""

    def __init__(
        self,
        inst: ArtInstance,
        record: RunRecord,
        config: ExecutionConfig,
        opts: ProcessOptions,
        sinks: Sequence[Callable[[Event], None]],
        started: float,
        setup: RunSetup,
    ) -> None:
        self.inst = inst
        self.storage = inst.storage
        self.record = record
        self.started = started
        self.setup = setup
        self.events = RunEvents(
            inst.events,
            sinks=sinks,
            logged=LOGGED_EVENTS,
            keep=_logged,
            scope=_scope(record, setup.metadata, opts.session_id),
        )
        self.llm = inst._llm_client(opts.llm_params)
        stats = RunStats(
            llm_calls=record.llm_calls,
            tool_calls=record.tool_calls,
            usage=record.usage,
            llm_cost=record.llm_cost,
        )
        self.run = RunContext(
            thread_id=record.thread_id,
            run_id=record.run_id,
            span=setup.span,
            config=config,
            events=self.events,  # type: ignore[arg-type]  # RunEvents has the bus's emit
            user_id=record.user_id or opts.user_id,
            session_id=record.session_id or opts.session_id,
            message_id=record.message_id,
            agent=inst.config.persona.name,
            metadata=setup.metadata,
            system_context=setup.system_context,
            stats=stats,
        )
        self.executor: Executor | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._cancel_reason: str | None = None
        # The event log is written by one writer at a time, in order: every few hundred
        # events, while the executor waits for its tools, and at the end.
        self._log_lock = asyncio.Lock()
        self._log_writer: asyncio.Task[None] | None = None

    # -- the run ----------------------------------------------------------------------
    async def drive(
        self, start_data: dict[str, Any], *, resumed: Suspension | None = None
    ) -> AgentFinalResponse:
        inst, run = self.inst, self.run
        self.loop = asyncio.get_running_loop()
        inst._active[run.thread_id] = self
        try:
            await self._emit("session:start", {"query": self.record.query, **start_data})
            if resumed is not None:
                await self._emit(
                    "resumed",
                    {
                        "suspension_id": resumed.suspension_id,
                        "step_id": resumed.step_id,
                        "tool": resumed.tool_name,
                        "decision": resumed.decision,
                    },
                )
            try:
                response = await self._phases()
            except asyncio.CancelledError:
                # Left as a crash leaves it (the same query continues it); keep the log.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._finish_log())
                raise
            except Exception as exc:
                log.exception("run failed inside the engine", run_id=run.run_id)
                error = RunError(
                    code=RunErrorCode.INTERNAL_ERROR,
                    message=f"{type(exc).__name__}: {_unwrap(exc)}",
                )
                response = await self._error(error)
            await self._emit("session:end", _end_data(response))
            await self._finish_log()
            return response
        finally:
            if inst._active.get(run.thread_id) is self:
                del inst._active[run.thread_id]
            # The executor refers back to this session (its persist and idle callbacks):
            # without that cycle a finished run's objects are freed as soon as the caller
            # drops the response, not at some later collection.
            self.executor = None

    def cancel(self, reason: str) -> None:
        self._cancel_reason = reason
        self.run.cancellation.cancel(reason)
        if self.executor is not None:
            self.executor.cancel(reason)

    async def _phases(self) -> AgentFinalResponse:
        inst, run, record = self.inst, self.run, self.record
        storage = self.storage
        history = await storage.get_history(run.thread_id, limit=_HISTORY_LIMIT)

        # Decisions taken while the run was suspended complete (or fail) their steps.
        waiting = [r for r in record.steps.values() if r.status == "waiting"]
        if waiting:
            everything = await storage.list_suspensions(run.thread_id, pending_only=False)
            by_step = latest_by_step(everything, record.run_id)
            for step_record in waiting:
                suspension = by_step.get(step_record.step_id)
                if suspension is not None and not suspension.pending:
                    apply_decision(step_record, suspension)
                    await storage.save_step(record.run_id, step_record)
            remaining = [r.step_id for r in waiting if r.status == "waiting"]
            if remaining:
                pending = [by_step[sid] for sid in remaining if sid in by_step]
                return await self._suspended([s for s in pending if s.pending])

        tools = self.setup.registry
        if record.plan is None:
            planner = inst._planner(self.llm, tools)
            try:
                plan = await planner.plan(run, record.query, history)
            except PlanError as exc:
                problems = list(exc.problems)
                invalid = RunError(code=RunErrorCode.PLAN_INVALID, message=exc.message)
                return await self._error(invalid.model_copy(update={"problems": problems}))
            except (ModelError, HookVeto) as exc:
                return await self._error(_call_error(exc))
            record.plan = plan
            record.status = "running"
            self._sync_counters()
            await storage.update_run(record)
            # The plan's wire form is made when a hook or stream sees the event, or else
            # when the log is written (while the executor waits, for a parallel plan).
            wire = plan.to_wire() if self.events.listened("plan:created") else plan
            await self._emit("plan:created", {"plan": wire, "steps": len(plan.steps)})
        elif record.status != "running":
            record.status = "running"
            await storage.update_run(record)

        if run.cancellation.cancelled:
            reason = self._cancel_reason or "cancelled"
            return await self._error(RunError(code=RunErrorCode.CANCELLED, message=reason))

        from art.execution import Executor

        self.executor = Executor(
            run,
            record.plan,
            tools,
            llm=self.llm,
            model=inst.model,
            planner=inst._planner(self.llm, tools),
            query=record.query,
            history=history,
            records=record.steps,
            replans=record.replans,
            persist=self._persist,
            suspend=storage.add_suspension,
            plan_updated=self._plan_updated,
            thread_pool=inst._tool_threads(),
            idle=self._write_log,
        )
        outcome = await self.executor.run()
        record.steps = outcome.records
        record.plan = outcome.plan
        record.replans = outcome.replans
        if outcome.status == "suspended":
            pending = await inst._pending(run.thread_id, record.run_id)
            return await self._suspended(pending or outcome.suspensions, outcome)
        if outcome.status in ("failed", "cancelled"):
            failed = RunError(code=RunErrorCode.STEP_FAILED, message="a step failed")
            return await self._error(outcome.error or failed)

        from art.synthesis import SynthesisInput, synthesize

        data = SynthesisInput(
            query=record.query,
            records=list(outcome.records.values()),
            plan=outcome.plan,
            history=history,
            display_tools=self.setup.display_tools,
            persona=inst.config.persona.synthesis,
            system_context=run.system_context,
            max_length=run.config.tool_result_max_length,
        )
        try:
            result = await synthesize(run, self.llm, inst.synthesis_model, data)
        except (ModelError, HookVeto) as exc:
            return await self._error(_call_error(exc))
        status = "success" if outcome.status == "completed" else "partial"
        record.status = "completed" if status == "success" else "partial"
        record.answer = result.content
        record.error = None
        self._sync_counters()
        response = self._response(status, result.content)
        question = ConversationMessage(thread_id=run.thread_id, role="user", content=record.query)
        # The run's end and its exchange in one write: a crash keeps both or neither.
        await storage.finish_run(record, [question, response.response])
        return response

    # -- endings ------------------------------------------------------------------------
    async def _suspended(
        self, pending: Sequence[Suspension], outcome: ExecutionOutcome | None = None
    ) -> AgentFinalResponse:
        record = self.record
        record.status = "suspended"
        self._sync_counters()
        await self.storage.update_run(record)
        ids = [s.suspension_id for s in pending]
        await self._emit(
            "suspended",
            {
                "suspension_id": ids[0] if ids else None,
                "suspension_ids": ids,
                "steps": [
                    {
                        "suspension_id": s.suspension_id,
                        "step_id": s.step_id,
                        "tool": s.tool_name,
                        "args": s.args,
                        "prompt": s.prompt,
                    }
                    for s in pending
                ],
            },
        )
        return self._response("suspended", suspended_message(pending), suspension_ids=ids)

    async def _error(self, error: RunError) -> AgentFinalResponse:
        error = error.model_copy(update={"message": self.llm.redact(error.message)})
        record = self.record
        record.status = "failed"
        record.error = error
        self._sync_counters()
        await self.storage.update_run(record)
        await self._emit(
            "error",
            {
                "source": "run",
                "code": error.code,
                "message": error.message,
                "problems": error.problems,
                "recoverable": False,
            },
        )
        return self._response(
            "error", f"The run failed ({error.code}): {error.message}", error=error
        )

    def _response(
        self,
        status: str,
        content: str,
        *,
        error: RunError | None = None,
        suspension_ids: Sequence[str] = (),
    ) -> AgentFinalResponse:
        from art.synthesis import gather_sources

        run, record = self.run, self.record
        steps = list(record.steps.values())
        display_tools = self.setup.display_tools
        display = [
            DisplayOutput(step_id=r.step_id, tool_name=r.tool or "", output=r.output)
            for r in steps
            if r.status == "completed" and r.tool in display_tools
        ]
        message = ConversationMessage(
            message_id=record.message_id,
            thread_id=run.thread_id,
            role="assistant",
            content=content,
            metadata=MessageMetadata(sources=gather_sources(steps)),
        )
        stats = run.stats
        metadata = ExecutionMetadata(
            thread_id=run.thread_id,
            trace_id=run.trace_id,
            run_id=run.run_id,
            user_id=run.user_id,
            status=status,  # type: ignore[arg-type]
            total_duration_ms=(time.perf_counter() - self.started) * 1000.0,
            llm_calls=stats.llm_calls,
            tool_calls=stats.tool_calls,
            usage=stats.usage,
            llm_cost=stats.llm_cost,
            error=error,
            suspension_id=suspension_ids[0] if suspension_ids else None,
            suspension_ids=list(suspension_ids),
        )
        return AgentFinalResponse(
            response=message, metadata=metadata, plan=record.plan, steps=steps, display=display
        )

    # -- persistence ----------------------------------------------------------------------
    def _persist(self, step_record: StepRecord) -> Awaitable[None]:
        """Save a step record (the storage's own coroutine: one less per save, two saves
        per step); once a batch of events has gathered, write the log beside it."""
        if len(self.events.log) >= _EVENT_BATCH:
            self._write_log()
        # The run context's id, not the run record's: a model's attributes are slow to read.
        return self.storage.save_step(self.run.run_id, step_record)

    async def _plan_updated(self, plan: Plan, replans: int) -> None:
        self.record.plan = plan
        self.record.replans = replans
        self._sync_counters()
        await self.storage.update_run(self.record)

    def _sync_counters(self) -> None:
        stats, record = self.run.stats, self.record
        record.llm_calls = stats.llm_calls
        record.tool_calls = stats.tool_calls
        record.usage = stats.usage
        record.llm_cost = stats.llm_cost

    def _write_log(self) -> None:
        """Write the event log in the background (when a batch has gathered, and when the
        executor is waiting for its tools), one writer at a time. A failed write is kept
        for `_finish_log` to raise; nothing more is written before then."""
        writer = self._log_writer
        if writer is not None and (not writer.done() or _failed(writer)):
            return
        if self.events.log:
            self._log_writer = asyncio.get_running_loop().create_task(self._flush_events())

    async def _finish_log(self) -> None:
        """Write the rest of the event log, after a write begun in the background."""
        writer, self._log_writer = self._log_writer, None
        try:
            if writer is not None:
                await writer
        finally:
            await self._flush_events()

    async def _flush_events(self) -> None:
        async with self._log_lock:
            batch = self.events.drain()
            if not batch:
                return
            run = self.run
            stored = stored_events(batch, run.thread_id, run.run_id, run.trace_id, self.llm.redact)
            await self.storage.append_events(stored)

    async def _emit(self, name: str, data: dict[str, Any]) -> None:
        run = self.run
        if self.events.wants(name):
            await self.events.emit(
                name, data, thread_id=run.thread_id, run_id=run.run_id, span=run.span
            )


# -- helpers --------------------------------------------------------------------------------


def _build_config(config: ArtInstanceConfig | None, fields: Mapping[str, Any]) -> ArtInstanceConfig:
    try:
        if config is None:
            return ArtInstanceConfig.model_validate(dict(fields))
        if not isinstance(config, ArtInstanceConfig):
            config = ArtInstanceConfig.model_validate(config)
        if fields:
            merged = {**config.model_dump(exclude_unset=True), **fields}
            # Objects (tools, adapters, callbacks) must not be copied through model_dump.
            for name in ("tools", "storage", "callbacks", "mcp_servers"):
                if name not in fields and name in config.model_fields_set:
                    merged[name] = getattr(config, name)
            return ArtInstanceConfig.model_validate(merged)
        return config
    except ValidationError as exc:
        raise ConfigurationError(f"invalid art configuration: {exc}") from None


def _resolve_model(config: ArtInstanceConfig) -> str:
    model = config.resolved_model()
    if model:
        return model
    if _local_available():
        from art.adapters.local import DEMO_MODEL

        return DEMO_MODEL
    raise ConfigurationError(no_model_message())


def _history_message(
    thread_id: str, number: int, message: ConversationMessage | Mapping[str, Any]
) -> ConversationMessage:
    """A message for the thread's history, given as a model or as a dict."""
    try:
        if isinstance(message, ConversationMessage):
            return message.model_copy(update={"thread_id": thread_id})
        return ConversationMessage.model_validate({**message, "thread_id": thread_id})
    except (ValidationError, TypeError) as exc:
        raise ConfigurationError(
            f"history message {number} is not a message with a role (user, assistant, "
            f"system or tool) and content: {exc}"
        ) from None


# Seed 004's run options that art takes elsewhere, and where.
_MOVED_OPTIONS = {
    "stream": "stream the run with inst.stream(query, thread_id, options) instead",
    "temperature": 'pass it in "llm_params"',
    "max_tokens": 'pass it in "llm_params"',
    "maxTokens": 'pass it in "llm_params"',
    "conversation_id": "the thread_id argument names the conversation",
    "conversationId": "the thread_id argument names the conversation",
}


def _options(options: ProcessOptions | Mapping[str, Any] | None) -> ProcessOptions:
    if options is None:
        return ProcessOptions()
    if isinstance(options, ProcessOptions):
        return options
    options = dict(options)
    for name, fix in _MOVED_OPTIONS.items():
        if name in options:
            raise ConfigurationError(f"invalid process options: no option {name!r}: {fix}")
    try:
        return ProcessOptions.model_validate(options)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid process options: {exc}") from None


def _scope(record: RunRecord, metadata: dict[str, Any], session_id: str | None = None) -> RunScope:
    """The run's fields of its events' `EventContext`."""
    return RunScope(
        session_id=record.session_id or session_id,
        message_id=record.message_id,
        metadata=metadata,
    )


def _call_error(exc: ModelError | HookVeto) -> RunError:
    """The run error of a failed planning or synthesis call."""
    if isinstance(exc, ModelError):
        return RunError(code=str(exc.code), message=exc.message, retry_after_s=exc.retry_after_s)
    return RunError(code=RunErrorCode.VETOED, message=str(exc))


def _decision_data(decision: Decision) -> dict[str, Any]:
    """The decision as JSON data, its text escaped as `_storable` escapes a query."""
    from pydantic_core import to_jsonable_python

    from art.serialization import escape_unencodable_data

    data: dict[str, Any] = to_jsonable_python(escape_unencodable_data(decision.model_dump()))
    return data


def _storable(text: str) -> str:
    """A thread id or query as every storage keeps it: lone surrogates escaped (`\\udcff`,
    see art.serialization.escape_unencodable) and NUL as `\\x00` (PostgreSQL text)."""
    from art.serialization import escape_unencodable

    if not isinstance(text, str):
        raise ConfigurationError(f"expected text, got {type(text).__name__}: {text!r}"[:200])
    text = escape_unencodable(text)
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def _failed(task: asyncio.Task[Any]) -> bool:
    return not task.cancelled() and task.exception() is not None


def _unwrap(exc: BaseException) -> str:
    """The message of an engine fault, looking inside a one-exception group."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def _end_data(response: AgentFinalResponse) -> dict[str, Any]:
    meta = response.metadata
    return {
        "status": meta.status,
        "answer": response.content if meta.status in ("success", "partial") else "",
        "llm_calls": meta.llm_calls,
        "tool_calls": meta.tool_calls,
        "duration_ms": meta.total_duration_ms,
        "error": meta.error.model_dump(mode="json") if meta.error else None,
        "suspension_ids": list(meta.suspension_ids),
        "response": response,
    }


def create_art_instance(config: ArtInstanceConfig | None = None, **fields: Any) -> ArtInstance:
    """An ArtInstance from a config and/or keyword fields (fields override the config)."""
    return ArtInstance(config, **fields)
