"""The instance `art worker` runs in the queue benchmark (`benchmarks.queued`).

    art worker --instance benchmarks/queued_app.py:make_instance

Settings come from the environment (`ART_BENCH_QUEUE`, JSON): the storage URL, the queue
settings and the scripted LLM's latency. A query `hold <seconds>` plans one step that
sleeps that long (the take-over figure kills a worker during it); any other query plans
three instant tool steps.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

SETTINGS_ENV = "ART_BENCH_QUEUE"


def _plan(messages: list[dict[str, Any]], metadata: Any) -> dict[str, Any]:
    query = str(messages[-1].get("content") or "").rpartition("Request: ")[2]
    if query.startswith("hold "):
        steps = [{"id": "s1", "tool": "hold", "args": {"seconds": float(query.split()[1])}}]
    else:
        steps = [{"id": f"s{n}", "tool": "instant", "args": {"n": n}} for n in range(1, 4)]
    return {"title": "Queued", "steps": steps}


def make_instance() -> Any:
    import art
    from art.testing import ScriptedModel

    settings = json.loads(os.environ[SETTINGS_ENV])

    @art.tool
    def instant(n: int) -> int:
        """Return n at once.

        Args:
            n: A number.
        """
        return n

    @art.tool
    async def hold(seconds: float) -> float:
        """Sleep, then return how long.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return seconds

    model = ScriptedModel(
        planning=_plan,
        synthesis="Done.",
        latency_s=settings["llm_latency_s"],
        cost_per_token=(0.0, 0.0),
    )
    return art.create_art_instance(
        model=model.model,
        tools=[instant, hold],
        storage=settings["storage"],
        queue=settings["queue"],
    )
