"""The same DAG workloads on LangGraph: one `StateGraph` node per step, an edge per dependency.

Each node calls the shared step function with its parents' outputs read from the
graph state and writes its own output back; a step with several parents waits on a
join edge (`add_edge([parents...], node)`), steps without parents start from
`START`, and steps nothing depends on lead to `END`. The graph is compiled once and
run with `ainvoke`; compiling is timed apart (a per-query plan would pay it too).
"""

from __future__ import annotations

import time
from importlib import metadata
from typing import Annotated, Any, TypedDict

from benchmarks.harness import collect_garbage
from benchmarks.workloads import Shape, StepFn, is_async, step_id


def langgraph_version() -> str | None:
    """The installed LangGraph version, or None when it is not installed."""
    try:
        import langgraph  # noqa: F401
    except ImportError:
        return None
    return metadata.version("langgraph")


def _merge(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    return {**left, **right}


class DagState(TypedDict):
    outputs: Annotated[dict[str, Any], _merge]


def _node(index: int, parents: tuple[int, ...], fn: StepFn) -> Any:
    name = step_id(index)
    parent_ids = [step_id(p) for p in parents]
    if is_async(fn):

        async def run_async(state: DagState) -> dict[str, Any]:
            outputs = state["outputs"]
            return {"outputs": {name: await fn(index, [outputs[p] for p in parent_ids])}}

        return run_async

    def run_sync(state: DagState) -> dict[str, Any]:  # LangGraph runs it in a worker thread
        outputs = state["outputs"]
        return {"outputs": {name: fn(index, [outputs[p] for p in parent_ids])}}

    return run_sync


def build_graph(shape: Shape, fn: StepFn) -> Any:
    """Compile the `StateGraph` for `shape` whose nodes call `fn`."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(DagState)
    for index, parents in enumerate(shape.deps):
        graph.add_node(step_id(index), _node(index, parents, fn))
    for index, parents in enumerate(shape.deps):
        name = step_id(index)
        if not parents:
            graph.add_edge(START, name)
        elif len(parents) == 1:
            graph.add_edge(step_id(parents[0]), name)
        else:
            graph.add_edge([step_id(p) for p in parents], name)
    for index in shape.sinks:
        graph.add_edge(step_id(index), END)
    return graph.compile()


def run_config(shape: Shape) -> dict[str, Any]:
    # One superstep per dependency level; LangGraph's default limit is 25.
    return {"recursion_limit": shape.depth + 10}


async def run_timed(compiled: Any, shape: Shape) -> tuple[float, float]:
    """Run the compiled graph once, after a full collection (as art's runs); return its
    wall and process CPU time in seconds."""
    collect_garbage()
    started, cpu_started = time.perf_counter(), time.process_time()
    final = await compiled.ainvoke({"outputs": {}}, config=run_config(shape))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if len(final["outputs"]) != shape.size:
        raise RuntimeError(
            f"LangGraph ran {len(final['outputs'])} of {shape.size} steps of {shape.name}"
        )
    return elapsed, cpu


async def run_once(compiled: Any, shape: Shape) -> float:
    """Run the compiled graph once; return the wall time in seconds."""
    return (await run_timed(compiled, shape))[0]


def time_build(shape: Shape, fn: StepFn) -> tuple[Any, float]:
    started = time.perf_counter()
    compiled = build_graph(shape, fn)
    return compiled, time.perf_counter() - started
