"""The `eager` group: streamed planning with eager execution against the whole-plan run
and against the physical limit.

A ScriptedModel writes the plan at a set rate (one word-sized chunk per token) and the
steps' tool sleeps a set time. Three shapes: (a) independent slow steps, (b) a long
first step then short ones, (c) a chain. Per shape and rate:

- eager ÷ whole-plan wall: the same model takes as long to write a reply it does not
  stream, so the whole-plan run waits for the whole reply before its first step.
- wall ÷ physical limit: the limit is, over the steps, the moment the step's object is
  complete in the stream plus the longest path of sleeps from it to the end, plus the
  synthesis call (its writing time at the same rate).
- delay from a step's last byte to its tool starting: the tool's start minus the later
  of the moment its last chunk was sent and its dependencies' end (median and max).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import art
from benchmarks.harness import Figure, median

if TYPE_CHECKING:
    from benchmarks.figures import Context

MS = 1000.0
SHAPES = ("independent", "long first", "chain")
STEPS = 8
ANSWER = "The report is ready."


@dataclass
class _Timing:
    """What one run's tool saw: each step's start and end (perf_counter seconds)."""

    starts: dict[str, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)


def _sleeps(shape: str, scale: float) -> list[float]:
    """Each step's sleep in seconds."""
    if shape == "independent":
        return [1.0 * scale] * STEPS
    if shape == "long first":
        return [2.7 * scale] + [0.1 * scale] * (STEPS - 1)
    return [0.3 * scale] * STEPS


def _plan(shape: str, sleeps: list[float]) -> dict[str, Any]:
    steps = []
    for index, sleep_s in enumerate(sleeps, start=1):
        chained = shape == "chain" and index > 1
        steps.append(
            {
                "id": f"s{index}",
                "description": f"Fetch part {index} of the quarterly report",
                "tool": "fetch",
                "args": {
                    "part": f"{{{{s{index - 1}.output}}}}" if chained else f"part-{index}",
                    "ms": round(sleep_s * MS),
                },
                "dependsOn": [f"s{index - 1}"] if chained else [],
            }
        )
    return {"intent": "assemble the report", "title": "Quarterly report", "steps": steps}


def _tool(timing: _Timing) -> Any:
    @art.tool(name="fetch")
    async def fetch(context: art.ExecutionContext, part: str, ms: int) -> str:
        """Fetch one part of the report (takes `ms` milliseconds)."""
        step_id = str(context.step_id)
        timing.starts[step_id] = time.perf_counter()
        await asyncio.sleep(ms / MS)
        timing.ends[step_id] = time.perf_counter()
        return f"{part} fetched"

    return fetch


def _completion_chunks(plan_text: str) -> dict[str, int]:
    """For each step, the 1-based index of the chunk that completes its object."""
    from art.planning.stream import StepStreamReader
    from art.testing.scripted import stream_pieces

    reader, found = StepStreamReader(), {}
    for index, piece in enumerate(stream_pieces(plan_text), start=1):
        for step in reader.feed(piece):
            found[step["id"]] = index
    return found


def _longest_paths(plan: dict[str, Any], sleeps: list[float]) -> dict[str, float]:
    """Each step's longest path of sleeps to the end of the plan, its own included."""
    ids = [step["id"] for step in plan["steps"]]
    own = dict(zip(ids, sleeps, strict=True))
    dependents: dict[str, list[str]] = {sid: [] for sid in ids}
    for step in plan["steps"]:
        for dep in step["dependsOn"]:
            dependents[dep].append(step["id"])
    paths: dict[str, float] = {}
    for sid in reversed(ids):  # dependents come later in these plans
        paths[sid] = own[sid] + max((paths[d] for d in dependents[sid]), default=0.0)
    return paths


@dataclass
class _Sample:
    wall_s: float
    limit_s: float
    delays_ms: list[float]


