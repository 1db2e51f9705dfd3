"""Running the workloads on art: the step tool, the scripted LLM, and the LLM-time clock."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import art
from benchmarks.harness import collect_garbage
from benchmarks.workloads import STEP_TOOL, StepFn, is_async

STEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "inputs": {"type": "array"},
    },
    "required": ["n"],
}


def step_tool(fn: StepFn) -> art.IToolExecutor:
    """An IToolExecutor around a shared step function (async, or sync run in a worker thread)."""
    schema = art.ToolSchema(
        name=STEP_TOOL,
        description="Benchmark step: wait as configured and return n.",
        input_schema=STEP_SCHEMA,
    )

    if is_async(fn):

        class AsyncStep(art.IToolExecutor):
            async def execute(self, input: dict[str, Any], context: Any) -> art.ToolResult:
                output = await fn(input["n"], input.get("inputs", []))
                return art.ToolResult(
                    call_id=context.call_id, tool_name=STEP_TOOL, status="success", output=output
                )

        tool: art.IToolExecutor = AsyncStep()
    else:

        class SyncStep(art.IToolExecutor):
            def execute(self, input: dict[str, Any], context: Any) -> art.ToolResult:
                output = fn(input["n"], input.get("inputs", []))
                return art.ToolResult(
                    call_id=context.call_id, tool_name=STEP_TOOL, status="success", output=output
                )

        tool = SyncStep()
    tool.schema = schema
    return tool


def payload_tool(chars: int) -> art.IToolExecutor:
    """A tool returning a text of `chars` characters: a stand-in for a search result."""
    text = ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]

    class Payload(art.IToolExecutor):
        schema = art.ToolSchema(
            name=STEP_TOOL,
            description="Benchmark step: return a fixed text for item n.",
            input_schema=STEP_SCHEMA,
        )

        async def execute(self, input: dict[str, Any], context: Any) -> art.ToolResult:
            return art.ToolResult(
                call_id=context.call_id,
                tool_name=STEP_TOOL,
                status="success",
                output={"item": input["n"], "text": text},
            )

    return Payload()


# -- the clock around the model ----------------------------------------------------------------


@dataclass
class LlmCall:
    phase: str | None
    seconds: float
    messages: list[dict[str, Any]]
    prompt_tokens: int | None


@dataclass
class LlmClock:
    """Wraps `ScriptedModel.request` (and the start of `request_stream`) to time, and
    optionally keep, every LLM call the engine makes. Time inside it is the LLM's, not the
    engine's. The scripted model does not go through litellm, so no logging of a call
    follows it (`logging_seconds` stays 0; a hosted model's litellm logs it after it
    returned, 0.5-1 ms a call).
    """

    keep_messages: bool = False
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    logging_seconds: float = 0.0
    logging_cpu_seconds: float = 0.0
    calls: list[LlmCall] = field(default_factory=list)

    def reset(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.logging_seconds = 0.0
        self.logging_cpu_seconds = 0.0
        self.calls.clear()

    @contextmanager
    def installed(self) -> Iterator[LlmClock]:
        from art.testing import ScriptedModel

        originals = {name: getattr(ScriptedModel, name) for name in ("request", "request_stream")}

        def timed(original: Any) -> Any:
            async def call(model: Any, request: Any) -> Any:
                started, cpu_started = time.perf_counter(), time.process_time()
                response = await original(model, request)
                elapsed = time.perf_counter() - started
                self.seconds += elapsed
                self.cpu_seconds += time.process_time() - cpu_started
                usage = getattr(response, "usage", None)
                self.calls.append(
                    LlmCall(
                        phase=request.metadata.get("art_phase"),
                        seconds=elapsed,
                        messages=list(request.messages) if self.keep_messages else [],
                        prompt_tokens=getattr(usage, "prompt_tokens", None),
                    )
                )
                return response

            return call

        for name, original in originals.items():
            setattr(ScriptedModel, name, timed(original))
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(ScriptedModel, name, original)


# -- instances and runs ---------------------------------------------------------------------


def quiet_logging() -> None:
    """Log warnings and errors only, to stderr: what an application in production sets.

    Unconfigured structlog prints every debug line (one per tool call) to stdout.
    """
    from art.logging import configure_logging

    configure_logging(level="WARNING")


def scripted_model(plan: dict[str, Any], latency_s: float) -> Any:
    """The benchmark's LLM. It has a price (zero), as a real model has an entry in
    litellm's price map."""
    from art.testing import ScriptedModel

    return ScriptedModel(
        planning=plan, synthesis="Done.", latency_s=latency_s, cost_per_token=(0.0, 0.0)
    )


