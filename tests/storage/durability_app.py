"""The application the durability tests run in child processes.

Children are forked from a multiprocessing forkserver that has imported this module (and so
art and litellm) once: a child starts in milliseconds instead of the seconds a fresh
interpreter spends importing litellm, so a test can kill and restart many of them. Each
child is still a real process of its own: SIGKILL ends it, and the kernel drops its file
locks and database sessions.

Tools append one line per event to a log file shared by every child:
``<event> <thread_id> <step_id> <attempt> <pid> <value>`` with event ``started`` or
``finished``. Lines are single small `O_APPEND` writes, so concurrent writers never
interleave them, and a SIGKILL cannot lose a line already written (it is in the kernel).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import art
from art.testing import ScriptedModel
from art.tools import AskHuman

CHAINS, DEPTH = 5, 6
QUERY = "run every chain"


def step_number(chain: int, index: int) -> int:
    return chain * DEPTH + index + 1


def expected_output(chain: int, index: int) -> int:
    return chain * 100 + index + 1


def chain_plan(chains: int = CHAINS, depth: int = DEPTH) -> dict[str, Any]:
    """`chains` independent chains of `depth` steps; each step adds 1 to the one before."""
    steps = []
    for chain in range(chains):
        for index in range(depth):
            number = chain * depth + index + 1
            prev: Any = chain * 100 if index == 0 else f"{{{{s{number - 1}.output}}}}"
            steps.append(
                {
                    "id": f"s{number}",
                    "description": f"chain {chain}, step {index}",
                    "tool": "work",
                    "args": {"chain": chain, "index": index, "prev": prev},
                    "dependsOn": [] if index == 0 else [f"s{number - 1}"],
                }
            )
    return {"intent": "work", "title": "Chains", "steps": steps}


def hitl_plan() -> dict[str, Any]:
    return {
        "title": "Ask first",
        "steps": [
            {"id": "s1", "description": "prepare", "tool": "work",
             "args": {"chain": 0, "index": 0, "prev": 0}},
            {"id": "s2", "description": "ask", "tool": "ask_human",
             "args": {"question": "Ship {{s1.output}}?", "options": ["yes", "no"]},
             "dependsOn": ["s1"]},
            {"id": "s3", "description": "ship", "tool": "work",
             "args": {"chain": 0, "index": 1, "prev": "{{s1.output}}"}, "dependsOn": ["s2"]},
        ],
    }  # fmt: skip


@dataclass
class Settings:
    """What a child needs; plain data, so it pickles to the forkserver."""

    storage: str
    log: str
    plan: dict[str, Any]
    step_s: float = 0.03
    synthesis_s: float = 1.0


_pipe: Connection | None = None
_settings: Settings | None = None
_entered: set[str] = set()  # threads whose tools started in this process
_changed: asyncio.Event | None = None  # set when a tool starts (worker only)
_gate: asyncio.Event | None = None  # tools wait for it (worker only)


def _notify(*message: Any) -> None:
    if _pipe is not None:
        _pipe.send(message)


def _log(event: str, context: art.ExecutionContext, value: Any = "-") -> None:
    assert _settings is not None
    line = f"{event} {context.thread_id} {context.step_id} {context.attempt} {os.getpid()} "
    fd = os.open(_settings.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}{value}\n".encode())
    finally:
        os.close(fd)


@art.tool
async def work(chain: int, index: int, prev: int, context: art.ExecutionContext) -> int:
    """Do one unit of work on a chain.

    Args:
        chain: The chain.
        index: The step's position in the chain.
        prev: The previous step's output.

    Returns:
        prev + 1
    """
    assert _settings is not None
    _log("started", context)
    _notify("started", context.step_id, context.attempt)
    _entered.add(context.thread_id)
    if _changed is not None and _gate is not None:
        _changed.set()
        await _gate.wait()
    await asyncio.sleep(_settings.step_s)
    _log("finished", context, prev + 1)
    _notify("finished", context.step_id, context.attempt)
    return prev + 1


def _planning(messages: Any, metadata: Any) -> dict[str, Any]:
    assert _settings is not None
    _notify("planning")
    return _settings.plan


async def _synthesis(messages: Any, metadata: Any) -> str:
    assert _settings is not None
    _notify("synthesis")
    # Held, so that a kill sent on "synthesis" lands before the run has ended: a child
    # that finished the run before the kill arrived would leave the next child a new run.
    await asyncio.sleep(_settings.synthesis_s)
    return "all chains done"


def make_instance(settings: Settings, **execution: Any) -> tuple[art.ArtInstance, ScriptedModel]:
    global _settings
    _settings = settings
    model = ScriptedModel(planning=_planning, synthesis=_synthesis)
    config = {"step_max_retries": 50, "retry_backoff_s": 0, **execution}
    inst = art.create_art_instance(
        model=model.model,
        tools=[work, AskHuman()],
        storage=settings.storage,
        execution_config=config,
    )
    return inst, model


def summary(response: art.AgentFinalResponse) -> dict[str, Any]:
    meta = response.metadata
    return {
        "status": meta.status,
        "content": response.content,
        "code": meta.error.code if meta.error else None,
        "run_id": meta.run_id,
        "suspension_ids": list(meta.suspension_ids),
        "steps": {s.step_id: (s.status, s.output, s.attempts) for s in response.steps},
    }


# -- child entry points (targets of forkserver processes) ------------------------------


def process_once(settings: Settings, query: str, thread_id: str, pipe: Connection) -> None:
    """One `process` call; reports progress on `pipe`, then ("done", summary)."""
    global _pipe
    _pipe = pipe
    inst, model = make_instance(settings)
    _notify("ready", os.getpid())
    try:
        response = inst.process(query, thread_id)
        _notify("done", summary(response))
    finally:
        inst.close()
        model.unregister()


def resume_suspended(settings: Settings, thread_id: str, pipe: Connection) -> None:
    """A new process finds the thread's suspension, decides it and finishes the run."""
    global _pipe
    _pipe = pipe
    inst, model = make_instance(settings)
    try:
        state = inst.check_for_suspended_state(thread_id)
        assert state is not None, "no suspended state found"
        response = inst.resume_execution(thread_id, state.suspension_id, {"approved": True})
        _notify("done", {"found": state.suspension_ids, **summary(response)})
    finally:
        inst.close()
        model.unregister()


def worker(settings: Settings, queries: dict[str, str], pipe: Connection) -> None:
    """A worker that attempts every thread at once (the PostgreSQL many-workers test).

    Sends ("attempted",) once each of its calls has either returned (THREAD_BUSY) or taken
    the thread and reached its first tool (held at the gate), then ("done", summaries).
    """
    inst, model = make_instance(settings, max_concurrency=4)

    async def main() -> list[dict[str, Any]]:
        global _changed, _gate
        _changed, _gate = asyncio.Event(), asyncio.Event()
        async with inst:
            tasks = [
                asyncio.create_task(inst.aprocess(query, thread_id))
                for thread_id, query in queries.items()
            ]
            for task in tasks:
                task.add_done_callback(lambda _: _changed.set())  # type: ignore[union-attr]
            while sum(t.done() for t in tasks) + len(_entered) < len(tasks):
                await _changed.wait()
                _changed.clear()
            pipe.send(("attempted",))
            await asyncio.to_thread(pipe.recv)  # "go": every worker has attempted every thread
            _gate.set()
            responses = await asyncio.gather(*tasks)
        return [
            {"thread_id": thread_id, **summary(response)}
            for thread_id, response in zip(queries, responses, strict=True)
        ]

    try:
        pipe.send(("done", asyncio.run(main())))
    finally:
        model.unregister()