async def _run(
    shape: str, rate: float, scale: float, eager: bool, model_factory: Callable[..., Any]
) -> _Sample:
    sleeps = _sleeps(shape, scale)
    plan = _plan(shape, sleeps)
    timing = _Timing()
    with model_factory(planning=plan, synthesis=ANSWER, tokens_per_s=rate) as model:
        async with art.create_art_instance(
            model=model.model, tools=[_tool(timing)], storage="memory://"
        ) as inst:
            options = {"execution_config": {"eager_execution": eager, "max_concurrency": 16}}
            started = time.perf_counter()
            response = await inst.aprocess("Assemble the quarterly report", "t", options=options)
            wall_s = time.perf_counter() - started
        if response.status != "success":
            raise RuntimeError(f"{shape} run ended {response.status}: {response.content}")
        call = model.calls_for("planning")[0]
    delays_ms: list[float] = []
    limit_s = 0.0
    if eager:
        assert call.sent_from is not None and call.reply is not None
        chunk_s = 1.0 / rate
        complete = _completion_chunks(call.reply)
        paths = _longest_paths(plan, sleeps)
        for step in plan["steps"]:
            sid = step["id"]
            arrived = call.sent_from + complete[sid] * chunk_s
            limit_s = max(limit_s, arrived - started + paths[sid])
            ready = max([arrived, *(timing.ends[d] for d in step["dependsOn"])])
            delays_ms.append((timing.starts[sid] - ready) * MS)
        limit_s += len(ANSWER.split()) * chunk_s  # the synthesis call's writing time
    return _Sample(wall_s, limit_s, delays_ms)


async def eager(ctx: Context) -> list[Figure]:
    from art.testing import ScriptedModel

    s = ctx.settings
    figures: list[Figure] = []
    for rate in s.eager_tokens_per_s:
        for shape in SHAPES:
            eager_runs: list[_Sample] = []
            whole_runs: list[_Sample] = []
            for repeat in range(s.eager_repeats + 1):
                runs = [
                    await _run(shape, rate, s.eager_time_scale, eager, ScriptedModel)
                    for eager in (True, False)
                ]
                if repeat:  # the first round warms up
                    eager_runs.append(runs[0])
                    whole_runs.append(runs[1])
            figures.extend(_figures(shape, rate, s.eager_time_scale, eager_runs, whole_runs))
    return figures


def _figures(
    shape: str, rate: float, scale: float, eager_runs: list[_Sample], whole_runs: list[_Sample]
) -> list[Figure]:
    workload = f"{shape}, {rate:g} tokens/s"
    eager_wall = median([r.wall_s for r in eager_runs])
    whole_wall = median([r.wall_s for r in whole_runs])
    delays = [d for r in eager_runs for d in r.delays_ms]
    limits = [r.wall_s / r.limit_s for r in eager_runs]
    ratios = [e.wall_s / w.wall_s for e, w in zip(eager_runs, whole_runs, strict=True)]
    sleeps_ms = [round(x * MS) for x in _sleeps(shape, scale)]
    details = {
        "eager_wall_s": [round(r.wall_s, 3) for r in eager_runs],
        "whole_plan_wall_s": [round(r.wall_s, 3) for r in whole_runs],
        "physical_limit_s": [round(r.limit_s, 3) for r in eager_runs],
        "sleeps_ms": sleeps_ms,
        "plan_steps": STEPS,
    }
    return [
        Figure(
            group="eager",
            name="wall, eager ÷ whole plan",
            workload=workload,
            unit="x",
            art=median(ratios),
            # The target holds where a long first step overlaps the plan's writing.
            target=0.6 if shape == "long first" and rate == 50 else None,
            samples=ratios,
            details={**details, "eager_wall_s_median": eager_wall, "whole_wall_s": whole_wall},
        ),
        Figure(
            group="eager",
            name="wall ÷ physical limit",
            workload=workload,
            unit="x",
            art=median(limits),
            target=1.05,
            samples=limits,
            details=details,
        ),
        Figure(
            group="eager",
            name="last byte -> tool start (median)",
            workload=workload,
            unit="ms",
            art=median(delays),
            target=5.0,
            samples=delays,
            details={"max_ms": max(delays), "steps_measured": len(delays)},
        ),
    ]
