"""The REST resources: threads, runs, their event streams, suspensions, plans and tools."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi import Path as PathParam
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from art.core.json import JsonScalar
from art.engine.suspension import Decision
from art.errors import ForkError, ModelError, ThreadBusyError
from art.planning.plans import Plan
from art.responses import AgentFinalResponse, display_outputs
from art.server.context import ServerContext, get_context
from art.server.models import (
    DecisionRequest,
    ForkRequest,
    PlanRequest,
    PlanResource,
    QueuedRunResource,
    RunOptions,
    RunRequest,
    RunResource,
    SuspensionList,
    ThreadCreate,
    ThreadList,
    ThreadResource,
    ThreadUpdate,
    ToolList,
    wire_json,
    wire_response,
)
from art.server.principals import Principal, authenticated
from art.server.problems import Problem, ProblemBody
from art.server.settings import THREAD_ID_PATTERN, valid_thread_id
from art.server.sse import sse_event
from art.storage.contract import (
    ACTIVE_RUN_STATES,
    RunRecord,
    RunState,
    StoredEvent,
    ThreadQuery,
    ThreadSummary,
)

__all__ = ["event_stream", "router", "run_resource"]

ThreadId = Annotated[
    str,
    PathParam(
        pattern=THREAD_ID_PATTERN,
        max_length=128,
        description="1-128 letters, digits and `._:-`, starting with a letter or digit.",
    ),
]


async def _visible_thread(thread_id: ThreadId, ctx: Context, caller: Caller) -> str:
    await ctx.threads.check(caller, thread_id)
    return thread_id


#: A thread id of the path that the caller may see (404 for another user's thread).
VisibleThread = Annotated[str, Depends(_visible_thread)]
_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
RunId = Annotated[str, PathParam(pattern=_ID_PATTERN)]
SuspensionId = Annotated[str, PathParam(pattern=_ID_PATTERN)]
Context = Annotated[ServerContext, Depends(get_context)]
Caller = Annotated[Principal, Depends(authenticated)]
Wait = Annotated[
    bool,
    Query(description="Answer when the run ends (or suspends) with its response, not at once."),
]
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=20,
        description="The id of the last event received: the stream resumes after it.",
    ),
]
After = Annotated[
    int | None,
    Query(
        ge=0,
        description="Start after this event id (what Last-Event-ID does, for clients "
        "that cannot set headers).",
    ),
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemBody, "description": description}
    for status, description in {
        401: "An API key is needed or was not valid.",
        404: "No such resource.",
        409: "The thread is busy, or the resource is in the wrong state.",
        422: "The request is not valid.",
    }.items()
}
# How long a run stream waits for the last events of a run whose record says it ended.
_END_GRACE_S = 2.0
_SSE = {"content": {"text/event-stream": {}}, "description": "Server-sent events."}


#: The REST resources; the app includes them behind its key check.
router = APIRouter(responses=_ERRORS)
_WAITED: dict[int | str, dict[str, Any]] = {
    200: {"model": AgentFinalResponse, "description": "The run's response (wait=true)."}
}


# -- threads ----------------------------------------------------------------------------


@router.get("/threads", response_model=ThreadList, tags=["threads"])
async def list_threads(
    ctx: Context,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=32, description="`nextCursor` of the page before.")
    ] = None,
    status: Annotated[RunState | None, Query(description="The newest run's status.")] = None,
    user: Annotated[
        str | None, Query(max_length=64, description="The owner (an admin's filter).")
    ] = None,
    metadata: Annotated[
        str | None,
        Query(
            max_length=4_096,
            description='A JSON object, e.g. {"project": "apollo"}: each key must be in '
            "the thread's metadata with that value (a string, number, boolean or null).",
        ),
    ] = None,
) -> Response:
    """Threads, most recently updated first, a page at a time: a user's own, or (an
    admin) every thread, or one user's with `user`."""
    query = ThreadQuery(
        owner=user if caller.admin else caller.user,
        metadata=_metadata_filter(metadata),
        status=status,
        limit=limit,
        cursor=cursor,
    )
    try:
        page = await ctx.instance.storage.search_threads(query)
    except ValueError as exc:  # a cursor this server did not give
        raise Problem(422, str(exc)) from None
    return wire_response(ThreadList(threads=page.threads, next_cursor=page.next_cursor))


