"""ArtInstance: configuration plus the public API over plan → execute → synthesize.

Each method checks its arguments and hands the work to a collaborator: `ActiveRuns`
(process and resume under the thread's lease, `cancel`), `RunDepsFactory` (the LLM
client, the planner, what a run borrows), `Runtime` (the sync methods' loop, the tool
threads), the storage, the queue and the MCP servers (`AttachedServers`).

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
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import Field, ValidationError

from art.config import (
    IN_PROCESS_MODEL_PREFIX,
    ArtInstanceConfig,
    ExecutionConfig,
    ProcessOptions,
    instance_config,
    process_options,
)
from art.core.log import get_logger
from art.core.models import ArtModel
from art.core.redaction import secrets_from_params, secrets_in_use
from art.core.serialization import escape_unencodable
from art.core.spans import SpanContext
from art.engine.active import ActiveRuns, OpenedRun
from art.engine.context import RunContext
from art.engine.deps import RunDepsFactory
from art.engine.fork import store_fork
from art.engine.run import (
    HISTORY_LIMIT,
    open_resumed_run,
    open_run,
    pending_suspensions,
)
from art.engine.runtime import Runtime
from art.engine.suspension import Decision, SuspendedState, parse_decision
from art.errors import ConfigurationError
from art.llm import chat as llm_chat
from art.llm.chat import ChatMessages, ChatResponse, ChatStreamChunk
from art.llm.model import model_name
from art.observe.callbacks import CallbackAdapter
from art.observe.events import Event, EventBus, Hook, RunEvents
from art.queue.runs import RunHandle, RunQueue
from art.responses import AgentFinalResponse, ConversationMessage
from art.storage.contract import RunRecord, StorageAdapter, Suspension, ThreadSummary
from art.storage.opening import open_storage
from art.tooling.registry import ToolRegistry

if TYPE_CHECKING:
    from art.adapters.mcp.attached import AttachedServers
    from art.planning.plans import Plan

__all__ = ["ArtInstance", "ThreadState", "create_art_instance", "no_model_message"]

log = get_logger(__name__)

T = TypeVar("T")


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
        self.config = instance_config(config, fields)
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
        self._mcp: AttachedServers | None = None
        if self.config.mcp_servers is not None:
            # Only with MCP servers configured: the client needs the optional mcp extra.
            from art.adapters.mcp.attached import AttachedServers

            # The servers' sampling requests are answered by this instance's model.
            model = self.config.model_objects().get(self.model, self.model)
            self._mcp = AttachedServers(self.config.mcp_servers, model, self.config.llm_params)
        self._runtime = Runtime("art-instance")
        self._deps = RunDepsFactory(
            self.config,
            self.registry,
            model=self.model,
            planning_model=self.planning_model,
            synthesis_model=self.synthesis_model,
            tool_threads=lambda: self._runtime.tool_threads(self.registry),
        )
        self._runs = ActiveRuns(self.events)
        self._opened = False
        self._providers_ready = False
        self._closed = False
        self._queue: RunQueue | None = None

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
            return await self._deps.planner(self._deps.llm_client(None)).plan(run, query, history)

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
            self._deps.llm_client(llm_params),
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
            self._deps.llm_client(llm_params), self.config.execution_config, model, sent
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
            import art.adapters.local  # noqa: F401 - registers the provider with litellm
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
        config = self._deps.execution_config(opts)
        await self._prepare()
        started = time.perf_counter()

        async def open_() -> OpenedRun:
            record, decided, setup = await open_resumed_run(
                self.storage, self.registry, self.events, thread_id, suspension_id, parsed, opts
            )
            start: dict[str, object] = {
                "suspension_id": suspension_id,
                "decision": decided.decision,
            }
            return OpenedRun(record, setup, continued=True, start=start, resumed=decided)

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
        edited = dict(args) if args is not None else None
        record = await store_fork(
            self.storage, self.registry, thread_id, run_id, step_id, args=edited
        )
        opts = process_options(options).model_copy(update={"run_id": record.run_id})
        return await self.aprocess(record.query, thread_id, opts)

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
        return self._runs.cancel(thread_id, reason, run_id=run_id)

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
        self._runtime.stop_tool_threads()
        if self._opened and self._owns_storage:
            await self.storage.close()
        if self._mcp is not None:
            await self._mcp.aclose()  # stops the MCP servers it started
        if self._callbacks is not None:
            self._callbacks.detach()

    def close(self) -> None:
        """Sync `aclose`, then stop the private loop of the sync methods."""
        if not self._closed:
            self._sync(self.aclose(), allow_closed=True)
        self._runtime.close_loop()

    def __enter__(self) -> ArtInstance:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> ArtInstance:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
        await asyncio.to_thread(self._runtime.close_loop)

    # -- internals ----------------------------------------------------------------------
    def _sync(self, coro: Coroutine[Any, Any, T], *, allow_closed: bool = False) -> T:
        if self._closed and not allow_closed:
            coro.close()
            raise ConfigurationError("this ArtInstance is closed")
        return self._runtime.run(coro)

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
                import art.adapters.local  # noqa: F401 - registers the provider with litellm
            self._providers_ready = True
        if self._mcp is not None:
            await self._mcp.start(self.registry)

    def _secrets_in_use(self, opts: ProcessOptions) -> contextlib.AbstractContextManager[Any]:
        """Make the keys of this call's llm_params known to everything that writes for it
        (logs, storage), with the environment's (see art.core.redaction)."""
        return secrets_in_use(
            secrets_from_params({**self.config.llm_params, **(opts.llm_params or {})})
        )

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
        config = self._deps.execution_config(opts)
        await self._prepare()

        async def open_() -> OpenedRun:
            record, continued, setup = await open_run(
                self.storage, self.registry, self.events, query, thread_id, opts
            )
            return OpenedRun(record, setup, continued=continued)

        return await self._lease_and_drive(thread_id, opts, config, started, open_, sinks=sinks)

    async def _lease_and_drive(
        self,
        thread_id: str,
        opts: ProcessOptions,
        config: ExecutionConfig,
        started: float,
        open_: Callable[[], Awaitable[OpenedRun]],
        *,
        sinks: Sequence[Callable[[Event], None]],
    ) -> AgentFinalResponse:
        """The one path of `process` and `aresume_execution`: the call's keys known to what
        writes for it, the run found under the thread's lease and driven (`ActiveRuns`)."""
        with self._secrets_in_use(opts):
            storage = self.storage
            return await self._runs.lease_and_drive(
                storage,
                thread_id,
                opts,
                config,
                started,
                open_,
                lambda setup: self._deps.run_deps(storage, opts, setup),
                sinks=sinks,
            )


# -- helpers --------------------------------------------------------------------------------


#: `get_history`'s "no limit" for the storage's `limit` (SQL's LIMIT takes a 64-bit integer).
_ALL_MESSAGES = 2**62


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
