"""DAG shapes and the tool functions both engines run.

A `Shape` is engine-neutral: `deps[i]` lists the indexes of the steps step `i` waits
for. The art side turns it into a plan (wire format, as the planner would write it);
the LangGraph side into a `StateGraph`. Both call the same tool functions.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

STEP_TOOL = "bench_step"

StepFn = Callable[[int, list[Any]], Any]


@dataclass(frozen=True)
class Shape:
    """A DAG of `len(deps)` steps; `deps[i]` are the steps step `i` depends on."""

    name: str
    deps: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return len(self.deps)

    @cached_property
    def depth(self) -> int:
        """Steps on the longest dependency chain (the critical path in steps)."""
        level: list[int] = []
        for parents in self.deps:
            level.append(1 + max((level[p] for p in parents), default=0))
        return max(level, default=0)

    @cached_property
    def sinks(self) -> tuple[int, ...]:
        """Steps nothing depends on."""
        used = {p for parents in self.deps for p in parents}
        return tuple(i for i in range(self.size) if i not in used)


def step_id(index: int) -> str:
    return f"s{index + 1}"


def chain(n: int) -> Shape:
    """s1 -> s2 -> ... -> sn."""
    return Shape(f"chain-{n}", tuple(((i - 1,) if i else ()) for i in range(n)))


def fan_out(width: int) -> Shape:
    """`width` independent steps and one step that joins them all (width + 1 steps)."""
    deps: list[tuple[int, ...]] = [() for _ in range(width)]
    deps.append(tuple(range(width)))
    return Shape(f"fan-out-{width}", tuple(deps))


def random_dag(n: int, *, seed: int = 7, max_parents: int = 3) -> Shape:
    """Each step depends on 0..max_parents steps chosen uniformly among the earlier ones."""
    rng = random.Random(seed)
    deps: list[tuple[int, ...]] = []
    for i in range(n):
        k = rng.randint(0, min(max_parents, i))
        deps.append(tuple(sorted(rng.sample(range(i), k))))
    return Shape(f"random-dag-{n}", tuple(deps))


def layers(depth: int, width: int) -> Shape:
    """`depth` layers of `width` steps; every step depends on every step of the layer before."""
    deps: list[tuple[int, ...]] = []
    for layer in range(depth):
        previous = tuple(range((layer - 1) * width, layer * width)) if layer else ()
        deps.extend(previous for _ in range(width))
    return Shape(f"layers-{depth}x{width}", tuple(deps))


def plan_for(shape: Shape, *, tool: str = STEP_TOOL) -> dict[str, Any]:
    """The plan a planner would write for `shape`: each step passes its parents' outputs on.

    Arguments reference the parents' outputs (`{{sN.output}}`), so the engine resolves
    references the way it does for a real plan; LangGraph nodes read the same values
    from the graph state.
    """
    steps = []
    for i, parents in enumerate(shape.deps):
        steps.append(
            {
                "id": step_id(i),
                "description": f"step {i + 1} of {shape.name}",
                "tool": tool,
                "args": {"n": i, "inputs": [f"{{{{{step_id(p)}.output}}}}" for p in parents]},
                "dependsOn": [step_id(p) for p in parents],
            }
        )
    return {"intent": f"benchmark {shape.name}", "title": shape.name, "steps": steps}


def empty_plan() -> dict[str, Any]:
    return {"intent": "benchmark", "title": "empty", "steps": []}


# -- the tool functions both engines call -------------------------------------------------


def make_step_fn(sleep_s: float = 0.0, *, sync: bool = False) -> StepFn:
    """The work one step does: wait `sleep_s` (asyncio or, `sync=True`, a blocking sleep)
    and return `n`. With `sleep_s == 0` it returns at once without yielding."""
    if sync:

        def step_sync(n: int, inputs: list[Any]) -> int:
            if sleep_s:
                time.sleep(sleep_s)
            return n

        return step_sync

    if sleep_s:

        async def step_sleeping(n: int, inputs: list[Any]) -> int:
            await asyncio.sleep(sleep_s)
            return n

        return step_sleeping

    async def step_instant(n: int, inputs: list[Any]) -> int:
        return n

    return step_instant


def is_async(fn: StepFn) -> bool:
    return asyncio.iscoroutinefunction(fn)


async def call_step(fn: StepFn, n: int, inputs: list[Any]) -> Any:
    """Await an async step function; call a sync one in place (callers pick the thread)."""
    result = fn(n, inputs)
    if isinstance(result, Awaitable):
        return await result
    return result