@dataclass
class Bench:
    """An art instance on a scripted model; `close` releases both."""

    instance: Any
    scripted: Any

    async def aprocess(self, query: str, thread_id: str) -> Any:
        return await self.instance.aprocess(query, thread_id)

    async def close(self) -> None:
        close = getattr(self.instance, "aclose", None) or getattr(self.instance, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                await result
        self.scripted.unregister()


def create_instance(
    plan: dict[str, Any],
    tools: list[art.IToolExecutor],
    *,
    storage: str = "memory://",
    llm_latency_s: float = 0.0,
    execution_config: dict[str, Any] | None = None,
) -> Bench:
    scripted = scripted_model(plan, llm_latency_s)
    instance = art.create_art_instance(
        model=scripted.model,
        tools=tools,
        storage=storage,
        execution_config=execution_config or {},
    )
    return Bench(instance, scripted)


class GcClock:
    """CPU time the cyclic garbage collector spends, summed over every collection.

    A full collection walks every tracked object of the process (litellm's ~400,000
    when it is imported), so it costs about the same whatever triggered it.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full_collections = 0
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
            return
        self.seconds += time.process_time() - self._started
        if info.get("generation") == 2:
            self.full_collections += 1


GC_CLOCK = GcClock()


@dataclass
class RunMeasure:
    wall_s: float
    llm_s: float
    response: Any
    cpu_s: float = 0.0  # process CPU time of the run (all threads)
    llm_cpu_s: float = 0.0
    llm_logging_s: float = 0.0  # litellm's logging of the calls, after they returned (0 scripted)
    llm_logging_cpu_s: float = 0.0
    gc_cpu_s: float = 0.0  # of cpu_s, spent in the garbage collector
    full_collection_s: float = 0.0  # the full collection made before the run (not in it)

    def overhead_s(self) -> float:
        return self.wall_s - self.llm_s - self.llm_logging_s

    def overhead_cpu_s(self) -> float:
        return self.cpu_s - self.llm_cpu_s - self.llm_logging_cpu_s


class RunFailed(RuntimeError):
    pass


def check_response(response: Any, expected_steps: int | None) -> None:
    meta = response.metadata
    if meta.status != "success":
        error = meta.error.message if meta.error else "no error recorded"
        raise RunFailed(f"art run ended with status {meta.status}: {error}")
    if expected_steps is not None and meta.tool_calls != expected_steps:
        raise RunFailed(f"art ran {meta.tool_calls} tool calls, expected {expected_steps}")


async def run_once(
    instance: Bench, clock: LlmClock, *, expected_steps: int | None, query: str = "benchmark"
) -> RunMeasure:
    """One `aprocess` on a fresh thread, after a full collection (see `collect_garbage`);
    wall time, and the time spent in LLM calls and in litellm's logging of them (the
    previous run's last call may be logged during this one: each run is charged what ran
    inside its wall time)."""
    full_collection_s = collect_garbage()
    clock.reset()
    gc_started = GC_CLOCK.seconds
    started, cpu_started = time.perf_counter(), time.process_time()
    response = await instance.aprocess(query, f"bench-{uuid.uuid4().hex}")
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    gc_cpu = GC_CLOCK.seconds - gc_started
    check_response(response, expected_steps)
    return RunMeasure(
        wall_s=wall,
        llm_s=clock.seconds,
        response=response,
        cpu_s=cpu,
        llm_cpu_s=clock.cpu_seconds,
        llm_logging_s=clock.logging_seconds,
        llm_logging_cpu_s=clock.logging_cpu_seconds,
        gc_cpu_s=gc_cpu,
        full_collection_s=full_collection_s,
    )


async def full_collections_per_run(instance: Bench, runs: int) -> float:
    """Full collections per run over `runs` unmeasured runs back to back, none forced:
    how often the engine's own garbage sets one off in a long-lived process."""
    before = GC_CLOCK.full_collections
    for _ in range(runs):
        await instance.aprocess("benchmark", f"bench-{uuid.uuid4().hex}")
    return (GC_CLOCK.full_collections - before) / runs if runs else 0.0
