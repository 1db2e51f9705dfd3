"""ArtInstance: wires the config, LLM, tools, storage and events into plan → execute → synthesize.

Every path is written once, async (`aprocess`, `aresume_execution`, ...); the sync
methods are thin bridges through a private event loop (`art.core.sync.Portal`), so they
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
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import Field, ValidationError

from art.config import (
    IN_PROCESS_MODEL_PREFIX,
    ArtInstanceConfig,
    ExecutionConfig,
    ProcessOptions,
    process_options,
)
from art.core.log import get_logger
from art.core.models import ArtModel
from art.core.redaction import secrets_from_params, secrets_in_use
from art.core.serialization import escape_unencodable
from art.core.spans import SpanContext
from art.core.sync import Portal
from art.engine.context import RunContext
from art.engine.fork import fork_record
from art.engine.phases import drive
from art.engine.run import (
    HISTORY_LIMIT,
    Run,
    RunDeps,
    call_error,
    open_resumed_run,
    open_run,
    pending_suspensions,
    refused_response,
)
from art.engine.suspension import Decision, SuspendedState, parse_decision
from art.errors import ConfigurationError, ForkError, RunErrorCode, ThreadBusyError
from art.llm import chat as llm_chat
from art.llm.chat import ChatMessages, ChatResponse, ChatStreamChunk
from art.llm.client import LLMClient, named_model
from art.llm.model import model_name
from art.observe.callbacks import CallbackAdapter
from art.observe.events import Event, EventBus, Hook, HookVeto, RunEvents
from art.planning.planner import Planner
from art.queue.runs import RunHandle, RunQueue
from art.responses import AgentFinalResponse, ConversationMessage, RunError
from art.storage.contract import RunRecord, StorageAdapter, Suspension, ThreadSummary
from art.storage.opening import open_storage
from art.tooling.registry import ToolRegistry
from art.tooling.threads import ToolThreads

if TYPE_CHECKING:
    from art.adapters.mcp.client import MCPClient
    from art.engine.setup import RunSetup
    from art.planning.plans import Plan

__all__ = ["ArtInstance", "ThreadState", "create_art_instance", "no_model_message"]

log = get_logger(__name__)

T = TypeVar("T")

#: Plain `def` tool calls that run at once across all the runs of one instance.
TOOL_THREADS = 256


def no_model_message() -> str:
    """What to do when no model is configured: the local extra, or ART_MODEL."""
    try:
        from art.adapters.local import PORTABLE_CMAKE_ARGS
    except Exception:  # the hint must not depend on the adapter importing
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


@dataclass(frozen=True, slots=True)
class _Opened:
    """The run a process or resume call found under the lease, and what its
    `session:start` says beyond `continued` and `tools`."""

    record: RunRecord
    setup: RunSetup
    continued: bool
    start: dict[str, Any] = field(default_factory=dict)
    resumed: Suspension | None = None


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
        self.planning_model = model_name(self.config.planning_model) or self.model
        self.synthesis_model = model_name(self.config.synthesis_model) or self.model

        self.registry = ToolRegistry(self.config.tools)  # raises ToolRegistrationError
        self.storage: StorageAdapter = open_storage(self.config.resolved_storage())
        self._owns_storage = not isinstance(self.config.storage, StorageAdapter)
        self.events = EventBus()
        self._callbacks = None
        if self.config.callbacks is not None:
            self._callbacks = CallbackAdapter(self.config.callbacks)
            self._callbacks.attach(self.events)
        self._mcp: MCPClient | None = None
        self._owns_mcp = False
        self._mcp_lock = threading.Lock()  # runs on two loops may register tools at once
        if self.config.mcp_servers is not None:
            # Only with MCP servers configured: the client needs the optional mcp extra.
            from art.adapters.mcp.client import MCPClient

            given = self.config.mcp_servers
            self._mcp = given if isinstance(given, MCPClient) else MCPClient(given)
            self._owns_mcp = self._mcp is not given
            # The servers' sampling requests are answered by this instance's model.
            self._mcp.attach_sampler(self._mcp_sampler())
        self._opened = False
        self._providers_ready = False
        self._llm: LLMClient | None = None
        self._portal_lock = threading.Lock()
        self._portal: Portal | None = None
        self._active: dict[str, Run] = {}  # the runs under way, for `cancel`
        # Calls that have not built their run yet (taking the lease, run:before hooks).
        self._starting: dict[str, list[_Starting]] = {}
        self._closed = False
        self._queue: RunQueue | None = None
        # Plain `def` tools run on threads that outlive a run (see `_tool_threads`).
        self._tool_pool: ToolThreads | None = None
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
        thread_id = _thread_key(thread_id) if thread_id is not None else None
        await self._prepare()
        history = (
            await self.storage.get_history(thread_id, limit=HISTORY_LIMIT) if thread_id else []
        )

        run = RunContext(
            thread_id=thread_id or f"plan-{uuid.uuid4().hex[:12]}",
            run_id=uuid.uuid4().hex,
            span=SpanContext.root(),
            config=self.config.execution_config,
            events=RunEvents(self.events),
        )
        with self._secrets_in_use(ProcessOptions()):
            return await self._planner(self._llm_client(None)).plan(run, query, history)

    def plan(self, query: str, thread_id: str | None = None) -> Plan:
        """Sync `aplan`."""
        return self._sync(self.aplan(query, thread_id))

    async def achat(
        self,
        messages: ChatMessages,
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        llm_params: Mapping[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> ChatResponse:
        """One LLM call outside any run (seed 002's `chat`): `messages` (a string is one
        user message) to `model` (the instance's by default), with the instance's
        llm_params, retries and time limits. Raises ModelError."""
        self._check_open()
        model, sent = self._chat_call(messages, model, system_prompt, llm_params)
        return await llm_chat.achat(
            self._llm_client(llm_params),
            self.config.execution_config,
            model,
            sent,
            response_format=response_format,
        )

    def chat(
        self,
        messages: ChatMessages,
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        llm_params: Mapping[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> ChatResponse:
        """Sync `achat`."""
        return self._sync(
            self.achat(
                messages,
                model=model,
                system_prompt=system_prompt,
                llm_params=llm_params,
                response_format=response_format,
            )
        )

    async def chat_stream(
        self,
        messages: ChatMessages,
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        llm_params: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[ChatStreamChunk]:
        """`achat`, streamed: the reply's chunks as they arrive (`content` or `thinking`),
        the last one `done` with the finish reason and usage. Raises ModelError."""
        self._check_open()
        model, sent = self._chat_call(messages, model, system_prompt, llm_params)
        chunks = llm_chat.chat_stream(
            self._llm_client(llm_params), self.config.execution_config, model, sent
        )
        async for chunk in chunks:
            yield chunk

    def _chat_call(
        self,
        messages: ChatMessages,
        model: str | None,
        system_prompt: str | None,
        llm_params: Mapping[str, Any] | None,
    ) -> tuple[str, list[dict[str, Any]]]:
        """The model and messages of a chat call, the model's provider registered; a call
        asking for function calling is refused."""
        model = model or self.model
        llm_chat.refuse_function_calling({**self.config.llm_params, **(llm_params or {})})
        if model.startswith(IN_PROCESS_MODEL_PREFIX):
            import art.adapters.local  # noqa: F401 - registers the local/ models with art
        return model, llm_chat.chat_messages(messages, system_prompt)

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
        thread_id = _thread_key(thread_id)
        parsed = parse_decision(decision)
        opts = process_options(options)
        config = self._config_for(opts)
        await self._prepare()
        started = time.perf_counter()

        async def open_() -> _Opened:
            record, decided, setup = await open_resumed_run(
                self.storage, self.registry, self.events, thread_id, suspension_id, parsed, opts
            )
            start = {"suspension_id": suspension_id, "decision": decided.decision}
            return _Opened(record, setup, continued=True, start=start, resumed=decided)

        return await self._lease_and_drive(thread_id, opts, config, started, open_, sinks=())

    def resume_execution(
        self,
        thread_id: str,
        suspension_id: str,
        decision: Decision | Mapping[str, Any] | bool,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AgentFinalResponse:
        """Sync `aresume_execution`."""
        return self._sync(self.aresume_execution(thread_id, suspension_id, decision, options))

    async def afork(
        self,
        thread_id: str,
        run_id: str,
        step_id: str,
        *,
        args: Mapping[str, Any] | None = None,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AgentFinalResponse:
        """Run a stored run again from `step_id` (with `args` for that step, if given) as a
        new run of the thread, reusing the outputs of its finished steps that are not
        downstream of it (a fork; see docs/state.md). `options` are `process`'s, e.g.
        `llm_params` for another model. Raises ForkError for an unknown run or step or
        arguments that make the plan invalid, ThreadBusyError while a run is active on the
        thread."""
        self._check_open()
        await self._prepare()
        source = await self.storage.get_run(run_id)
        if source is None or source.thread_id != thread_id:
            raise ForkError(f"no run {run_id!r} on thread {thread_id!r}", code="FORK_RUN_NOT_FOUND")
        record = fork_record(
            source, step_id, self.registry, args=dict(args) if args is not None else None
        )
        async with self.storage.lease(thread_id):
            if await self.storage.get_active_run(thread_id) is not None:
                raise ThreadBusyError(thread_id)
            await self.storage.create_run(record)
        opts = process_options(options).model_copy(update={"run_id": record.run_id})
        return await self.aprocess(source.query, thread_id, opts)

    def fork(
        self,
        thread_id: str,
        run_id: str,
        step_id: str,
        *,
        args: Mapping[str, Any] | None = None,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> AgentFinalResponse:
        """Sync `afork`."""
        return self._sync(self.afork(thread_id, run_id, step_id, args=args, options=options))

    async def acheck_for_suspended_state(self, thread_id: str) -> SuspendedState | None:
        """The thread's suspended run and its pending suspensions, or None."""
        self._check_open()
        thread_id = _thread_key(thread_id)
        await self._prepare()
        run = await self.storage.get_active_run(thread_id)
        if run is None or run.status != "suspended":
            return None
        pending = await pending_suspensions(self.storage, thread_id, run.run_id)
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
        thread_id = _thread_key(thread_id)
        await self._prepare()
        runs = await self.storage.list_runs(thread_id)
        active = await self.storage.get_active_run(thread_id)
        pending = (
            await pending_suspensions(self.storage, thread_id, active.run_id)
            if active is not None
            else []
        )
        history = await self.storage.get_history(thread_id, limit=HISTORY_LIMIT)
        return ThreadState(
            thread_id=thread_id, runs=runs, active_run=active, suspensions=pending, history=history
        )

    def get_state(self, thread_id: str) -> ThreadState:
        """Sync `aget_state`."""
        return self._sync(self.aget_state(thread_id))

    async def aget_history(
        self, thread_id: str, *, limit: int | None = None, before: int = 0
    ) -> list[ConversationMessage]:
        """The thread's conversation history, oldest first: all of it, or a page of
        `limit` messages that ends `before` messages from the newest (`before=0`: the
        newest page). Runs plan and answer with the last 20 only; this reads the rest."""
        self._check_open()
        if (limit is not None and limit < 0) or before < 0:
            raise ConfigurationError("get_history needs limit >= 0 and before >= 0")
        thread_id = _storable(thread_id)
        await self._prepare()
        wanted = _ALL_MESSAGES if limit is None else before + limit
        messages = await self.storage.get_history(thread_id, limit=wanted)
        return messages[: len(messages) - before] if before else messages

    def get_history(
        self, thread_id: str, *, limit: int | None = None, before: int = 0
    ) -> list[ConversationMessage]:
        """Sync `aget_history`."""
        return self._sync(self.aget_history(thread_id, limit=limit, before=before))

    async def aload_history(
        self, thread_id: str, messages: Sequence[ConversationMessage | Mapping[str, Any]]
    ) -> None:
        """Make `messages` the thread's conversation history: the earlier turns its next
        runs plan and answer with (seed 004's `loadHistory`). Each is a
        `ConversationMessage` or a dict with `role` and `content`. Raises ThreadBusyError
        while a run holds the thread, ConfigurationError for a malformed message."""
        self._check_open()
        thread_id = _thread_key(thread_id)
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
        thread_id = _thread_key(thread_id)
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

    def cancel(
        self, thread_id: str, reason: str = "cancelled by the caller", *, run_id: str | None = None
    ) -> bool:
        """Stop the run this instance is executing on `thread_id` (only if its id is
        `run_id`, when given); False when there is none.

        Running tools are cancelled (sync tools see `context.cancelled`); the response
        comes back with error code CANCELLED. Safe to call from any thread.
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        run = self._active.get(thread_id)
        if run is None:
            # Not started yet (taking the thread's lease, in run:before hooks): stop there.
            calls = [
                s
                for s in list(self._starting.get(thread_id, ()))
                if run_id is None or s.run_id == run_id
            ]
            for starting in calls:
                if running is starting.loop:
                    starting.cancel(reason)
                else:
                    starting.loop.call_soon_threadsafe(starting.cancel, reason)
            return bool(calls)
        if run_id is not None and run.context.run_id != run_id:
            return False
        if running is run.loop:
            run.cancel(reason)
        else:
            # The run lives on another loop (the sync methods' private one, say).
            run.context.cancellation.cancel(reason)  # tools see it at once
            run.loop.call_soon_threadsafe(run.cancel, reason)
        return True

    # -- queued runs --------------------------------------------------------------------
    async def asubmit(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Queue `query` on `thread_id` and return its handle at once (see docs/deployment.md).

        A worker runs it: `art worker` processes, and this process too on SQLite and memory
        storage (`config.queue.in_process`)."""
        self._check_open()
        if isinstance(thread_id, str):  # the queue says what else a thread id must be
            thread_id = _thread_key(thread_id)
        await self._prepare()
        return await self.queue.submit(query, thread_id, options)

    def submit(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Sync `asubmit`; the handle's sync methods (`status`, `wait`, `cancel`) work too."""
        return self._sync(self.asubmit(query, thread_id, options))

    @property
    def queue(self) -> RunQueue:
        """The queue of this instance's storage: `submit`, `get(run_id)`, `stats()`."""
        if self._queue is None:
            self._queue = RunQueue(self.storage, self.config.queue, instance=self, sync=self._sync)
        return self._queue

    # -- lifecycle ----------------------------------------------------------------------
    async def aopen(self) -> None:
        """Open the storage, register the in-process model and start the MCP servers now
        rather than at the first call (each call does it when needed). Idempotent."""
        self._check_open()
        await self._prepare()

    async def aclose(self) -> None:
        """Stop the in-process queue worker, then close the storage this instance opened.
        Idempotent."""
        if self._closed:
            return
        queue, self._queue = self._queue, None
        if queue is not None:  # before closing: its runs end or go back to the queue
            await queue.aclose()
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
    def _tool_threads(self) -> ToolThreads | None:
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
                self._tool_pool = ToolThreads(TOOL_THREADS)
            return self._tool_pool

    def _sync(self, coro: Coroutine[Any, Any, T], *, allow_closed: bool = False) -> T:
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
            if any(m.startswith(IN_PROCESS_MODEL_PREFIX) for m in models):
                import art.adapters.local  # noqa: F401 - registers the local/ models with art
            self._providers_ready = True
        if self._mcp is not None:
            # Starts the MCP servers not running yet (one that fails is left out, with a
            # warning, and tried again by a later run) and registers their tools once.
            tools = await self._mcp.astart(strict=False)
            with self._mcp_lock:
                for tool in tools:
                    if self.registry.get(tool.name) is not tool:
                        self.registry.register(tool)

    def _mcp_sampler(self) -> Any:
        from art.adapters.mcp.sampling import Sampler

        if self.model.startswith(IN_PROCESS_MODEL_PREFIX):
            import art.adapters.local  # noqa: F401 - registers the local/ models with art
        model = self.config.model_objects().get(self.model) or named_model(self.model)
        return Sampler(model, self.config.llm_params)

    def _llm_client(self, overrides: Mapping[str, Any] | None) -> LLMClient:
        """The LLM client for a call: the instance's, or one with per-call llm_params."""

        models = self.config.model_objects()
        if overrides:
            return LLMClient({**self.config.llm_params, **overrides}, models=models)
        if self._llm is None:  # built once: it scans the environment for keys to mask
            self._llm = LLMClient(self.config.llm_params, models=models)
        return self._llm

    def _secrets_in_use(self, opts: ProcessOptions) -> contextlib.AbstractContextManager[Any]:
        """Make the keys of this call's llm_params known to everything that writes for it
        (logs, storage), with the environment's (see art.core.redaction)."""
        return secrets_in_use(
            secrets_from_params({**self.config.llm_params, **(opts.llm_params or {})})
        )

    def _planner(self, llm: LLMClient, tools: ToolRegistry | None = None) -> Planner:

        return Planner(
            llm,
            tools or self.registry,
            persona=self.config.persona,
            model=self.planning_model,
            structured_output=self.config.structured_output,
        )

    def _config_for(self, opts: ProcessOptions) -> ExecutionConfig:
        try:
            return self.config.execution_config.merged(opts.execution_config)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid execution_config override: {exc}") from None

    def _run_deps(self, opts: ProcessOptions, setup: RunSetup) -> RunDeps:
        llm = self._llm_client(opts.llm_params)
        return RunDeps(
            storage=self.storage,
            setup=setup,
            llm=llm,
            planner=self._planner(llm, setup.registry),
            model=self.model,
            synthesis_model=self.synthesis_model,
            persona=self.config.persona,
            tool_threads=self._tool_threads(),
        )

    async def _drive(
        self, run: Run, start_data: dict[str, Any], *, resumed: Suspension | None = None
    ) -> AgentFinalResponse:
        """Drive `run`, reachable by `cancel` while it runs."""
        self._active[run.thread_id] = run
        try:
            # In a task of its own, so what the run makes current in its context (its
            # tracing span) ends with it; cancelling this call cancels the task.
            return await asyncio.create_task(drive(run, start_data, resumed=resumed))
        finally:
            if self._active.get(run.thread_id) is run:
                del self._active[run.thread_id]

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
        query, thread_id = _storable(query), _thread_key(thread_id)
        opts = process_options(options)
        config = self._config_for(opts)
        await self._prepare()

        async def open_() -> _Opened:
            record, continued, setup = await open_run(
                self.storage, self.registry, self.events, query, thread_id, opts
            )
            return _Opened(record, setup, continued=continued)

        return await self._lease_and_drive(thread_id, opts, config, started, open_, sinks=sinks)

    async def _lease_and_drive(
        self,
        thread_id: str,
        opts: ProcessOptions,
        config: ExecutionConfig,
        started: float,
        open_: Callable[[], Awaitable[_Opened]],
        *,
        sinks: Sequence[Callable[[Event], None]],
    ) -> AgentFinalResponse:
        """The one path of `process` and `aresume_execution`: take the thread's lease, find
        the run (`open_`, where a `run:before` hook may veto it) and drive it."""
        with self._secrets_in_use(opts), self._start(thread_id, opts.run_id) as starting:
            try:
                async with self.storage.lease(thread_id):
                    try:
                        opened = await open_()
                    except HookVeto as veto:
                        error = call_error(veto)
                        return await refused_response(
                            self.events, thread_id, error, started, sinks=sinks
                        )
                    run = Run(
                        self._run_deps(opts, opened.setup),
                        opened.record,
                        config,
                        opts,
                        bus=self.events,
                        sinks=sinks,
                        started=started,
                    )
                    start = {
                        "continued": opened.continued,
                        "tools": opened.setup.registry.names(),
                        **opened.start,
                    }
                    starting.hand_over(run)
                    return await self._drive(run, start, resumed=opened.resumed)
            except ThreadBusyError as busy:
                return await self._busy(thread_id, busy, started, sinks=sinks)
            except asyncio.CancelledError:
                if not starting.owns_cancel():
                    raise
                return await self._cancelled_at_start(thread_id, starting, started, sinks=sinks)

    @contextlib.contextmanager
    def _start(self, thread_id: str, run_id: str | None) -> Iterator[_Starting]:
        """The call's place in `_starting` until it hands over to its run (or ends)."""
        starting = _Starting(asyncio.current_task(), asyncio.get_running_loop(), run_id)
        self._starting.setdefault(thread_id, []).append(starting)
        try:
            yield starting
        finally:
            calls = self._starting.get(thread_id, [])
            if starting in calls:
                calls.remove(starting)
            if not calls:
                self._starting.pop(thread_id, None)

    async def _cancelled_at_start(
        self,
        thread_id: str,
        starting: _Starting,
        started: float,
        *,
        sinks: Sequence[Callable[[Event], None]] = (),
    ) -> AgentFinalResponse:
        """The response of a call cancelled before its run existed (nothing was stored)."""
        error = RunError(code=RunErrorCode.CANCELLED, message=starting.reason or "cancelled")
        return await refused_response(self.events, thread_id, error, started, sinks=sinks)

    async def _busy(
        self,
        thread_id: str,
        busy: ThreadBusyError,
        started: float,
        *,
        sinks: Sequence[Callable[[Event], None]] = (),
    ) -> AgentFinalResponse:
        error = RunError(
            code=RunErrorCode.THREAD_BUSY, message=busy.message, retry_after_s=busy.retry_after_s
        )
        return await refused_response(
            self.events, thread_id, error, started, sinks=sinks, source="lease"
        )


# -- helpers --------------------------------------------------------------------------------


class _Starting:
    """A `process` or resume call before its run exists: `cancel` cancels its task, which
    then answers CANCELLED; once handed over, a cancel goes to the run."""

    def __init__(
        self, task: asyncio.Task[Any] | None, loop: asyncio.AbstractEventLoop, run_id: str | None
    ) -> None:
        self.task = task
        self.loop = loop
        self.run_id = run_id
        self.reason: str | None = None
        self._run: Run | None = None

    def hand_over(self, run: Run) -> None:
        self._run = run

    def cancel(self, reason: str) -> None:
        """On the call's loop."""
        if self._run is not None:
            self._run.cancel(reason)  # it started meanwhile
        elif self.reason is None and self.task is not None and not self.task.done():
            self.reason = reason
            self.task.cancel()

    def owns_cancel(self) -> bool:
        """Whether the CancelledError being handled is `cancel`'s alone (then cleared)."""
        return self.reason is not None and self.task is not None and self.task.uncancel() == 0


#: `get_history`'s "no limit" for the storage's `limit` (SQL's LIMIT takes a 64-bit integer).
_ALL_MESSAGES = 2**62


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


def _thread_key(thread_id: str) -> str:
    """`thread_id`, refused when it holds NUL or a lone surrogate: storage could keep it
    only escaped, and the escape would name another thread (the literal `\\x00`)."""
    if not isinstance(thread_id, str):
        shown = f"{type(thread_id).__name__}: {thread_id!r}"
        raise ConfigurationError(f"expected text, got {shown}"[:200])
    if "\x00" in thread_id or _has_lone_surrogate(thread_id):
        raise ConfigurationError(
            f"invalid thread id {thread_id.encode('utf-8', 'backslashreplace').decode()!r}: "
            "it must not hold NUL or a lone surrogate (text storage cannot keep either)"
        )
    return thread_id


def _has_lone_surrogate(text: str) -> bool:
    return escape_unencodable(text) is not text


def _storable(text: str) -> str:
    """A query as every storage keeps it: lone surrogates escaped (`\\udcff`,
    see art.core.serialization.escape_unencodable) and NUL as `\\x00` (PostgreSQL text)."""
    if not isinstance(text, str):
        raise ConfigurationError(f"expected text, got {type(text).__name__}: {text!r}"[:200])
    text = escape_unencodable(text)
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def create_art_instance(config: ArtInstanceConfig | None = None, **fields: Any) -> ArtInstance:
    """An ArtInstance from a config and/or keyword fields (fields override the config)."""
    return ArtInstance(config, **fields)
