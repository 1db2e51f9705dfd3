"""The tool contract: IToolExecutor, ToolSchema, ToolResult and ExecutionContext (seed 003)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr

from art.core.binary import JsonData, JsonDict
from art.core.models import ArtModel
from art.core.spans import SpanContext

ExecutionMode = Literal["functional", "immediate", "blocking", "display"]
ToolStatus = Literal["success", "error", "suspended"]
ProgressStage = Literal["running", "streaming"]


class ToolExample(ArtModel):
    input: dict[str, Any]
    output: Any = None
    description: str | None = None


#: The `blocking_config` keys the engine reads; any others are the application's, carried
#: to the `suspended` event and the suspension for a UI to use.
RUN_ON_APPROVAL = "run_on_approval"
BLOCKING_PROMPT = "prompt"
#: A suspended result's metadata key: the tool (of any mode) stopped to ask a person for
#: input mid-call; once approved it runs again with its own arguments and the decision in
#: `ExecutionContext.decision`, the reviewer's `modified_args` as its `answer`.
ASKS_FOR_INPUT = "asks_for_input"


class ToolSchema(ArtModel):
    """How a tool is presented to the planner and validated before it runs.

    `blocking_config` (blocking tools only): `run_on_approval` (bool, see
    `runs_on_approval`) and `prompt` (the question for the reviewer when the tool's
    suspended result has no output); the whole dict goes with each suspension.
    `display_config` (display tools only) goes with each display output and its
    `tool:update` `end` event, for the application's renderer.
    """

    name: str
    description: str
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    output_schema: dict[str, Any] | None = None
    execution_mode: ExecutionMode = "functional"
    blocking_config: dict[str, Any] | None = None
    display_config: dict[str, Any] | None = None
    examples: list[ToolExample] = Field(default_factory=list)

    @property
    def mode(self) -> Literal["functional", "blocking", "display"]:
        """The execution mode with the `immediate` alias folded into `functional`."""
        return "functional" if self.execution_mode == "immediate" else self.execution_mode

    @property
    def runs_on_approval(self) -> bool:
        """A blocking tool that runs again, with the approved (possibly modified) arguments,
        once a human approves (`blocking_config={"run_on_approval": True}`); otherwise
        the decision is the step's output."""
        return self.mode == "blocking" and bool((self.blocking_config or {}).get(RUN_ON_APPROVAL))


