"""Forks: a new run of a stored run's plan from one step on, reusing every output that
step cannot change.

A fork from step k keeps the stored records of the steps that finished and are neither k
nor downstream of it (nothing they computed depends on k), gives k its edited arguments,
and leaves k and everything downstream to run again. The new run is on the same thread,
with the same query, and names where it came from (`RunRecord.forked_from`).
"""

from __future__ import annotations

import uuid
from typing import Any

import networkx as nx

from art.core.spans import new_trace_id
from art.errors import ForkError, ThreadBusyError
from art.planning.plans import Plan, validate_plan
from art.storage.contract import ForkOrigin, RunRecord, StorageAdapter
from art.tooling.registry import ToolRegistry

__all__ = ["fork_record", "store_fork"]


async def store_fork(
    storage: StorageAdapter,
    registry: ToolRegistry,
    thread_id: str,
    run_id: str,
    step_id: str,
    *,
    args: dict[str, Any] | None = None,
) -> RunRecord:
    """Store the fork of run `run_id` of `thread_id` from `step_id` as the thread's active
    run, ready to be continued. ForkError for an unknown run or step or arguments that make
    the plan invalid, ThreadBusyError while a run is active on the thread."""
    source = await storage.get_run(run_id)
    if source is None or source.thread_id != thread_id:
        raise ForkError(f"no run {run_id!r} on thread {thread_id!r}", code="FORK_RUN_NOT_FOUND")
    record = fork_record(source, step_id, registry, args=args)
    async with storage.lease(thread_id):
        if await storage.get_active_run(thread_id) is not None:
            raise ThreadBusyError(thread_id)
        await storage.create_run(record)
    return record


def fork_record(
    source: RunRecord,
    step_id: str,
    registry: ToolRegistry,
    *,
    args: dict[str, Any] | None = None,
) -> RunRecord:
    """The record of a fork of `source` from `step_id` (with `args` for it, if given),
    ready to be continued; ForkError when the fork cannot run."""
    plan = source.plan
    if plan is None:
        raise ForkError(f"run {source.run_id!r} has no plan to fork", code="FORK_NO_PLAN")
    if step_id not in plan.step_ids:
        raise ForkError(
            f"run {source.run_id!r} has no step {step_id!r} (its steps: "
            f"{', '.join(plan.step_ids)})",
            code="FORK_STEP_NOT_FOUND",
        )
    data = plan.model_dump()
    if args is not None:
        for step in data["steps"]:
            if step["id"] == step_id:
                step["args"] = dict(args)
    forked = Plan.model_validate(data)
    redo = {step_id} | nx.descendants(forked.graph, step_id)
    kept = {
        sid: record.model_copy(deep=True)
        for sid, record in source.steps.items()
        if sid not in redo and record.status == "completed"
    }
    earlier = set(kept) - set(forked.step_ids)  # finished in a plan before a replan
    problems = validate_plan(forked, registry, completed=earlier)
    if problems:
        raise ForkError(
            "the forked plan is not valid: " + "; ".join(problems),
            code="FORK_INVALID",
            details=problems,
        )
    return RunRecord(
        run_id=uuid.uuid4().hex,
        thread_id=source.thread_id,
        trace_id=new_trace_id(),
        query=source.query,
        user_id=source.user_id,
        session_id=source.session_id,
        system_context=dict(source.system_context),
        metadata=dict(source.metadata),
        plan=forked,
        replans=source.replans,
        steps=kept,
        forked_from=ForkOrigin(run_id=source.run_id, step_id=step_id, args=args),
    )
