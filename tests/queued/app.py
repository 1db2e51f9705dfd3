"""The application the queue tests run in worker processes (and in-process).

Each run's plan is a chain of `depth` steps of the `work` tool, tagged with the run's query
(queries are single words, e.g. `t07-r2`: thread 7, its run 2). The tool appends one line per
event to a log shared by every process: ``<event> <tag> <step_id> <attempt> <pid>`` with
event ``started`` or ``finished`` and a wall-clock time; lines are single small `O_APPEND`
writes, so concurrent writers never interleave them, and their order in the file is the
order they happened.

Worker processes come from a forkserver that imported this module (and art, litellm and
procrastinate) once, or from `art worker --instance tests/queued/app.py:from_env`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import art
from art.testing import ScriptedModel

SETTINGS_ENV = "ART_QUEUE_TEST_SETTINGS"


@dataclass
class Settings:
    """What a worker needs; plain data, so it pickles to the forkserver (or goes in an env var)."""

    storage: str
    log: str
    depth: int = 3
    step_s: float = 0.01
    llm_s: float = 0.0
    queue: dict[str, Any] = field(default_factory=dict)
    # Runs that kill their worker (os._exit), by query: "plan" in planning, "tool" in
    # their first step, each `poison_after_s` after it started.
    poison: dict[str, str] = field(default_factory=dict)
    poison_after_s: float = 0.5
    step_max_retries: int = 2

    def env(self) -> dict[str, str]:
        return {SETTINGS_ENV: json.dumps(asdict(self))}


_settings: Settings | None = None


def _log(event: str, tag: str, context: art.ExecutionContext) -> None:
    assert _settings is not None
    line = f"{event} {tag} {context.step_id} {context.attempt} {os.getpid()} {time.time()}\n"
    fd = os.open(_settings.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@art.tool
async def work(tag: str, prev: int, context: art.ExecutionContext) -> int:
    """Do one unit of a run's work.

    Args:
        tag: The run's query.
        prev: The previous step's output.

    Returns:
        prev + 1
    """
    assert _settings is not None
    _log("started", tag, context)
    if _settings.poison.get(tag) == "tool":
        await _die(_settings.poison_after_s)
    await asyncio.sleep(_settings.step_s)
    _log("finished", tag, context)
    return prev + 1


def query_of(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1].get("content") or "")
    return text.rpartition("Request: ")[2].strip()


def chain_plan(tag: str, depth: int) -> dict[str, Any]:
    steps = []
    for index in range(1, depth + 1):
        prev: Any = 0 if index == 1 else f"{{{{s{index - 1}.output}}}}"
        steps.append(
            {
                "id": f"s{index}",
                "tool": "work",
                "args": {"tag": tag, "prev": prev},
                "dependsOn": [] if index == 1 else [f"s{index - 1}"],
            }
        )
    return {"title": f"Chain {tag}", "steps": steps}


async def _die(after_s: float) -> None:
    """Kill this worker process, as a segfault or the OOM killer would."""
    await asyncio.sleep(after_s)
    os._exit(70)


def _planning(messages: list[dict[str, Any]], metadata: Any) -> Any:
    assert _settings is not None
    tag = query_of(messages)
    if _settings.poison.get(tag) == "plan":
        return _die(_settings.poison_after_s)
    return chain_plan(tag, _settings.depth)


def make_instance(settings: Settings) -> tuple[art.ArtInstance, ScriptedModel]:
    global _settings
    _settings = settings
    model = ScriptedModel(planning=_planning, synthesis="done", latency_s=settings.llm_s)
    inst = art.create_art_instance(
        model=model.model,
        tools=[work],
        storage=settings.storage,
        execution_config={"step_timeout_s": 600, "step_max_retries": settings.step_max_retries},
        queue=settings.queue,
    )
    return inst, model


def from_env() -> art.ArtInstance:
    """For `art worker --instance tests/queued/app.py:from_env` (settings in the env)."""
    settings = Settings(**json.loads(os.environ[SETTINGS_ENV]))
    return make_instance(settings)[0]


# -- child entry points (targets of forkserver processes) ------------------------------


def work_queue(settings: Settings, name: str, pipe: Connection) -> None:
    """A worker process: runs queued runs until SIGTERM; reports ("stopped",) at the end."""
    from art.queue import run_worker

    inst, model = make_instance(settings)

    async def main() -> None:
        async with inst:
            await run_worker(inst, name=name, signals=True)

    try:
        asyncio.run(main())
        pipe.send(("stopped",))
    finally:
        model.unregister()


def submit_and_serve(settings: Settings, runs: list[tuple[str, str]], pipe: Connection) -> None:
    """An application process on SQLite: submits `runs` (query, thread) with `inst.submit`,
    whose in-process worker runs the queue (other processes' runs too) until SIGTERM."""
    inst, model = make_instance(settings)

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with inst:
            handles = [await inst.asubmit(query, thread_id) for query, thread_id in runs]
            pipe.send(("submitted", [handle.id for handle in handles]))
            await stop.wait()

    try:
        asyncio.run(main())
        pipe.send(("stopped",))
    finally:
        model.unregister()
