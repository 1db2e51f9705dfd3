"""The data of the `error` event: one shape for every failure (seed 004's ErrorHookData).

Each failure a run meets (a tool, an LLM call, storage, a hook or callback, synthesis) is
one `error` event, so one `on_error` call, with:

- `source`: what failed (`tool`, `llm`, `planning`, `storage`, `hook`, `callbacks`, `run`,
  `lease`);
- `code` and `message`;
- `phase` (`setup`, `planning`, `execute`, `replan`, `synthesis`) and `step_id` (None
  outside a step);
- `event_type`: the event during which it happened (a hook's or callback's event, else
  None);
- `recoverable`: whether the run goes on;
- `suggestion`: what to do about it.
"""

from __future__ import annotations

__all__ = ["error_data", "suggestion_for"]

# What to do about each code, in one sentence (seed 004's `suggestion`).
_SUGGESTIONS: dict[str, str] = {
    # tools
    "VALIDATION_ERROR": "check the arguments against the tool's input schema",
    "IO_ERROR": "check the file or network resource the tool uses, then run the query again",
    "CONFIG_ERROR": "fix the tool's configuration",
    "PERMISSION_DENIED": "grant the tool access to the resource, or use another one",
    "NOT_FOUND": "check the name or address the tool was given",
    "LLM_ASSIST_REQUIRED": "the tool needs the model's help: give the run a model it can reach",
    "UNKNOWN": "see the message; the tool's own logs may say more",
    "CONTRACT_VIOLATION": "fix the tool: it must return a ToolResult as the contract says",
    "NOT_STOPPED": "make the tool honour cancellation (await, or check context.cancelled)",
    # models
    "PROVIDER_NOT_CONFIGURED": "set the provider's API key or api_base",
    "PROVIDER_NOT_SUPPORTED": "use a model name litellm knows (provider/model)",
    "AUTHENTICATION_ERROR": "check the API key (it is masked in the message)",
    "RATE_LIMITED": "wait and retry, or lower max_concurrency",
    "MODEL_NOT_FOUND": "check the model name",
    "CONTEXT_LENGTH_EXCEEDED": (
        "lower tool_result_max_length or the thread's history, or use a model with a larger context"
    ),
    "NETWORK_ERROR": "check the connection to the provider, then retry",
    "TIMEOUT": "raise the time limit (llm_timeout_s, step_timeout_s) or retry",
    "PROVIDER_ERROR": "the provider failed; retry later",
    "INVALID_RESPONSE": "the provider's reply could not be read; retry, or try another model",
    # runs
    "PLAN_INVALID": "rephrase the query, use a stronger planning model, or raise max_plan_attempts",
    "STEP_FAILED": "see the failed step's error; on_step_failure='replan' lets the run go on",
    "THREAD_BUSY": "wait for the thread's run to end (retry_after_s), or use another thread",
    "CANCELLED": "the run was cancelled; send the query again to run it anew",
    "STORAGE_ERROR": "check that the storage is reachable and writable",
    "INTERNAL_ERROR": "this is a bug in art; the log has the traceback",
    "VETOED": "a hook refused the call; see the hook's reason",
    "ANSWER_INCOMPLETE": "raise the model's output limit (max_tokens) or ask for less",
    # hooks and callbacks
    "HOOK_FAILED": "fix the hook; a failing before-hook vetoes its action",
    "CALLBACK_FAILED": "fix the callback; the run goes on without it",
}


def suggestion_for(code: str | None) -> str:
    """What to do about a failure with `code`."""
    return _SUGGESTIONS.get(code or "", "see the message")


def error_data(
    source: str,
    code: str | None,
    message: str,
    *,
    recoverable: bool,
    phase: str | None = None,
    step_id: str | None = None,
    event_type: str | None = None,
    suggestion: str | None = None,
    **extra: object,
) -> dict[str, object]:
    """The `error` event's data for one failure."""
    return {
        "source": source,
        "code": code,
        "message": message,
        "phase": phase,
        "step_id": step_id,
        "event_type": event_type,
        "recoverable": recoverable,
        "suggestion": suggestion or suggestion_for(code),
        **extra,
    }
