"""What the API reads and writes, in art's wire form (camelCase keys; snake_case accepted).

Resources are the engine's own records (`RunRecord`, `Suspension`, `ThreadSummary`,
`AgentFinalResponse`, `Plan`, `ToolSchema`) with a few fields the server adds. An event's
`data` is as emitted (the keys docs/events.md lists).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import AfterValidator, ConfigDict, Field
from starlette.responses import Response

from art.core.json import JsonObject, JsonValue
from art.core.models import ArtModel
from art.core.redaction import Secrets
from art.core.serialization import safe_stringify
from art.instance import ThreadState
from art.planning.plans import Plan
from art.responses import ConversationMessage, DisplayOutput
from art.server.settings import THREAD_ID_PATTERN
from art.storage.contract import RunRecord, Suspension, ThreadSummary
from art.tooling.contract import ToolSchema

__all__ = [
    "DecisionRequest",
    "ForkRequest",
    "PlanRequest",
    "PlanResource",
    "QueuedRunResource",
    "RunOptions",
    "RunRequest",
    "RunResource",
    "SuspensionList",
    "ThreadCreate",
    "ThreadList",
    "ThreadResource",
    "ThreadUpdate",
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
    webhook: str | None = Field(
        default=None,
        max_length=2_048,
        description="A URL called when the run ends or suspends (it must start with one of "
        "the prefixes the server allows: --webhook-allow).",
    )
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] = Field(
        default="reject",
        description="When a run is executing on the thread: `reject` (409 THREAD_BUSY), "
        "`enqueue` (run after it), `interrupt` (cancel it, keeping its finished steps, then "
        "run) or `rollback` (cancel and delete it, then run).",
    )


class ForkRequest(_Request):
    """Run a stored run again from one step, as a new run of the thread."""

    step_id: str = Field(max_length=200, description="The step to run again, with all downstream.")
    args: dict[str, Any] | None = Field(
        default=None, description="Arguments for that step instead of its own."
    )
    options: RunOptions | None = None
    webhook: str | None = Field(default=None, max_length=2_048)


class QueuedRunResource(ArtModel):
    """A run queued behind the thread's current run (`multitaskStrategy: enqueue`)."""

    run_id: str
    thread_id: str
    status: Literal["queued"] = "queued"


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

    owner: str | None = Field(default=None, description="The user who created the thread.")
    metadata: dict[str, Any] = Field(default_factory=dict)

    # ThreadState's runs, each as the resource that extends its RunRecord
    runs: list[RunResource] = Field(default_factory=list)  # type: ignore[assignment]
    history: list[ConversationMessage] = Field(default_factory=list)


class ThreadList(ArtModel):
    threads: list[ThreadSummary]
    next_cursor: str | None = Field(
        default=None, description="Give as `cursor` for the next page; null on the last."
    )


def _checked_metadata(metadata: JsonObject) -> JsonObject:
    """Metadata that every storage reads back equal: JSON with finite numbers, at most
    `MAX_METADATA_BYTES` and `MAX_METADATA_DEPTH` levels."""
    try:
        text = json.dumps(metadata, allow_nan=False)
    except ValueError:
        raise ValueError("metadata must not hold NaN or infinite numbers") from None
    except RecursionError:
        raise ValueError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels") from None
    if len(text.encode()) > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is larger than {MAX_METADATA_BYTES} bytes as JSON")
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
    if any(len(key) > 128 for key in metadata):
        raise ValueError("a metadata key is longer than 128 characters")
    return metadata


def _depth(value: JsonValue) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


#: Bounds of a thread's metadata.
MAX_METADATA_BYTES = 16_384
MAX_METADATA_DEPTH = 16
Metadata = Annotated[dict[str, Any], AfterValidator(_checked_metadata)]


class ThreadCreate(_Request):
    """Create a thread, with metadata, before its first run."""

    thread_id: str | None = Field(
        default=None,
        pattern=THREAD_ID_PATTERN,
        description="The new thread's id (default: a random one).",
    )
    metadata: Metadata = Field(default_factory=dict)


class ThreadUpdate(_Request):
    """Change a thread's metadata: the keys given are set, a key given null is removed."""

    metadata: Metadata


class SuspensionList(ArtModel):
    suspensions: list[Suspension]


class ToolList(ArtModel):
    tools: list[ToolSchema]


class PlanResource(ArtModel):
    plan: Plan
    mermaid: str = Field(description="The plan's DAG as a Mermaid flowchart.")


def _fallback(value: object) -> str:
    """Values JSON cannot carry (a tool's arbitrary object) are sent as text."""
    return safe_stringify(value)


def wire_json(value: object) -> bytes:
    """`value` (models, lists, dicts) as art's wire JSON; never fails on odd tool outputs."""
    return pydantic_core.to_json(value, by_alias=True, fallback=_fallback)


def wire_response(
    value: object, status_code: int = 200, *, secrets: Secrets | None = None
) -> Response:
    """`value` as a JSON response, with `secrets` masked when given (what a live response
    needs: a stored record has them masked already)."""
    body = wire_json(value)
    if secrets and (not secrets.json_plain or secrets.found_in(body.decode())):
        body = pydantic_core.to_json(secrets.mask(json.loads(body)))
    return Response(body, status_code=status_code, media_type="application/json")
