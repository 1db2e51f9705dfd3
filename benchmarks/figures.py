"""The figures: each group measures art and, where the workload is a DAG, LangGraph.

Every figure is a median over `settings.repeats` runs (after one warm-up run) or a
ratio of times measured in this same process run, so it holds on a noisy machine.
art and LangGraph runs alternate, so both see the same load.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import art_side, eager, langgraph_side, queued
from benchmarks.harness import Figure, Settings, collect_garbage, in_rounds, median, percentile
from benchmarks.workloads import (
    STEP_TOOL,
    Shape,
    chain,
    fan_out,
    layers,
    make_step_fn,
    plan_for,
    random_dag,
)

LANGGRAPH = "LangGraph"
US = 1e6
MS = 1e3


class Context:
    """What every figure needs: settings, whether LangGraph runs, a scratch folder."""

    def __init__(
        self, settings: Settings, scratch: Path, with_langgraph: bool, skip_reason: str
    ) -> None:
        self.settings = settings
        self.scratch = scratch
        self.with_langgraph = with_langgraph
        self.skip_reason = skip_reason
        self.clock = art_side.LlmClock()

    def langgraph_note(self) -> str | None:
        return None if self.with_langgraph else self.skip_reason


# -- engine overhead per step -------------------------------------------------------------


@dataclass
class _Workload:
    """One figure of the overhead group: a shape on one storage, and its samples."""

    storage_kind: str
    target: float
    shape: Shape
    instance: art_side.Bench
    per_step: list[float] = field(default_factory=list)
    cpu_per_step: list[float] = field(default_factory=list)
    gc_per_step: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    llms: list[float] = field(default_factory=list)
    llm_logging: list[float] = field(default_factory=list)
    full_collection_s: list[float] = field(default_factory=list)
    sampled_at: list[float] = field(default_factory=list)  # s after the group started


async def overhead(ctx: Context) -> list[Figure]:
    s = ctx.settings
    shapes = [chain(s.overhead_steps), fan_out(s.overhead_steps), random_dag(s.overhead_steps)]
    fn = make_step_fn(0)
    tool = art_side.step_tool(fn)
    workloads = []
    for storage_kind, target in (("memory", 100.0), ("sqlite", 300.0)):
        for shape in shapes:
            storage = (
                "memory://"
                if storage_kind == "memory"
                else f"sqlite:///{ctx.scratch / f'{shape.name}-{uuid.uuid4().hex[:8]}.db'}"
            )
            instance = art_side.create_instance(plan_for(shape), [tool], storage=storage)
            workloads.append(_Workload(storage_kind, target, shape, instance))
    graphs: dict[str, tuple[Any, float]] = {}
    if ctx.with_langgraph:
        graphs = {shape.name: langgraph_side.time_build(shape, fn) for shape in shapes}
    lg_samples: dict[str, list[float]] = {shape.name: [] for shape in shapes}
    lg_cpu: dict[str, list[float]] = {shape.name: [] for shape in shapes}
    for warm_up, work, sampled_at in in_rounds(workloads, s.repeats):
        shape = work.shape
        measure = await art_side.run_once(work.instance, ctx.clock, expected_steps=shape.size)
        if shape.name in graphs and work.storage_kind == "memory":
            lg_wall, lg_cpu_s = await langgraph_side.run_timed(graphs[shape.name][0], shape)
            if not warm_up:
                lg_samples[shape.name].append(lg_wall / shape.size * US)
                lg_cpu[shape.name].append(lg_cpu_s / shape.size * US)
        if warm_up:
            continue
        work.walls.append(measure.wall_s)
        work.llms.append(measure.llm_s)
        work.llm_logging.append(measure.llm_logging_s)
        work.per_step.append(measure.overhead_s() / shape.size * US)
        work.cpu_per_step.append(measure.overhead_cpu_s() / shape.size * US)
        work.gc_per_step.append(measure.gc_cpu_s / shape.size * US)
        work.full_collection_s.append(measure.full_collection_s)
        work.sampled_at.append(sampled_at)
    figures = []
    for work in workloads:
        shape = work.shape
        per_run = await art_side.full_collections_per_run(work.instance, s.gc_probe_runs)
        await work.instance.close()
        details: dict[str, Any] = {
            "steps": shape.size,
            "depth": shape.depth,
            # when each sample's run started, in seconds after the group's first run:
            # slow samples of several figures at the same moments were the machine
            "sampled_at_s": work.sampled_at,
            "wall_ms_median": median(work.walls) * MS,
            "llm_ms_median": median(work.llms) * MS,
            # litellm's logging of the two calls, after they returned: left out too
            "llm_logging_ms_median": median(work.llm_logging) * MS,
            "cpu_us_per_step_median": median(work.cpu_per_step),
            # of the CPU time above, the garbage collector's (see docs/performance.md)
            "gc_us_per_step_median": median(work.gc_per_step),
            "cpu_us_per_step_min": min(work.cpu_per_step),
            # Each measured run starts after a full collection (collect_garbage). Left
            # alone, the runs' garbage sets one off this often, at this cost:
            "full_collections_per_run": per_run,
            "full_collection_ms_median": median(work.full_collection_s) * MS,
            "full_collection_us_per_step_amortized": (
                per_run * median(work.full_collection_s) / shape.size * US
            ),
        }
        if shape.name in graphs:
            details["langgraph_build_ms"] = graphs[shape.name][1] * MS
        if lg_cpu[shape.name]:
            details["langgraph_cpu_us_per_step_median"] = median(lg_cpu[shape.name])
        lg = lg_samples[shape.name]
        figures.append(
            Figure(
                group="overhead",
                name="engine overhead per step",
                workload=f"{shape.name} / {work.storage_kind}",
                unit="µs/step",
                art=median(work.per_step),
                target=work.target,
                other=median(lg) if lg else None,
                other_label=(
                    LANGGRAPH if work.storage_kind == "memory" else f"{LANGGRAPH} (no persistence)"
                ),
                samples=work.per_step,
                other_samples=lg,
                details=details,
                note=ctx.langgraph_note(),
            )
        )
    return figures


# -- parallel efficiency ------------------------------------------------------------------


@dataclass
class _Variant:
    """One figure of the parallel group: the plan with async or with `def` tools."""

    name: str
    step_fn: Any  # the work of one step, `async def` or `def`
    in_threads: bool  # a `def` step, run in worker threads
    instance: art_side.Bench
    compiled: Any  # LangGraph's graph of the same plan, or None
    ratios: list[float] = field(default_factory=list)
    nominal_ratios: list[float] = field(default_factory=list)
    llm_ms: list[float] = field(default_factory=list)
    langgraph_ratios: list[float] = field(default_factory=list)
    floor_ratios: list[float] = field(default_factory=list)
    sampled_at: list[float] = field(default_factory=list)  # s after the group started


async def _bare_layers_s(
    depth: int, width: int, fn: Any, pool: concurrent.futures.Executor | None
) -> float:
    """Seconds the same layers take with no engine: each layer's calls gathered with
    asyncio (a `def` step in `pool`'s threads), the floor of this process and machine."""
    collect_garbage()
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    for _ in range(depth):
        if pool is None:
            await asyncio.gather(*(fn(n, []) for n in range(width)))
        else:
            await asyncio.gather(*(loop.run_in_executor(pool, fn, n, []) for n in range(width)))
    return time.perf_counter() - start


async def parallel(ctx: Context) -> list[Figure]:
    s = ctx.settings
    shape = layers(s.parallel_depth, s.parallel_width)
    dag_path_s = s.parallel_depth * s.parallel_sleep_s
    # The two LLM calls count as long as they took: the scripted latency plus litellm's
    # own work around each call, which the engine cannot shorten (the overhead figure
    # leaves LLM time out the same way). The nominal ratio is reported beside it.
    nominal_critical_s = dag_path_s + 2 * s.parallel_llm_latency_s
    variants = []
    pool = concurrent.futures.ThreadPoolExecutor(s.parallel_concurrency)
    for name, sync in (("async tools", False), ("sync tools in threads", True)):
        fn = make_step_fn(s.parallel_sleep_s, sync=sync)
        instance = art_side.create_instance(
            plan_for(shape),
            [art_side.step_tool(fn)],
            llm_latency_s=s.parallel_llm_latency_s,
            execution_config={"max_concurrency": s.parallel_concurrency},
        )
        compiled = langgraph_side.build_graph(shape, fn) if ctx.with_langgraph else None
        variants.append(_Variant(name, fn, sync, instance, compiled))
    for warm_up, variant, sampled_at in in_rounds(variants, s.repeats):
        measure = await art_side.run_once(variant.instance, ctx.clock, expected_steps=shape.size)
        if variant.compiled is not None:
            lg_wall = await langgraph_side.run_once(variant.compiled, shape)
        threads = pool if variant.in_threads else None
        bare_s = await _bare_layers_s(s.parallel_depth, s.parallel_width, variant.step_fn, threads)
        if warm_up:
            continue
        variant.floor_ratios.append(bare_s / dag_path_s)
        variant.ratios.append(measure.wall_s / (dag_path_s + measure.llm_s))
        variant.nominal_ratios.append(measure.wall_s / nominal_critical_s)
        variant.llm_ms.append(measure.llm_s * MS)
        variant.sampled_at.append(sampled_at)
        if variant.compiled is not None:
            variant.langgraph_ratios.append(lg_wall / dag_path_s)
    pool.shutdown()
    figures = []
    for variant in variants:
        await variant.instance.close()
        lg = variant.langgraph_ratios
        figures.append(
            Figure(
                group="parallel",
                name="parallel efficiency (wall / critical path)",
                workload=f"{shape.name}, {variant.name}, {s.parallel_sleep_s * MS:.0f} ms",
                unit="x",
                art=median(variant.ratios),
                target=1.10,
                other=median(lg) if lg else None,
                other_label=LANGGRAPH,
                samples=variant.ratios,
                other_samples=lg,
                details={
                    "critical_path_ms": dag_path_s * MS + median(variant.llm_ms),
                    "llm_calls_ms_median": median(variant.llm_ms),
                    "nominal_critical_path_ms": nominal_critical_s * MS,
                    "ratio_to_nominal_critical_path": median(variant.nominal_ratios),
                    # The same layers gathered with bare asyncio, no engine: what Python
                    # and this machine cost before the engine adds anything.
                    "bare_asyncio_ratio": median(variant.floor_ratios),
                    "langgraph_critical_path_ms": dag_path_s * MS,
                    "llm_latency_ms": s.parallel_llm_latency_s * MS,
                    "max_concurrency": s.parallel_concurrency,
                    "sampled_at_s": variant.sampled_at,
                },
                note=ctx.langgraph_note(),
            )
        )
    return figures


# -- LLM calls and prompt tokens per query -------------------------------------------------


async def llm_cost(ctx: Context) -> list[Figure]:
    from benchmarks.baseline import cost_of, price_baseline

    s = ctx.settings
    tool = art_side.payload_tool(s.cost_output_chars)
    tool_specs = [tool.schema.model_dump(mode="json", by_alias=True)]
    clock = art_side.LlmClock(keep_messages=True)
    query = "Collect every item of the todo list and summarise them."
    figures = []
    for size in s.cost_plan_sizes:
        shape = random_dag(size)
        plan = plan_for(shape)
        instance = art_side.create_instance(plan, [tool])
        with clock.installed():
            measure = await art_side.run_once(
                instance, clock, expected_steps=shape.size, query=query
            )
            art_calls = list(clock.calls)
            outputs = {r.step_id: r.output for r in measure.response.steps}
            baseline = await price_baseline(
                model=instance.scripted,
                query=query,
                plan=plan,
                tools=tool_specs,
                outputs=outputs,
                art_calls=art_calls,
                result_limit=60_000,
            )
        await instance.close()
        art_cost = cost_of(art_calls)
        meta = measure.response.metadata
        workload = f"{size} tool step{'s' if size > 1 else ''}"
        figures.append(
            Figure(
                group="llm_cost",
                name="LLM calls per query",
                workload=workload,
                unit="calls",
                art=float(meta.llm_calls),
                target=2.0,
                op="==",
                other=float(len(baseline.calls)),
                other_label="one call per step",
                details={"art_phases": [c.phase for c in art_calls]},
            )
        )
        figures.append(
            Figure(
                group="llm_cost",
                name="prompt tokens per query",
                workload=workload,
                unit="tokens",
                art=float(art_cost.prompt_tokens),
                other=float(baseline.prompt_tokens),
                other_label="one call per step",
                details={
                    "counter": "litellm.token_counter (cl100k_base)",
                    "art_per_call": [c.prompt_tokens for c in art_cost.calls],
                    "baseline_per_call": [c.prompt_tokens for c in baseline.calls],
                    "art_reported_prompt_tokens": meta.usage.prompt_tokens,
                    "art_scripted_words": art_cost.scripted_tokens,
                    "baseline_scripted_words": baseline.scripted_tokens,
                    "tool_output_chars": s.cost_output_chars,
                },
            )
        )
    return figures


# -- throughput ---------------------------------------------------------------------------


async def throughput(ctx: Context) -> list[Figure]:
    s = ctx.settings
    shape = fan_out(s.throughput_plan_width)
    instance = art_side.create_instance(
        plan_for(shape),
        [art_side.step_tool(make_step_fn(0))],
        llm_latency_s=s.throughput_llm_latency_s,
    )

    async def one(index: int) -> tuple[float, str | None]:
        started = time.perf_counter()
        try:
            response = await instance.aprocess("benchmark", f"tp-{index}-{uuid.uuid4().hex}")
            art_side.check_response(response, shape.size)
        except Exception as exc:
            return time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
        return time.perf_counter() - started, None

    await asyncio.gather(*(one(i) for i in range(min(20, s.throughput_threads))))  # warm-up
    ctx.clock.reset()
    rounds = max(1, min(s.repeats, 3))
    rates, p50s, p99s, errors = [], [], [], []
    first_error = None
    for _ in range(rounds):
        started = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(s.throughput_threads)))
        wall = time.perf_counter() - started
        latencies = [r[0] for r in results]
        failed = [r[1] for r in results if r[1]]
        first_error = first_error or (failed[0] if failed else None)
        rates.append(s.throughput_threads / wall)
        p50s.append(percentile(latencies, 50) * MS)
        p99s.append(percentile(latencies, 99) * MS)
        errors.append(float(len(failed)))
    await instance.close()
    workload = (
        f"{s.throughput_threads} threads at once, {shape.size}-step plan, "
        f"LLM {s.throughput_llm_latency_s * MS:.0f} ms"
    )
    details = {
        "rounds": rounds,
        "first_error": first_error,
        "min_latency_ms": 2 * s.throughput_llm_latency_s * MS,
    }
    common = {"group": "throughput", "workload": workload, "details": details}
    return [
        Figure(name="throughput", unit="runs/s", art=median(rates), samples=rates, **common),
        Figure(name="latency p50", unit="ms", art=median(p50s), samples=p50s, **common),
        Figure(name="latency p99", unit="ms", art=median(p99s), samples=p99s, **common),
        Figure(
            name="errors",
            unit="runs",
            art=max(errors),
            target=0.0,
            op="==",
            samples=errors,
            **common,
        ),
    ]