class ToolResult(ArtModel):
    """What a tool returns. `output` is the data carrier; nothing else is read as data.

    `output` and `metadata` may hold bytes (attachments go in `metadata["attachments"]`
    as `{"name", "media_type", "data"}`); see `art.core.binary`.

    Unknown fields are refused, so `ToolResult(..., data=x)` fails loudly instead of
    dropping `x` (extra information belongs in `metadata`).
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    tool_name: str
    status: ToolStatus
    output: JsonData = None
    error: str | None = None
    metadata: JsonDict = Field(default_factory=dict)

    @property
    def error_code(self) -> str | None:
        return self.metadata.get("error_code")

    @property
    def retryable(self) -> bool:
        """An error result the tool marked as worth retrying (`metadata.retryable`)."""
        return self.status == "error" and bool(self.metadata.get("retryable"))


ProgressReporter = Callable[[ProgressStage, dict[str, Any]], None]


class CancellationToken:
    """A cancellation signal that sync tools (in worker threads) and async tools both read."""

    __slots__ = ("_cancelled", "_children", "_event", "_lock", "_parent", "reason")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Made by the first child(): one token is made per tool call, and a call's
        # token rarely has children of its own.
        self._children: set[CancellationToken] | None = None
        self._parent: CancellationToken | None = None
        self._cancelled = False
        # Made by the first wait(): a threading.Event costs more than the rest of the
        # token, and one token is made per tool call.
        self._event: threading.Event | None = None
        self.reason: str | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._cancelled:
                return
            self.reason = reason
            self._cancelled = True
            if self._event is not None:
                self._event.set()
            children, self._children = self._children, None
        for child in children or ():
            child.cancel(reason)

    def child(self) -> CancellationToken:
        """A token cancelled with this one that can also be cancelled on its own.

        Give each tool call its own child of the run's token: a call's timeout then
        cancels that call only, while cancelling the run still reaches every call.
        `detach()` it when the call is over.
        """
        token = CancellationToken()
        with self._lock:
            if not self._cancelled:
                if self._children is None:
                    self._children = set()
                self._children.add(token)
                token._parent = self
                return token
        token.cancel(self.reason or "cancelled")
        return token

    def detach(self) -> None:
        """Stop following the parent's cancellation (the call this token served is over),
        so a long run's token does not keep every finished call's token alive."""
        parent, self._parent = self._parent, None
        if parent is not None:
            with parent._lock:
                if parent._children is not None:
                    parent._children.discard(self)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def wait(self, timeout: float | None = None) -> bool:
        """Block a worker thread until cancelled or `timeout` passes; True when cancelled."""
        with self._lock:
            if self._cancelled:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)


class ExecutionContext(ArtModel):
    """What a tool knows about the call it serves.

    `message_id` is the id of the answer the run writes (`resp.response.message_id`),
    `agent` the persona's name, `extra` the run's `metadata` option (the application's
    data for its tools; treat it as read-only), `decision` the approval a blocking tool
    runs under when it runs on approval.
    """

    thread_id: str
    trace_id: str
    call_id: str
    step_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    message_id: str | None = None
    agent: str = "art"
    extra: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 1
    span: SpanContext | None = None
    # The human decision a blocking tool with `run_on_approval` runs under once approved
    # (`{"approved": True, "reason": ..., "modified_args": ...}`); None otherwise.
    decision: dict[str, Any] | None = None

    # Created on first use: a private attribute's default_factory costs pydantic an
    # inspect.signature() call per instance, and the engine always binds its own token.
    _cancellation: CancellationToken | None = PrivateAttr(default=None)
    _reporter: ProgressReporter | None = PrivateAttr(default=None)

    def bind(
        self,
        *,
        cancellation: CancellationToken | None = None,
        reporter: ProgressReporter | None = None,
    ) -> ExecutionContext:
        """Attach the run's cancellation token and progress reporter (engine use)."""
        if cancellation is not None:
            self._cancellation = cancellation
        self._reporter = reporter
        return self

    @property
    def cancellation(self) -> CancellationToken:
        if self._cancellation is None:
            self._cancellation = CancellationToken()
        return self._cancellation

    @property
    def cancelled(self) -> bool:
        """True once the run (or this call's timeout) asked the tool to stop."""
        return self.cancellation.cancelled

    def progress(
        self,
        title: str | None = None,
        metadata: Mapping[str, object] | None = None,
        *,
        output: object = None,
    ) -> None:
        """Report progress (seed 000's `ctx.metadata()`): a title and partial metadata.

        Becomes a `tool:update` event with stage `running`, or `streaming` when a
        partial `output` is given. Safe to call from a worker thread.
        """
        if self._reporter is None:
            return
        payload: dict[str, object] = {}
        if title is not None:
            payload["title"] = title
        if metadata:
            payload["metadata"] = dict(metadata)
        if output is not None:
            payload["output"] = output
        self._reporter("streaming" if output is not None else "running", payload)


class IToolExecutor(ABC):
    """A tool: set `schema`; write `execute` as `async def` or `def` (run in a worker thread)."""

    schema: ToolSchema

    @abstractmethod
    def execute(
        self, input: dict[str, Any], context: ExecutionContext
    ) -> ToolResult | Awaitable[ToolResult]:
        """Run the tool and return a ToolResult with the data in `output`."""

    @property
    def name(self) -> str:
        return self.schema.name

    # Short ways to build this tool's result for the call `context` serves.
    def ok(
        self,
        context: ExecutionContext,
        output: object = None,
        metadata: Mapping[str, object] | None = None,
    ) -> ToolResult:
        """A `success` result carrying `output`."""
        return ToolResult(
            call_id=context.call_id,
            tool_name=self.schema.name,
            status="success",
            output=output,
            metadata=metadata or {},
        )

    def fail(
        self,
        context: ExecutionContext,
        error: str,
        *,
        code: str = "UNKNOWN",
        retryable: bool = False,
        output: object = None,
        metadata: Mapping[str, object] | None = None,
    ) -> ToolResult:
        """An `error` result: `error` says what went wrong, `code` is a ToolErrorCode,
        `retryable` lets the engine call the tool again; `output` is any partial data."""
        return ToolResult(
            call_id=context.call_id,
            tool_name=self.schema.name,
            status="error",
            output=output,
            error=error,
            metadata={**(metadata or {}), "error_code": str(code), "retryable": retryable},
        )

    def ask(self, context: ExecutionContext, question: object = None) -> ToolResult:
        """A `suspended` result (blocking tools only): `question` is what a person is asked."""
        return ToolResult(
            call_id=context.call_id, tool_name=self.schema.name, status="suspended", output=question
        )
