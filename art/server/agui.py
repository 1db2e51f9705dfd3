"""The AG-UI protocol: `POST /ag-ui` runs the agent and streams AG-UI events (SSE).

A `RunAgentInput`'s last user message is the query, its `threadId` the thread. The run's
stored events become AG-UI events, built with the `ag-ui-protocol` package's own models
(the mapping is tabled in docs/server.md): RUN_STARTED; STATE_SNAPSHOT / STATE_DELTA
carrying the plan, the step records and the display outputs; STEP_STARTED / _FINISHED per
step; TOOL_CALL_START / _ARGS / _END / _RESULT per tool call; TEXT_MESSAGE_* for the
answer; RUN_FINISHED (outcome success, or interrupt for a suspended run) or RUN_ERROR.

A suspended run is answered with the next input's `resume` entries (`interruptId` = the
suspension id, `status` resolved or cancelled, `payload` {approved, reason, modifiedArgs}).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, TypedDict

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from fastapi import APIRouter, Depends
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from art.core.serialization import safe_stringify
from art.engine.suspension import Decision, apply_decision
from art.errors import RunErrorCode
from art.responses import DisplayOutput, StepRecord, display_outputs
from art.server.context import ServerContext, get_context
from art.server.principals import Principal, authenticated
from art.server.problems import Problem
from art.server.runs import ActiveRun
from art.server.settings import valid_thread_id
from art.server.sse import sse_event
from art.storage.contract import RunRecord, StoredEvent, Suspension

__all__ = ["DECISION_SCHEMA", "AgUiTranslator", "router"]

router = APIRouter(tags=["ag-ui"])
Context = Annotated[ServerContext, Depends(get_context)]
Caller = Annotated[Principal, Depends(authenticated)]

#: What an interrupt's answer (`ResumeEntry.payload`) holds.
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string"},
        "modifiedArgs": {"type": "object"},
    },
    "required": ["approved"],
}
_FINISHED = frozenset({"completed", "failed", "skipped", "cancelled"})
_RESULT_CHARS = 20_000


class _PatchOp(TypedDict):
    """One JSON Patch operation of a STATE_DELTA."""

    op: str
    path: str
    value: object


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class AgUiTranslator:
    """Turns one art run's stored events into a well-formed AG-UI event sequence."""

    def __init__(self, thread_id: str, agui_run_id: str, display_tools: frozenset[str]) -> None:
        self.thread_id = thread_id
        self.run_id = agui_run_id
        self.display_tools = display_tools
        self.finished = False
        self.state: dict[str, Any] = {
            "runId": None,
            "query": None,
            "status": "running",
            "plan": None,
            "steps": {},
            "display": [],
        }
        self._open_steps: set[str] = set()
        self._calls: dict[str, str] = {}  # step id -> its latest tool call id
        self._message_id: str | None = None
        self._usage: dict[str, Any] | None = None

    # -- the run's edges --------------------------------------------------------------------
    def started(
        self,
        run_input: RunAgentInput,
        run_id: str | None,
        record: RunRecord | None = None,
        display: Sequence[DisplayOutput] = (),
    ) -> list[BaseEvent]:
        """RUN_STARTED, and the state so far when the run already has a plan (a resume, or
        an interrupted run continued): `record` and its `display` outputs as they were
        before this session began."""
        events: list[BaseEvent] = [
            RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, input=run_input)
        ]
        self.state["runId"] = run_id
        self.state["query"] = None if run_input.resume else _query(run_input)
        if record is not None and record.plan is not None:
            self.state["query"] = record.query
            self.state["plan"] = record.plan.to_wire()
            self.state["steps"] = {
                step.id: {"status": "pending", "tool": step.tool} for step in record.plan.steps
            }
            for sid, r in record.steps.items():
                dumped = {**r.model_dump(mode="json"), "output": r.output}
                self.state["steps"][sid] = self._step_state(dumped)
            self.state["display"] = [
                {"step_id": d.step_id, "tool_name": d.tool_name, "output": d.output}
                for d in display
            ]
            # The calls a person answers in this session get their results in it.
            self._calls = {
                sid: r.result.call_id for sid, r in record.steps.items() if r.result is not None
            }
            events.append(StateSnapshotEvent(snapshot=self.state))
            events += self._answered_before(run_input, record)
        return events

    def _answered_before(self, run_input: RunAgentInput, record: RunRecord) -> list[BaseEvent]:
        """The results of the calls this input answered that the engine applied before the
        session began (every `resume` entry but the last is recorded on its own)."""
        answered = {entry.interrupt_id for entry in run_input.resume or ()}
        events: list[BaseEvent] = []
        for step in record.steps.values():
            result = step.result
            if result is None or result.metadata.get("suspension_id") not in answered:
                continue
            if step.status in ("completed", "failed"):
                error = step.reason if step.status == "failed" else None
                events += self._tool_result(result.call_id, {"result": step.output, "error": error})
        return events

    def interrupted(self, message: str) -> list[BaseEvent]:
        """The end of a run that stopped without ending (the server is shutting down)."""
        if self.finished:
            return []
        self.finished = True
        return [RunErrorEvent(message=message, code="INTERRUPTED")]

    # -- one stored event -------------------------------------------------------------------
    def translate(self, event: StoredEvent) -> list[BaseEvent]:
        if self.finished:
            return []
        data = event.data
        handler = getattr(self, "_on_" + event.name.replace(":", "_"), None)
        produced: list[BaseEvent] = handler(data) if handler is not None else []
        stamp = _millis(event.timestamp)
        for produced_event in produced:
            produced_event.timestamp = stamp
        return produced

    def _on_session_start(self, data: Mapping[str, object]) -> list[BaseEvent]:
        self.state["query"] = data.get("query")
        return []

    def _on_plan_created(self, data: Mapping[str, object]) -> list[BaseEvent]:
        plan = data.get("plan") or {}
        self.state["plan"] = plan
        # A streamed plan is created after its first steps started: keep what they did.
        known = self.state["steps"]
        steps = plan.get("steps", []) if isinstance(plan, dict) else []
        self.state["steps"] = {
            step["id"]: known.get(step["id"]) or {"status": "pending", "tool": step.get("tool")}
            for step in steps
            if isinstance(step, dict) and "id" in step
        }
        return [StateSnapshotEvent(snapshot=self.state)]

    _on_plan_updated = _on_plan_created

    def _on_step_status(self, data: Mapping[str, object]) -> list[BaseEvent]:
        step_id = str(data.get("step_id"))
        status = data.get("status")
        events: list[BaseEvent] = []
        if status == "in_progress" and step_id not in self._open_steps:
            self._open_steps.add(step_id)
            events.append(StepStartedEvent(step_name=step_id))
        elif status in _FINISHED and step_id in self._open_steps:
            self._open_steps.discard(step_id)
            events.append(StepFinishedEvent(step_name=step_id))
        op = "replace" if step_id in self.state["steps"] else "add"
        value = {**self.state["steps"].get(step_id, {}), **self._step_state(data)}
        self.state["steps"][step_id] = value
        delta: list[_PatchOp] = [{"op": op, "path": f"/steps/{_pointer(step_id)}", "value": value}]
        events.append(self._change(delta))
        return events

    def _on_resumed(self, data: Mapping[str, object]) -> list[BaseEvent]:
        """A person's decision: the result of the tool call they answered, and the step
        completed with the decision as its output (approved) or failed (rejected), as
        the engine applies it before the run goes on."""
        step_id = str(data.get("step_id"))
        step = self.state["steps"].get(step_id)
        if step is None or step.get("status") != "waiting" or data.get("decision") is None:
            return []
        call_id = self._calls.get(step_id)
        decided = apply_decision(
            StepRecord(step_id=step_id, tool=data.get("tool"), status="waiting"),
            Suspension(
                suspension_id=str(data.get("suspension_id")),
                thread_id=self.thread_id,
                run_id=str(self.state["runId"]),
                step_id=step_id,
                tool_name=str(data.get("tool")),
                call_id=call_id or "",
                decision=data["decision"],
            ),
        )
        update = self._step_state({"status": decided.status, "reason": decided.reason})
        events: list[BaseEvent] = []
        if decided.status == "completed":
            update["output"] = decided.output
        if call_id is not None:
            result = {"result": decided.output, "error": decided.reason}
            events += self._tool_result(call_id, result)
        step.update(update)
        path = f"/steps/{_pointer(step_id)}"
        events.append(self._change([{"op": "replace", "path": path, "value": step}]))
        return events

    def _change(self, patch: list[_PatchOp]) -> BaseEvent:
        """A delta, or the whole state when no snapshot was sent yet (a streamed plan's
        steps start before `plan:created`)."""
        if self.state["plan"] is None:
            return StateSnapshotEvent(snapshot=self.state)
        return _delta(patch)

    @staticmethod
    def _step_state(data: Mapping[str, object]) -> dict[str, object]:
        keys = ("status", "tool", "attempt", "attempts", "reason", "output", "started_at")
        return {key: data[key] for key in keys if data.get(key) is not None}

    def _on_tool_update(self, data: Mapping[str, object]) -> list[BaseEvent]:
        stage = data.get("stage")
        call_id = str(data.get("call_id"))
        if stage == "start":
            self._calls[str(data.get("step_id"))] = call_id
            args = json.dumps(data.get("args") or {}, ensure_ascii=False, default=str)
            return [
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(data.get("tool"))),
                ToolCallArgsEvent(tool_call_id=call_id, delta=args),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        if stage == "end":
            return self._tool_result(call_id, data)
        progress = {k: v for k, v in data.items() if k in ("step_id", "tool", "stage", "title")}
        progress.update({k: v for k, v in data.items() if k in ("metadata", "output")})
        return [CustomEvent(name="art.tool_progress", value={"call_id": call_id, **progress})]

    def _tool_result(self, call_id: str, data: Mapping[str, object]) -> list[BaseEvent]:
        # A `tool:update` end carries the output as `result` (or `error`), as emitted.
        if data.get("status") == "suspended":
            return []  # the answer is the person's, through the interrupt
        error = data.get("error")
        output = data.get("result")
        content = safe_stringify(output if not error else f"error: {error}", _RESULT_CHARS)
        events: list[BaseEvent] = [
            ToolCallResultEvent(
                message_id=f"{call_id}-result",
                tool_call_id=call_id,
                content=content or "(no output)",
                role="tool",
            )
        ]
        tool = str(data.get("tool"))
        if not error and (tool in self.display_tools or data.get("display")):
            shown = {"step_id": data.get("step_id"), "tool_name": tool, "output": output}
            self.state["display"].append(shown)
            events.append(CustomEvent(name="art.display", value=shown))
            events.append(self._change([{"op": "add", "path": "/display/-", "value": shown}]))
        return events

    def _on_buffer_flush(self, data: Mapping[str, object]) -> list[BaseEvent]:
        if data.get("phase") != "synthesis":
            return []
        chunks = data.get("chunks")
        text = "".join(str(chunk) for chunk in chunks) if isinstance(chunks, list) else ""
        if not text:
            return []
        events: list[BaseEvent] = []
        if self._message_id is None:
            self._message_id = uuid.uuid4().hex
            events.append(TextMessageStartEvent(message_id=self._message_id, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self._message_id, delta=text))
        return events

    def _on_suspended(self, data: Mapping[str, object]) -> list[BaseEvent]:
        self.state["pending"] = data.get("steps") or []
        return []

    def _on_session_end(self, data: Mapping[str, object]) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if self._message_id is not None:
            events.append(TextMessageEndEvent(message_id=self._message_id))
            self._message_id = None
        for step_id in sorted(self._open_steps):
            events.append(StepFinishedEvent(step_name=step_id))
        self._open_steps.clear()
        status = data.get("status")
        self.state["runId"] = data.get("run_id") or self.state["runId"]
        self.state["status"] = status
        usage = _usage(data.get("usage"))
        self.finished = True
        if status == "error":
            error = data.get("error")
            if not isinstance(error, dict):
                error = {}
            events.append(
                RunErrorEvent(
                    message=str(error.get("message") or "the run failed"),
                    code=error.get("code"),
                    usage=usage,
                )
            )
            return events
        events.append(StateSnapshotEvent(snapshot=self.state))
        outcome: RunFinishedSuccessOutcome | RunFinishedInterruptOutcome
        if status == "suspended":
            outcome = RunFinishedInterruptOutcome(interrupts=self._interrupts())
        else:
            outcome = RunFinishedSuccessOutcome()
        result = {"answer": data.get("answer"), "status": status, "runId": self.state["runId"]}
        events.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                result=result,
                outcome=outcome,
                usage=usage,
            )
        )
        return events

    def _interrupts(self) -> list[Interrupt]:
        interrupts = []
        for pending in self.state.get("pending") or []:
            prompt = pending.get("prompt")
            question = prompt.get("question") if isinstance(prompt, dict) else prompt
            interrupts.append(
                Interrupt(
                    id=str(pending.get("suspension_id")),
                    reason="tool_approval",
                    message=safe_stringify(question or f"approve {pending.get('tool')}?"),
                    tool_call_id=self._calls.get(str(pending.get("step_id"))),
                    response_schema=DECISION_SCHEMA,
                    metadata={"stepId": pending.get("step_id"), "args": pending.get("args")},
                )
            )
        if not interrupts:  # a suspension without its details still needs an answer
            interrupts.append(Interrupt(id="unknown", reason="tool_approval"))
        return interrupts