def _metadata_filter(raw: str | None) -> dict[str, JsonScalar]:
    if raw is None:
        return {}
    try:
        wanted = json.loads(raw)
    except ValueError:
        raise Problem(422, "metadata must be a JSON object") from None
    scalars = (str, int, float, bool, type(None))
    if not isinstance(wanted, dict) or not all(isinstance(v, scalars) for v in wanted.values()):
        raise Problem(422, "metadata must be a JSON object of strings, numbers, booleans or null")
    return wanted


@router.post("/threads", status_code=201, response_model=ThreadSummary, tags=["threads"])
async def create_thread(body: ThreadCreate, ctx: Context, caller: Caller) -> Response:
    """Create a thread (yours) with metadata, before its first run. An id already in use:
    409."""
    thread_id = body.thread_id or uuid.uuid4().hex
    owner = None if caller.admin else caller.user
    before = await ctx.instance.storage.get_thread(thread_id)
    if before is None:
        thread = await ctx.instance.storage.claim_thread(thread_id, owner, body.metadata)
        if thread.owner == owner and thread.metadata == body.metadata and thread.runs == 0:
            return wire_response(thread, status_code=201)
    raise Problem(409, f"the thread id {thread_id!r} is in use", code="THREAD_EXISTS")


@router.patch("/threads/{thread_id}", response_model=ThreadSummary, tags=["threads"])
async def update_thread(thread_id: VisibleThread, body: ThreadUpdate, ctx: Context) -> Response:
    """Set the metadata keys given (null removes one); the others stay."""
    thread = await ctx.instance.storage.update_thread(thread_id, body.metadata)
    if thread is None:
        raise Problem(404, f"no thread {thread_id!r}")
    return wire_response(thread)


@router.get("/threads/{thread_id}", response_model=ThreadResource, tags=["threads"])
async def get_thread(thread_id: VisibleThread, ctx: Context) -> Response:
    """A thread: its runs (oldest first) with steps and display outputs, the active run,
    its pending suspensions and the conversation history."""
    state = await ctx.instance.aget_state(thread_id)
    thread = await ctx.instance.storage.get_thread(thread_id)
    if thread is None and not state.runs and not state.history:
        raise Problem(404, f"no thread {thread_id!r}")
    runs = [await run_resource(ctx, record) for record in state.runs]
    active = next(
        (r for r in runs if state.active_run and r.run_id == state.active_run.run_id), None
    )
    resource = ThreadResource(
        thread_id=thread_id,
        runs=runs,
        active_run=active,
        suspensions=state.suspensions,
        history=state.history,
        owner=thread.owner if thread else None,
        metadata=thread.metadata if thread else {},
    )
    return wire_response(resource)


@router.delete("/threads/{thread_id}", status_code=204, response_class=Response, tags=["threads"])
async def delete_thread(thread_id: VisibleThread, ctx: Context) -> Response:
    """Delete a thread's runs, suspensions, history and events. Refused (409) while a run
    executes on it, here or in another process."""
    if ctx.runs.executing(thread_id) is not None:
        raise _thread_busy(thread_id)
    try:
        deleted = await ctx.instance.adelete_thread(thread_id)  # under the thread's lease
    except ThreadBusyError:
        raise _thread_busy(thread_id) from None
    except NotImplementedError as exc:  # a storage adapter that cannot delete
        raise Problem(501, str(exc)) from None
    if not deleted:
        raise Problem(404, f"no thread {thread_id!r}")
    ctx.journal.notify(thread_id)
    return Response(status_code=204)


