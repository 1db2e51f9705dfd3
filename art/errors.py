"""Error codes and the exception tree.

Exceptions are sorted by who must act::

    ArtError
    ├── ConfigurationError      the developer's mistake, raised at construction
    │   └── ToolRegistrationError   a tool that cannot be registered (name, schema, duplicate)
    ├── PlanError               the planner could not produce a valid plan (lists every problem)
    ├── ModelError              a provider call failed (carries a ModelErrorCode, retry_after_s)
    ├── ThreadBusyError         another worker holds the thread's lease (code THREAD_BUSY)
    ├── StorageError            the storage cannot be opened or used (code STORAGE_ERROR)
    ├── SuspensionError         resume of an unknown or already-decided suspension
    ├── ForkError               a fork of an unknown run or step, or with arguments that do not fit
    └── ResponseError           raised by AgentFinalResponse.raise_for_status()

Failures at run time do not escape `process`: they come back as a response with
`metadata.status == "error"` and a `RunErrorCode`. Only configuration mistakes raise,
and storage that cannot be opened (there is nowhere to record a response).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "RETRYABLE_MODEL_ERRORS",
    "ArtError",
    "ConfigurationError",
    "ForkError",
    "ModelError",
    "ModelErrorCode",
    "PlanError",
    "ResponseError",
    "RunErrorCode",
    "StorageError",
    "SuspensionError",
    "ThreadBusyError",
    "ToolErrorCode",
    "ToolRegistrationError",
]


class ToolErrorCode(StrEnum):
    """Why a tool call failed (seed 000's ToolErrorCode, plus the engine's own)."""

    VALIDATION_ERROR = "VALIDATION_ERROR"
    IO_ERROR = "IO_ERROR"
    CONFIG_ERROR = "CONFIG_ERROR"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RATE_LIMITED = "RATE_LIMITED"
    NOT_FOUND = "NOT_FOUND"
    LLM_ASSIST_REQUIRED = "LLM_ASSIST_REQUIRED"
    TIMEOUT = "TIMEOUT"
    UNKNOWN = "UNKNOWN"
    # Not in the seed: a tool that broke the ToolResult contract, a call the run cancelled,
    # and a timed-out call that went on running past the stop grace period (abandoned).
    CONTRACT_VIOLATION = "CONTRACT_VIOLATION"
    CANCELLED = "CANCELLED"
    NOT_STOPPED = "NOT_STOPPED"


class ModelErrorCode(StrEnum):
    """Why an LLM call failed (seed 000's ModelErrorCode)."""

    PROVIDER_NOT_CONFIGURED = "PROVIDER_NOT_CONFIGURED"
    PROVIDER_NOT_SUPPORTED = "PROVIDER_NOT_SUPPORTED"
    AUTHENTICATION_ERROR = "AUTHENTICATION_ERROR"
    RATE_LIMITED = "RATE_LIMITED"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    CONTEXT_LENGTH_EXCEEDED = "CONTEXT_LENGTH_EXCEEDED"
    NETWORK_ERROR = "NETWORK_ERROR"
    TIMEOUT = "TIMEOUT"
    # Not in the seed: the provider's server failed (HTTP 5xx); retryable.
    PROVIDER_ERROR = "PROVIDER_ERROR"
    INVALID_RESPONSE = "INVALID_RESPONSE"
    UNKNOWN = "UNKNOWN"

    @property
    def retryable(self) -> bool:
        return self in RETRYABLE_MODEL_ERRORS


RETRYABLE_MODEL_ERRORS = frozenset(
    {
        ModelErrorCode.RATE_LIMITED,
        ModelErrorCode.NETWORK_ERROR,
        ModelErrorCode.TIMEOUT,
        ModelErrorCode.PROVIDER_ERROR,
    }
)


class RunErrorCode(StrEnum):
    """Why a run ended with `status == "error"` (besides a ModelErrorCode)."""

    PLAN_INVALID = "PLAN_INVALID"
    STEP_FAILED = "STEP_FAILED"
    THREAD_BUSY = "THREAD_BUSY"
    CANCELLED = "CANCELLED"
    SUSPENSION_NOT_FOUND = "SUSPENSION_NOT_FOUND"
    SUSPENSION_ALREADY_DECIDED = "SUSPENSION_ALREADY_DECIDED"
    STORAGE_ERROR = "STORAGE_ERROR"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    # A queued run's worker died while running it, `QueueConfig.max_worker_deaths` times.
    WORKER_DIED = "WORKER_DIED"
    # A `message:before` hook refused a planning or synthesis call.
    VETOED = "VETOED"
    # The answer did not end normally (cut by the output limit, filtered, or its stream
    # ended without a finish reason): the run is `partial`, not failed.
    ANSWER_INCOMPLETE = "ANSWER_INCOMPLETE"


class ArtError(Exception):
    """Base class of every exception art raises on purpose."""

    code: str = "ART_ERROR"

    def __init__(self, message: str, *, code: str | None = None, details: object = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details


class ConfigurationError(ArtError):
    """The developer's mistake: bad config, bad tool, unknown storage URL."""

    code = "CONFIG_ERROR"


class ToolRegistrationError(ConfigurationError):
    """A tool was refused at registration (bad name, invalid input_schema, duplicate)."""


class PlanError(ArtError):
    """No valid plan after every repair attempt; `problems` lists what was wrong."""

    code = RunErrorCode.PLAN_INVALID

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message, details=problems or [])
        self.problems: list[str] = list(problems or [])


class ModelError(ArtError):
    """A provider call failed after retries."""

    def __init__(
        self, message: str, code: ModelErrorCode, *, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.code = code
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_MODEL_ERRORS


class ThreadBusyError(ArtError):
    """Another worker is running this thread."""

    code = RunErrorCode.THREAD_BUSY

    def __init__(self, thread_id: str, *, retry_after_s: float | None = None) -> None:
        hint = f"; retry after {retry_after_s:.1f} s" if retry_after_s else ""
        super().__init__(f"thread {thread_id!r} is being run by another worker{hint}")
        self.thread_id = thread_id
        self.retry_after_s = retry_after_s


class StorageError(ArtError):
    """The storage cannot be opened or used; the message names the file or host (never a
    password) and says what to check."""

    code = RunErrorCode.STORAGE_ERROR


class SuspensionError(ArtError):
    """Resume of a suspension that does not exist or was already decided."""


class ForkError(ArtError):
    """A fork of a run that does not exist or has no plan, from a step it does not have,
    or with arguments that make its plan invalid (`details` lists the problems)."""

    code = "FORK_INVALID"


class ResponseError(ArtError):
    """Raised by `AgentFinalResponse.raise_for_status()` for a response with status "error"."""
