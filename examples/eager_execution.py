"""Eager execution: steps start while the planner is still writing the plan.

    python examples/eager_execution.py

A scripted model writes the plan at 40 tokens (words) a second, about 1.6 s for this
plan; each lookup takes 1 s. Without eager execution the first lookup starts once the
whole plan is written; with `eager_execution=True` each step starts the moment its
part of the plan is complete, so the lookups overlap the writing. The script prints
when each step arrived, started and ended, and both runs' wall times.
"""

from __future__ import annotations

import asyncio
import time

import art
from art.testing import ScriptedModel


@art.tool
async def lookup(city: str) -> str:
    """How many people live in a city (a slow service)."""
    await asyncio.sleep(1.0)
    return {"Paris": "2.1 M", "Rome": "2.8 M", "Oslo": "0.7 M"}[city]


PLAN = {
    "intent": "compare city sizes",
    "title": "Three cities",
    "steps": [
        {
            "id": f"s{number}",
            "description": f"Population of {city}",
            "tool": "lookup",
            "args": {"city": city},
            "dependsOn": [],
        }
        for number, city in enumerate(("Paris", "Rome", "Oslo"), start=1)
    ],
}


async def run(model: ScriptedModel, eager: bool) -> float:
    async with art.create_art_instance(
        model=model.model, tools=[lookup], storage="memory://"
    ) as inst:
        options = {"execution_config": {"eager_execution": eager}}
        started = time.perf_counter()
        response = await inst.aprocess("Which city is biggest?", f"eager-{eager}", options=options)
        wall = time.perf_counter() - started
    print(f"eager_execution={eager}: {response.status} in {wall:.1f} s")
    if eager:
        first = min(step.arrived_at for step in response.steps)
        for step in response.steps:
            arrived = (step.arrived_at - first).total_seconds()
            began = (step.started_at - first).total_seconds()
            ended = (step.ended_at - first).total_seconds()
            print(
                f"  {step.step_id} {step.output}: arrived +{arrived:.1f} s, "
                f"started +{began:.1f} s, ended +{ended:.1f} s"
            )
        overlapped = response.steps[0].started_at < max(s.arrived_at for s in response.steps)
        print(f"  s1 started before the plan was complete: {overlapped}")
    return wall


async def main() -> None:
    with ScriptedModel(planning=PLAN, synthesis="Rome is the biggest.", tokens_per_s=40) as model:
        whole = await run(model, eager=False)
        eager = await run(model, eager=True)
    print(f"eager run took {eager / whole:.0%} of the whole-plan run")


if __name__ == "__main__":
    asyncio.run(main())