def _thread_busy(thread_id: str) -> Problem:
    return Problem(409, f"a run is executing on thread {thread_id!r}", code="THREAD_BUSY")


# -- runs -------------------------------------------------------------------------------


async def run_resource(ctx: ServerContext, record: RunRecord) -> RunResource:
    """`record` with its display outputs, pending suspensions and where it executes."""
    display = display_outputs(record.steps.values(), ctx.instance.registry)
    suspensions = []
    if record.status == "suspended":
        pending = await ctx.instance.storage.list_suspensions(record.thread_id)
        suspensions = [s for s in pending if s.run_id == record.run_id]
    active = ctx.runs.executing(record.thread_id)
    return RunResource.model_construct(
        **dict(record),
        display=display,
        suspensions=suspensions,
        executing_here=active is not None and active.run_id == record.run_id,
    )


async def _get_run(ctx: ServerContext, thread_id: str, run_id: str) -> RunRecord:
    record = await ctx.instance.storage.get_run(run_id)
    if record is None or record.thread_id != thread_id:
        raise Problem(404, f"no run {run_id!r} on thread {thread_id!r}")
    return record


@router.get("/threads/{thread_id}/runs", response_model=list[RunResource], tags=["runs"])
async def list_runs(thread_id: VisibleThread, ctx: Context) -> Response:
    """The thread's runs, oldest first."""
    records = await ctx.instance.storage.list_runs(thread_id)
    if not records:
        await _require_thread(ctx, thread_id)
    return wire_response([await run_resource(ctx, record) for record in records])


async def _require_thread(ctx: ServerContext, thread_id: str) -> None:
    """404 unless the thread has a run or a message."""
    storage = ctx.instance.storage
    if not await storage.list_runs(thread_id) and not await storage.get_history(thread_id):
        raise Problem(404, f"no thread {thread_id!r}")


def _check_query(ctx: ServerContext, query: str) -> None:
    if not query.strip():
        raise Problem(422, "the query is empty", code="QUERY_EMPTY")
    limit = ctx.settings.max_query_chars
    if len(query) > limit:
        raise Problem(
            422,
            f"the query is {len(query)} characters long; this server takes at most {limit}",
            code="QUERY_TOO_LONG",
        )


def _check_execution_config(ctx: ServerContext, overrides: dict[str, object]) -> None:
    """Refuse overrides that would raise a limit the operator set (422)."""
    try:
        ctx.instance.config.execution_config.within(overrides)
    except ValidationError as exc:
        raise Problem(422, f"invalid executionConfig: {exc}", code="CONFIG_ERROR") from None
    except ValueError as exc:
        raise Problem(422, str(exc), code="LIMIT_RAISED") from None


@router.post(
    "/threads/{thread_id}/runs",
    status_code=202,
    response_model=RunResource | QueuedRunResource,
    responses={
        **_WAITED,
        202: {"description": "The run, started; or queued (multitaskStrategy enqueue)."},
    },
    tags=["runs"],
)
async def start_run(
    thread_id: ThreadId, body: RunRequest, ctx: Context, caller: Caller, wait: Wait = False
) -> Response:
    """Start a run of `query` on the thread (202 with the run), or with `wait=true` run it
    and answer with its response. A run already executing on the thread is a 409
    THREAD_BUSY, unless `multitaskStrategy` says to enqueue this one (202 with its id and
    status `queued`), interrupt the current one or roll it back. The same query as the
    thread's interrupted run continues that run."""
    _check_query(ctx, body.query)
    options = _run_options(ctx, caller, body.options)
    _check_webhook(ctx, body.webhook)
    await ctx.threads.claim(caller, thread_id)
    if body.multitask_strategy == "enqueue" and ctx.settings.enqueue_to_queue:
        handle = await ctx.runs.submit(thread_id, body.query, options or None, body.webhook)
        if wait:
            return wire_response(await run_resource(ctx, await handle.result()))
        resource = QueuedRunResource(run_id=handle.id, thread_id=thread_id)
        headers = {"Location": f"threads/{thread_id}/runs/{handle.id}"}
        return Response(wire_json(resource), 202, headers=headers, media_type="application/json")
    if body.multitask_strategy == "enqueue":
        queued = ctx.runs.enqueue(thread_id, body.query, options or None, body.webhook)
        if wait:
            return wire_response(await queued.wait(), secrets=ctx.secrets)
        resource = QueuedRunResource(run_id=queued.run_id, thread_id=thread_id)
        headers = {"Location": f"threads/{thread_id}/runs/{queued.run_id}"}
        return Response(wire_json(resource), 202, headers=headers, media_type="application/json")
    active = await ctx.runs.start(
        thread_id, body.query, options or None, body.multitask_strategy, body.webhook
    )
    return await _answer(ctx, active.thread_id, active.run_id, active.wait() if wait else None)