def _delta(patch: list[_PatchOp]) -> StateDeltaEvent:
    """A STATE_DELTA of JSON Patch operations (validated into the package's models)."""
    return StateDeltaEvent.model_validate({"delta": patch})


def _usage(raw: object) -> list[TokenUsage] | None:
    if not isinstance(raw, dict) or not raw.get("total_tokens"):
        return None
    return [
        TokenUsage(
            input_tokens=raw.get("prompt_tokens"),
            output_tokens=raw.get("completion_tokens"),
            total_tokens=raw.get("total_tokens"),
            cached_input_tokens=raw.get("cached_tokens") or None,
        )
    ]


def _query(run_input: RunAgentInput) -> str | None:
    for message in reversed(run_input.messages):
        if message.role == "user":
            content = message.content
            if isinstance(content, str):
                return content
            return "\n".join(
                str(getattr(part, "text", "")) for part in content if part.type == "text"
            )
    return None


def _decision(payload: object, status: str) -> Decision:
    data = payload if isinstance(payload, dict) else {}
    if status != "resolved":
        return Decision(approved=False, reason=data.get("reason") or "cancelled")
    modified = data.get("modifiedArgs", data.get("modified_args", data.get("editedArgs")))
    approved = data.get("approved", True) if isinstance(payload, dict) else bool(payload)
    return Decision(approved=bool(approved), reason=data.get("reason"), modified_args=modified)


