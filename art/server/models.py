"""What the API reads and writes, in art's wire form (camelCase keys; snake_case accepted).

Resources are the engine's own records (`RunRecord`, `Suspension`, `ThreadSummary`,
`AgentFinalResponse`, `Plan`, `ToolSchema`) with a few fields the server adds. An event's
`data` is as emitted (the keys docs/events.md lists).
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from pydantic import ConfigDict, Field
from starlette.responses import Response

from art.core.models import ArtModel
from art.core.serialization import safe_stringify
from art.instance import ThreadState
from art.planning.plans import Plan
from art.responses import ConversationMessage, DisplayOutput
from art.storage.contract import RunRecord, Suspension, ThreadSummary
from art.tooling.contract import ToolSchema

__all__ = [
    "DecisionRequest",
    "PlanRequest",
    "PlanResource",
    "RunOptions",
    "RunRequest",
    "RunResource",
    "SuspensionList",
    "ThreadList",
    "ThreadResource",
    "ToolList",
    "wire_response",
]

_MAX_REASON_CHARS = 4_000


class _Request(ArtModel):
    model_config = ConfigDict(extra="forbid")


class RunOptions(_Request):
    """Per-run options (a subset of `ProcessOptions`: a client cannot change the model's
    connection, `llm_params`, which stays the server's)."""

    execution_config: dict[str, Any] | None = Field(
        default=None, description="Overrides of the instance's ExecutionConfig for this run."
    )
    user_id: str | None = Field(default=None, max_length=256)
    session_id: str | None = Field(default=None, max_length=256)


class RunRequest(_Request):
    """Start a run: the question, and options."""

    query: str = Field(min_length=1, description="The question (bounded by --max-query-chars).")
    options: RunOptions | None = None


class DecisionRequest(_Request):
    """A person's decision on a suspended (blocking) step."""

    approved: bool
    reason: str | None = Field(default=None, max_length=_MAX_REASON_CHARS)
    modified_args: dict[str, Any] | None = Field(
        default=None, description="Arguments the approver changed (recorded in the output)."
    )


class PlanRequest(_Request):
    """Plan a question without running anything."""

    query: str = Field(min_length=1)
    thread_id: str | None = Field(
        default=None, description="Plan as a follow-up in this thread (its history is used)."
    )


class RunResource(RunRecord):
    """A run as stored, with what this server adds."""

    display: list[DisplayOutput] = Field(
        default_factory=list, description="Outputs of the run's completed display steps."
    )
    suspensions: list[Suspension] = Field(
        default_factory=list, description="The run's pending suspensions."
    )
    executing_here: bool = Field(
        default=False, description="Whether this server process is executing the run now."
    )


class ThreadResource(ThreadState):
    """A thread: its runs (oldest first), active run, pending suspensions and history."""

    # ThreadState's runs, each as the resource that extends its RunRecord
    runs: list[RunResource] = Field(default_factory=list)  # type: ignore[assignment]
    history: list[ConversationMessage] = Field(default_factory=list)


class ThreadList(ArtModel):
    threads: list[ThreadSummary]


class SuspensionList(ArtModel):
    suspensions: list[Suspension]


class ToolList(ArtModel):
    tools: list[ToolSchema]


class PlanResource(ArtModel):
    plan: Plan
    mermaid: str = Field(description="The plan's DAG as a Mermaid flowchart.")


def _fallback(value: Any) -> Any:
    """Values JSON cannot carry (a tool's arbitrary object) are sent as text."""
    return safe_stringify(value)


def wire_json(value: Any) -> bytes:
    """`value` (models, lists, dicts) as art's wire JSON; never fails on odd tool outputs."""
    return pydantic_core.to_json(value, by_alias=True, fallback=_fallback)


def wire_response(value: Any, status_code: int = 200) -> Response:
    return Response(wire_json(value), status_code=status_code, media_type="application/json")