def _run_options(
    ctx: ServerContext, caller: Principal, options: RunOptions | None
) -> dict[str, object]:
    """A run's options from a request: within the operator's limits, and a user's runs
    carry their name."""
    found = options.model_dump(exclude_none=True) if options else {}
    if "execution_config" in found:
        _check_execution_config(ctx, found["execution_config"])
    return caller.run_options(found)


def _check_webhook(ctx: ServerContext, url: str | None) -> None:
    if url is not None and not ctx.runs.webhooks_allow(url):
        raise Problem(
            422,
            "this server does not call that webhook URL (its operator allows the prefixes "
            "given with --webhook-allow)",
            code="WEBHOOK_NOT_ALLOWED",
        )


async def _answer(
    ctx: ServerContext,
    thread_id: str,
    run_id: str | None,
    waiting: Awaitable[AgentFinalResponse] | None,
) -> Response:
    if waiting is not None:
        response: AgentFinalResponse = await waiting
        return wire_response(response, secrets=ctx.secrets)
    assert run_id is not None
    record = await _get_run(ctx, thread_id, run_id)
    resource = await run_resource(ctx, record)
    headers = {"Location": f"threads/{thread_id}/runs/{run_id}"}
    return Response(wire_json(resource), 202, headers=headers, media_type="application/json")


@router.get("/threads/{thread_id}/runs/{run_id}", response_model=RunResource, tags=["runs"])
async def get_run(thread_id: VisibleThread, run_id: RunId, ctx: Context) -> Response:
    """A run with its plan, step records (arguments, output, timings, attempts), display
    outputs, usage and cost, answer or error, and pending suspensions."""
    return wire_response(await run_resource(ctx, await _get_run(ctx, thread_id, run_id)))


@router.get("/threads/{thread_id}/runs/{run_id}/wait", response_model=RunResource, tags=["runs"])
async def wait_run(
    thread_id: VisibleThread,
    run_id: RunId,
    ctx: Context,
    timeout_s: Annotated[float, Query(gt=0, le=600)] = 60.0,
) -> Response:
    """The run once it is no longer executing (ended or suspended), or as it is after
    `timeout_s` (then its status is still `running`)."""
    record = await _get_run(ctx, thread_id, run_id)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while record.status == "running":
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            break
        active = ctx.runs.executing(thread_id)
        if active is not None and active.run_id == run_id:
            await asyncio.wait({active.task}, timeout=left)
        else:  # executing elsewhere, or interrupted: look again
            await asyncio.sleep(min(left, ctx.settings.poll_interval_s))
        record = await _get_run(ctx, thread_id, run_id)
    return wire_response(await run_resource(ctx, record))