@router.post(
    "/ag-ui",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "AG-UI events."}},
)
async def run_agent(run_input: RunAgentInput, ctx: Context, caller: Caller) -> Response:
    """Run the agent for an AG-UI client: the last user message is the query (or `resume`
    answers the interrupts of a suspended run); AG-UI events stream back as SSE."""
    thread_id = run_input.thread_id
    if not valid_thread_id(thread_id):
        raise Problem(422, f"bad threadId {thread_id!r}: 1-128 letters, digits and ._:-")
    if run_input.resume:
        await ctx.threads.check(caller, thread_id)
    else:
        await ctx.threads.claim(caller, thread_id)
    active, record = await _launch(ctx, run_input, caller)
    translator = AgUiTranslator(thread_id, run_input.run_id, ctx.display_tools)
    display = display_outputs(record.steps.values(), ctx.instance.registry) if record else []
    opening = translator.started(run_input, active.run_id, record, display)

    async def events() -> AsyncIterator[ServerSentEvent]:
        for event in opening:
            yield _sse(event)
        async for stored in ctx.feed.session(active):
            for event in translator.translate(stored):
                yield _sse(event)
            if translator.finished:
                return
        for event in translator.interrupted("the run stopped before it ended; send it again"):
            yield _sse(event)

    return ctx.streams.response(events(), ping_s=ctx.settings.ping_interval_s)


