"""Human in the loop: what a suspended run waits for, and how a decision completes a step.

A blocking tool returns `status="suspended"`; the executor stores a `Suspension` per
such step (each with its own id) and the run stops with `status == "suspended"`.
`resume_execution(thread_id, suspension_id, decision)` records the decision atomically
(`StorageAdapter.decide_suspension`; of two concurrent calls exactly one succeeds),
then applies it to the step without running the tool again:

- approved: the step completes; its output is the decision
  (`{"approved": True, "reason": ..., "modified_args": ...}`, `reason` and
  `modified_args` null when not given); a tool with `blocking_config={"run_on_approval":
  True}` instead runs again with the approved arguments and its output is the step's,
  and so does a tool that suspended to ask for input mid-call (`ASKS_FOR_INPUT`), with
  its own arguments and the decision's `modified_args` as `decision["answer"]`;
- rejected: the step fails with the reason; its dependents are skipped, and the
  synthesis prompt says the reviewer rejected it.

The run continues (the rest of the DAG, then the synthesis) once every suspension of
the run is decided; until then resuming returns `status == "suspended"` listing what
is still pending. Resuming an unknown or already-decided suspension raises
`SuspensionError` (code `SUSPENSION_NOT_FOUND` or `SUSPENSION_ALREADY_DECIDED`): it is
the caller's mistake, not a run-time failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, ValidationError

from art.core.models import ArtModel
from art.core.serialization import safe_stringify, storable_problem
from art.errors import RunErrorCode, SuspensionError, ToolErrorCode
from art.responses import StepRecord, utcnow
from art.storage.contract import Suspension
from art.tooling.contract import ToolResult

__all__ = [
    "Decision",
    "SuspendedState",
    "apply_decision",
    "latest_by_step",
    "parse_decision",
    "suspended_message",
]

INVALID_DECISION = "INVALID_DECISION"


class Decision(ArtModel):
    """A human's answer to a suspension."""

    model_config = ConfigDict(extra="allow")

    approved: bool
    reason: str | None = None
    modified_args: dict[str, Any] | None = None


class SuspendedState(ArtModel):
    """What `check_for_suspended_state` returns: the suspended run and its pending steps."""

    thread_id: str
    run_id: str
    query: str
    suspensions: list[Suspension]

    @property
    def suspension_id(self) -> str:
        """The first pending suspension (what `resp.metadata.suspension_id` names)."""
        return self.suspensions[0].suspension_id

    @property
    def suspension_ids(self) -> list[str]:
        return [s.suspension_id for s in self.suspensions]


def parse_decision(decision: Decision | Mapping[str, Any] | bool) -> Decision:
    """`decision` as a Decision; raises SuspensionError (INVALID_DECISION) when malformed."""
    if isinstance(decision, Decision):
        parsed = decision
    elif isinstance(decision, bool):
        return Decision(approved=decision)
    else:
        try:
            parsed = Decision.model_validate(decision)
        except ValidationError as exc:
            raise SuspensionError(
                'a decision is {"approved": true|false, "reason": "...", '
                '"modified_args": {...}}; got '
                f"{safe_stringify(decision, max_length=200)} ({exc.error_count()} problem(s))",
                code=INVALID_DECISION,
            ) from None
    # Refused before it is stored: a decision storage could not read back would leave
    # the thread unreadable.
    problem = storable_problem(parsed.model_dump())
    if problem is not None:
        raise SuspensionError(f"the decision {problem}", code=INVALID_DECISION)
    return parsed


def apply_decision(
    record: StepRecord, suspension: Suspension, *, run_on_approval: bool = False
) -> StepRecord:
    """Complete (approved) or fail (rejected) the waiting step of a decided suspension.

    With `run_on_approval` (the tool's `blocking_config`), an approved step is not
    completed: it is made ready to run the tool again with the approved arguments (the
    suspended call's, with `modified_args` over them) and the decision in its record.
    """
    if suspension.decision is None:
        raise SuspensionError(
            f"suspension {suspension.suspension_id!r} is not decided yet",
            code=RunErrorCode.SUSPENSION_NOT_FOUND,
        )
    decision = Decision.model_validate(suspension.decision)
    base = {"suspension_id": suspension.suspension_id}
    # Every field of the decision, `modified_args` null when not given: a plan may refer
    # to {{sN.output.modified_args}} whatever the reviewer answered.
    output: dict[str, Any] = decision.model_dump(mode="json")
    if decision.approved and run_on_approval:
        record.status = "pending"
        record.reason = None
        record.result = None
        record.ended_at = None
        # A tool that asked for input runs with its own arguments: the answer is the
        # decision's `modified_args`, which it reads from the decision.
        extra = {} if suspension.asks_for_input else decision.modified_args or {}
        record.args = {**suspension.args, **extra}
        record.decision = {**output, "suspension_id": suspension.suspension_id}
        if suspension.asks_for_input:
            record.decision["answer"] = decision.modified_args or {}
        return record
    if decision.approved:
        record.status = "completed"
        record.reason = None
        record.result = ToolResult(
            call_id=suspension.call_id,
            tool_name=suspension.tool_name,
            status="success",
            output=output,
            metadata={**base, "decision": "approved"},
        )
    else:
        why = decision.reason or "no reason given"
        record.status = "failed"
        record.reason = f"rejected by a human reviewer: {why}"
        record.result = ToolResult(
            call_id=suspension.call_id,
            tool_name=suspension.tool_name,
            status="error",
            output=output,
            error=record.reason,
            metadata={
                **base,
                "decision": "rejected",
                "rejected": True,
                "error_code": ToolErrorCode.PERMISSION_DENIED.value,
                "retryable": False,
            },
        )
    record.ended_at = suspension.decided_at or utcnow()
    return record


def latest_by_step(suspensions: Iterable[Suspension], run_id: str) -> dict[str, Suspension]:
    """The newest suspension of each step of run `run_id`."""
    found: dict[str, Suspension] = {}
    for suspension in sorted(suspensions, key=lambda s: s.created_at):
        if suspension.run_id == run_id:
            found[suspension.step_id] = suspension
    return found


def suspended_message(suspensions: Sequence[Suspension]) -> str:
    """The response text of a suspended run: what is waiting for whom."""
    if not suspensions:
        return "The run is waiting for a human decision."
    lines = [f"Waiting for a human decision on {len(suspensions)} step(s):"]
    for suspension in suspensions:
        prompt = suspension.prompt
        if isinstance(prompt, Mapping):
            prompt = (
                prompt.get("prompt") or prompt.get("question") or prompt.get("message") or prompt
            )
        text = safe_stringify(prompt, max_length=300) if prompt is not None else "(no prompt)"
        lines.append(
            f"- {suspension.step_id} ({suspension.tool_name}), suspension "
            f"{suspension.suspension_id}: {text}"
        )
    return "\n".join(lines)