@router.post("/threads/{thread_id}/runs/{run_id}/cancel", response_model=RunResource, tags=["runs"])
async def cancel_run(thread_id: VisibleThread, run_id: RunId, ctx: Context) -> Response:
    """Stop a run executing here (its tools are cancelled), or end one nobody executes
    (suspended, or interrupted by a crash); it ends failed with code CANCELLED."""
    record = await ctx.runs.cancel(thread_id, run_id, "cancelled through the API")
    return wire_response(await run_resource(ctx, record))


@router.post(
    "/threads/{thread_id}/runs/{run_id}/fork",
    status_code=202,
    response_model=RunResource,
    responses=_WAITED,
    tags=["runs"],
)
async def fork_run(
    thread_id: VisibleThread,
    run_id: RunId,
    body: ForkRequest,
    ctx: Context,
    caller: Caller,
    wait: Wait = False,
) -> Response:
    """Run the run again from `stepId` (with `args` for that step, or other `options`) as
    a new run of the thread: every finished step not downstream of it keeps its stored
    output; the rest runs. 202 with the new run (its `forkedFrom` names the original), or
    `wait=true`: its response. An unknown run or step: 404; arguments that make the plan
    invalid: 422; a run active on the thread: 409."""
    await _get_run(ctx, thread_id, run_id)
    _check_webhook(ctx, body.webhook)
    options = _run_options(ctx, caller, body.options)
    try:
        active = await ctx.runs.fork(
            thread_id, run_id, body.step_id, body.args, options or None, body.webhook
        )
    except ForkError as exc:
        status = 404 if exc.code in ("FORK_RUN_NOT_FOUND", "FORK_STEP_NOT_FOUND") else 422
        raise Problem(status, exc.message, code=str(exc.code)) from None
    except ThreadBusyError:
        raise _thread_busy(thread_id) from None
    return await _answer(ctx, thread_id, active.run_id, active.wait() if wait else None)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/events",
    response_class=EventSourceResponse,
    responses={200: _SSE},
    tags=["events"],
)
async def run_events(
    thread_id: VisibleThread,
    run_id: RunId,
    ctx: Context,
    last_event_id: LastEventId = None,
    after: After = None,
) -> Response:
    """The run's events as server-sent events, stored ones first: each has its `id` (its
    place in the thread's event log) and its name as the SSE `event`. Reconnecting with
    `Last-Event-ID` resumes after that event. The stream ends after the run's last
    `session:end` (a suspended run's stream stays open for the decision)."""
    await _get_run(ctx, thread_id, run_id)
    cursor = _cursor(last_event_id, after)
    return event_stream(ctx, _run_events(ctx, thread_id, run_id, cursor))


async def _run_events(
    ctx: ServerContext, thread_id: str, run_id: str, cursor: int | None
) -> AsyncIterator[StoredEvent]:
    ended_since: float | None = None
    async for event in ctx.feed.follow(thread_id, cursor):
        if event is None:  # nothing new for a while: has the run ended without an end?
            record = await ctx.instance.storage.get_run(run_id)
            if record is not None and record.status in ACTIVE_RUN_STATES:
                ended_since = None
                continue
            # A run's record says it ended a moment before its last events are stored
            # (by whichever process runs it): read on a little before giving up on them.
            now = asyncio.get_running_loop().time()
            if ended_since is None:
                ended_since = now
            elif now - ended_since >= _END_GRACE_S:
                return
            continue
        if event.run_id != run_id:
            continue
        yield event
        if event.name == "session:end" and event.data.get("status") != "suspended":
            return


@router.get(
    "/threads/{thread_id}/events",
    response_class=EventSourceResponse,
    responses={200: _SSE},
    tags=["events"],
)
async def thread_events(
    thread_id: VisibleThread,
    ctx: Context,
    last_event_id: LastEventId = None,
    after: After = None,
) -> Response:
    """Every event of the thread, of every run, as server-sent events; never ends by
    itself. Reconnecting with `Last-Event-ID` resumes after that event."""
    if not valid_thread_id(thread_id):  # the path pattern already said so; belt and braces
        raise Problem(422, "bad thread id")
    cursor = _cursor(last_event_id, after)

    async def events() -> AsyncIterator[StoredEvent]:
        async for event in ctx.feed.follow(thread_id, cursor):
            if event is not None:
                yield event

    return event_stream(ctx, events())