async def _launch(
    ctx: ServerContext, run_input: RunAgentInput, caller: Principal
) -> tuple[ActiveRun, RunRecord | None]:
    """Start (or resume) the run; with it, the run's record as it was before this session
    (None for a new run), so the opening snapshot precedes every event of the session."""
    thread_id = run_input.thread_id
    storage = ctx.instance.storage
    if run_input.resume:
        entries = list(run_input.resume)
        # Every interrupt must be pending before any is decided: one decision recorded and
        # then a refusal would leave the client unsure what happened.
        pending = {s.suspension_id for s in await storage.list_suspensions(thread_id)}
        unknown = [e.interrupt_id for e in entries if e.interrupt_id not in pending]
        if unknown:
            raise Problem(
                404,
                f"no pending interrupt {unknown[0]!r} on thread {thread_id!r}; nothing decided",
                code=RunErrorCode.SUSPENSION_NOT_FOUND,
            )
        # Each decision but the last is recorded first, each through the run manager (the
        # run stays its while it goes on); the last one continues the run.
        for entry in entries[:-1]:
            decision = _decision(entry.payload, entry.status)
            await (await ctx.runs.resume(thread_id, entry.interrupt_id, decision)).wait()
        before = await storage.get_active_run(thread_id)
        last = entries[-1]
        active = await ctx.runs.resume(
            thread_id, last.interrupt_id, _decision(last.payload, last.status)
        )
    else:
        query = _query(run_input)
        if not query or not query.strip():
            raise Problem(422, "the input has no user message to answer (and nothing to resume)")
        limit = ctx.settings.max_query_chars
        if len(query) > limit:
            raise Problem(
                422, f"the query is longer than {limit} characters", code="QUERY_TOO_LONG"
            )
        before = await storage.get_active_run(thread_id)
        options = caller.run_options({}) or None
        active = await ctx.runs.start(thread_id, query, options)
    if before is None or before.run_id != active.run_id or before.plan is None:
        return active, None
    return active, before


def _sse(event: BaseEvent) -> ServerSentEvent:
    return sse_event(event.model_dump_json(by_alias=True))