# -- memory -------------------------------------------------------------------------------


def _probe(engine: str, steps: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.memory_probe", "--engine", engine]
    done = subprocess.run(
        [*argv, "--steps", str(steps)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory probe ({engine}) failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


async def memory(ctx: Context) -> list[Figure]:
    steps = ctx.settings.memory_steps
    # Separate processes: running both at once changes neither's peak RSS.
    engines = ["art", "langgraph"] if ctx.with_langgraph else ["art"]
    results = await asyncio.gather(*(asyncio.to_thread(_probe, e, steps) for e in engines))
    art_result = results[0]
    lg_result = results[1] if ctx.with_langgraph else None
    return [
        Figure(
            group="memory",
            name="peak RSS growth",
            workload=f"one {steps:,}-step plan (random DAG)",
            unit="MB",
            art=art_result["growth_mb"],
            target=200.0,
            other=lg_result["growth_mb"] if lg_result else None,
            other_label=LANGGRAPH,
            details={"art": art_result, "langgraph": lg_result},
            note=ctx.langgraph_note(),
        )
    ]


# -- start-up -----------------------------------------------------------------------------


def _time_command(argv: list[str], repeats: int) -> list[float]:
    samples = []
    warmup = 1 if repeats > 1 else 0  # the first run warms the file cache
    for attempt in range(repeats + warmup):
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
        if attempt >= warmup:
            samples.append(elapsed)
    return samples


def _art_cli() -> list[str]:
    script = shutil.which("art")
    return [script] if script else [sys.executable, "-c", "from art.cli.app import main; main()"]


async def startup(ctx: Context) -> list[Figure]:
    repeats = ctx.settings.startup_repeats
    python = sys.executable
    bare = await asyncio.to_thread(_time_command, [python, "-c", "pass"], repeats)
    imports = await asyncio.to_thread(_time_command, [python, "-c", "import art"], repeats)
    lg_imports = (
        await asyncio.to_thread(_time_command, [python, "-c", "import langgraph.graph"], repeats)
        if ctx.with_langgraph
        else []
    )
    figures = [
        Figure(
            group="startup",
            name="start-up",
            workload="import art",
            unit="s",
            art=median(imports),
            target=0.3,
            other=median(lg_imports) if lg_imports else None,
            other_label="import langgraph.graph",
            samples=imports,
            other_samples=lg_imports,
            details={"python_startup_s": median(bare)},
            note=ctx.langgraph_note(),
        )
    ]
    try:
        help_samples = await asyncio.to_thread(_time_command, [*_art_cli(), "--help"], repeats)
        figures.append(
            Figure(
                group="startup",
                name="start-up",
                workload="art --help",
                unit="s",
                art=median(help_samples),
                target=0.5,
                samples=help_samples,
                details={"python_startup_s": median(bare), "command": _art_cli()},
            )
        )
    except RuntimeError as exc:
        figures.append(
            Figure(
                group="startup",
                name="start-up",
                workload="art --help",
                unit="s",
                target=0.5,
                error=str(exc),
            )
        )
    return figures


# Groups whose figures subtract the time spent inside litellm.acompletion.
TIMES_LLM_CALLS = frozenset({"overhead", "parallel"})

FigureFn = Callable[[Context], Awaitable[list[Figure]]]

GROUP_FUNCTIONS: dict[str, FigureFn] = {
    "overhead": overhead,
    "parallel": parallel,
    "llm_cost": llm_cost,
    "throughput": throughput,
    "memory": memory,
    "startup": startup,
    "queue": queued.queue,
    "eager": eager.eager,
}


async def run_groups(
    groups: list[str],
    settings: Settings,
    with_langgraph: bool,
    skip_reason: str = "langgraph not installed",
) -> list[Figure]:
    figures: list[Figure] = []
    art_side.quiet_logging()
    with tempfile.TemporaryDirectory(prefix="art-bench-") as scratch:
        ctx = Context(settings, Path(scratch), with_langgraph, skip_reason)
        for group in groups:
            print(f"measuring {group} ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            try:
                if group in TIMES_LLM_CALLS:
                    with ctx.clock.installed():
                        figures.extend(await GROUP_FUNCTIONS[group](ctx))
                else:
                    figures.extend(await GROUP_FUNCTIONS[group](ctx))
            except Exception as exc:  # one broken group must not hide the others
                figures.append(
                    Figure(
                        group=group,
                        name=group,
                        workload="-",
                        unit="",
                        error=f"{type(exc).__name__}: {exc}",
                    )
                )
            print(
                f"  {group} took {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return figures


__all__ = ["GROUP_FUNCTIONS", "STEP_TOOL", "Context", "run_groups"]