def _cursor(last_event_id: str | None, after: int | None) -> int | None:
    if last_event_id is not None and last_event_id.strip():
        try:
            value = int(last_event_id)
        except ValueError:
            raise Problem(422, "Last-Event-ID must be an event id (a number)") from None
        if value < 0:
            raise Problem(422, "Last-Event-ID must not be negative")
        return value
    return after


def event_stream(ctx: ServerContext, events: AsyncIterator[StoredEvent]) -> Response:
    """Stored events as an SSE response: `id` the event's seq, `event` its name, `data`
    the event as JSON."""

    async def encoded() -> AsyncIterator[ServerSentEvent]:
        async for event in events:
            yield sse_event(wire_json(event).decode(), event=event.name, id=str(event.seq))
            # Let other requests, and the check for a client that hung up, run between
            # events: a replay of stored events never waits for anything by itself.
            await asyncio.sleep(0)

    return ctx.streams.response(
        encoded(), ping_s=ctx.settings.ping_interval_s, headers={"Cache-Control": "no-cache"}
    )


# -- suspensions ------------------------------------------------------------------------


@router.get("/threads/{thread_id}/suspensions", response_model=SuspensionList, tags=["suspensions"])
async def list_suspensions(thread_id: VisibleThread, ctx: Context) -> Response:
    """The suspended run's pending suspensions (blocking steps waiting for a person)."""
    state = await ctx.instance.acheck_for_suspended_state(thread_id)
    if state is None:
        await _require_thread(ctx, thread_id)
    return wire_response(SuspensionList(suspensions=state.suspensions if state else []))


@router.post(
    "/threads/{thread_id}/suspensions/{suspension_id}/decision",
    status_code=202,
    response_model=RunResource,
    responses=_WAITED,
    tags=["suspensions"],
)
async def decide(
    thread_id: VisibleThread,
    suspension_id: SuspensionId,
    body: DecisionRequest,
    ctx: Context,
    wait: Wait = False,
) -> Response:
    """Approve or reject a suspended step (with a reason, and arguments the approver
    changed). Once every suspension of the run is decided the run continues: 202 with
    the run, or with `wait=true` its response. Unknown: 404; decided already: 409."""
    decision = Decision(
        approved=body.approved, reason=body.reason, modified_args=body.modified_args
    )
    active = await ctx.runs.resume(thread_id, suspension_id, decision)
    return await _answer(ctx, thread_id, active.run_id, active.wait() if wait else None)


# -- plans and tools --------------------------------------------------------------------


@router.post("/plans", response_model=PlanResource, tags=["plans"])
async def make_plan(body: PlanRequest, ctx: Context, caller: Caller) -> Response:
    """The plan for a question, as a DAG, without running anything (one LLM call, or
    more when the planner repairs its plan). A plan that stays invalid: 422."""
    _check_query(ctx, body.query)
    if body.thread_id is not None:
        if not valid_thread_id(body.thread_id):
            raise Problem(422, f"bad thread id {body.thread_id!r}")
        await ctx.threads.check(caller, body.thread_id)
    try:
        plan: Plan = await ctx.instance.aplan(body.query, body.thread_id)
    except Exception as exc:
        if isinstance(exc, ModelError):
            raise Problem(502, f"the model failed: {exc.message}", code=str(exc.code)) from None
        raise
    return wire_response(PlanResource(plan=plan, mermaid=plan.to_mermaid()))


@router.get("/tools", response_model=ToolList, tags=["tools"])
async def list_tools(ctx: Context) -> Response:
    """The tools the agent may plan with, with their input schemas and modes."""
    return wire_response(ToolList(tools=ctx.instance.registry.schemas()))
