"""What `process` returns: AgentFinalResponse and its parts."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from art.core.binary import JsonData, JsonDict
from art.core.models import ArtModel
from art.core.usage import TokenUsage
from art.errors import ResponseError
from art.planning.plans import Plan
from art.tooling.contract import ToolResult

if TYPE_CHECKING:
    from art.tooling.registry import ToolRegistry

RunStatusName = Literal["success", "error", "partial", "suspended"]
StepStatus = Literal[
    "pending", "in_progress", "completed", "failed", "skipped", "waiting", "cancelled"
]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Source(ArtModel, extra="allow"):
    source_name: str
    url: str | None = None


class MessageMetadata(ArtModel):
    sources: list[Source] = Field(default_factory=list)
    ui_metadata: dict[str, Any] = Field(default_factory=dict)


class ConversationMessage(ArtModel):
    message_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    thread_id: str
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    timestamp: datetime = Field(default_factory=utcnow)
    metadata: MessageMetadata = Field(default_factory=MessageMetadata)


class RunError(ArtModel):
    """Why a run failed: a RunErrorCode or ModelErrorCode, a message, and any details."""

    code: str
    message: str
    problems: list[str] = Field(default_factory=list)
    retry_after_s: float | None = None


class ExecutionMetadata(ArtModel):
    thread_id: str
    trace_id: str
    run_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None  # the caller's `session_id` option, kept with the run
    status: RunStatusName
    total_duration_ms: float = 0.0
    llm_calls: int = 0
    tool_calls: int = 0
    usage: TokenUsage = Field(default_factory=TokenUsage)
    llm_cost: float | None = None
    error: RunError | None = None
    suspension_id: str | None = None
    suspension_ids: list[str] = Field(default_factory=list)
    # Things about the run worth a look although it did not fail (e.g. no tool ran).
    warnings: list[str] = Field(default_factory=list)
    # The model that wrote the answer, as the provider named it, and why it stopped
    # ("stop" when it ended the answer itself; "length" when cut by max_tokens).
    model: str | None = None
    finish_reason: str | None = None


class StepRecord(ArtModel):
    step_id: str
    tool: str | None = None
    status: StepStatus = "pending"
    result: ToolResult | None = None
    attempts: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # When the step's object was complete in the streamed planning reply (None when the
    # plan was not streamed, or the step came from a replan).
    arrived_at: datetime | None = None
    # The arguments the step ran with, after references were resolved and hooks applied.
    args: JsonDict | None = None
    # Why a step failed or was skipped, in words the synthesis and the user can read.
    reason: str | None = None
    # The human decision an approved blocking tool runs again under (run_on_approval).
    decision: JsonDict | None = None

    @property
    def output(self) -> object:
        return self.result.output if self.result is not None else None


class DisplayOutput(ArtModel):
    step_id: str
    tool_name: str
    output: JsonData = None
    # The tool's `display_config`, for the application's renderer.
    config: dict[str, Any] | None = None


class AgentFinalResponse(ArtModel):
    response: ConversationMessage
    metadata: ExecutionMetadata
    plan: Plan | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    display: list[DisplayOutput] = Field(default_factory=list)

    @property
    def content(self) -> str:
        return self.response.content

    @property
    def status(self) -> RunStatusName:
        return self.metadata.status

    def raise_for_status(self) -> AgentFinalResponse:
        """Raise ResponseError when the run ended with status "error"; return self otherwise."""
        if self.metadata.status == "error":
            err = self.metadata.error
            code = err.code if err else "UNKNOWN"
            message = err.message if err else "the run failed"
            raise ResponseError(f"{code}: {message}", code=code, details=err)
        return self


def display_outputs(steps: Iterable[StepRecord], registry: ToolRegistry) -> list[DisplayOutput]:
    """The completed display steps among `steps`, in order, each with its tool's
    `display_config` (`AgentFinalResponse.display`)."""
    found = []
    for record in steps:
        tool = registry.get(record.tool) if record.tool else None
        if record.status == "completed" and tool is not None and tool.schema.mode == "display":
            found.append(
                DisplayOutput(
                    step_id=record.step_id,
                    tool_name=record.tool or "",
                    output=record.output,
                    config=tool.schema.display_config,
                )
            )
    return found
