"""Configuration: ExecutionConfig, ArtInstanceConfig, per-call options and env defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from art.core.models import ArtModel
from art.core.serialization import storable_problem
from art.errors import ConfigurationError
from art.llm.model import Model, model_name

if TYPE_CHECKING:
    from art.storage.contract import StorageAdapter

FailurePolicy = Literal["skip_dependents", "replan", "fail"]

MODEL_ENV = "ART_MODEL"
STORAGE_ENV = "ART_STORAGE"
API_BASE_ENV = "ART_API_BASE"
API_KEY_ENV_ENV = "ART_API_KEY_ENV"
TIMEOUT_ENV = "ART_TIMEOUT"
# Long enough for a planning call of a large model, short enough that a hung server
# fails the attempt instead of holding the run for the SDK's 600 s.
DEFAULT_LLM_TIMEOUT_S = 90.0
DEFAULT_LLM_STREAM_IDLE_TIMEOUT_S = 60.0
# Models art runs in this process (art.adapters.local): no network to hang, and a CPU model
# may load and write a plan for minutes, so the provider defaults above do not apply.
IN_PROCESS_MODEL_PREFIX = "local/"


class BufferConfig(ArtModel):
    """How streamed synthesis tokens are grouped into `buffer:flush` events (seed 004)."""

    max_size: int = Field(10, ge=1)
    max_time_ms: float = Field(100.0, gt=0)
    strategy: Literal["size", "time", "hybrid"] = "hybrid"
    auto_flush: bool = True


class ExecutionConfig(ArtModel):
    """How a run executes. Set per instance; override per call through `options`."""

    model_config = ConfigDict(extra="forbid")

    tool_result_max_length: int = Field(60_000, ge=100)
    max_concurrency: int = Field(16, ge=1)
    step_timeout_s: float | None = Field(60.0, gt=0)
    # How long a timed-out or cancelled tool call may take to stop before it is abandoned.
    tool_stop_grace_s: float = Field(5.0, ge=0)
    step_max_retries: int = Field(2, ge=0)
    # Whether a step attempt cut short by its process dying counts against
    # step_max_retries when the run is continued. Queued runs turn it off: the queue
    # bounds worker deaths itself (QueueConfig.max_worker_deaths).
    count_interrupted_attempts: bool = True
    retry_backoff_s: float = Field(0.5, ge=0)
    max_plan_attempts: int = Field(3, ge=1)
    max_replans: int = Field(1, ge=0)
    on_step_failure: FailurePolicy = "skip_dependents"
    llm_max_retries: int = Field(3, ge=0)
    # Seconds one LLM call attempt may take (a `timeout` in llm_params takes precedence);
    # None: DEFAULT_LLM_TIMEOUT_S for a provider, no limit for an in-process model.
    llm_timeout_s: float | None = Field(None, gt=0)
    # A streamed call fails when no chunk arrives for this many seconds; None:
    # DEFAULT_LLM_STREAM_IDLE_TIMEOUT_S for a provider, no limit for an in-process model.
    llm_stream_idle_timeout_s: float | None = Field(None, gt=0)
    # The longest single wait before a retry, whatever the provider's Retry-After says.
    llm_max_retry_delay_s: float = Field(60.0, ge=0)
    # No retry of an LLM call starts later than this many seconds after its first attempt
    # did; the last error is returned instead. A call so takes at most this plus one
    # attempt's time limit.
    llm_retry_budget_s: float = Field(120.0, ge=0)
    # Stream the planning reply and start each step once its object is complete and valid.
    eager_execution: bool = False
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    # A plan with more steps, or a longer title, goes back to the planner for repair.
    max_plan_steps: int = Field(10_000, ge=1)
    max_plan_title_chars: int = Field(1_000, ge=1)
    # A longer answer is cut to this many characters (the run ends partial).
    max_answer_chars: int = Field(1_000_000, ge=1)

    def merged(self, overrides: ExecutionConfig | Mapping[str, object] | None) -> ExecutionConfig:
        """This config with the fields `overrides` sets explicitly replaced."""
        if overrides is None:
            return self
        if isinstance(overrides, ExecutionConfig):
            overrides = overrides.model_dump(exclude_unset=True)
        data = self.model_dump()
        data.update(ExecutionConfig.model_validate(overrides).model_dump(exclude_unset=True))
        return ExecutionConfig.model_validate(data)

    def within(self, overrides: Mapping[str, object] | None) -> ExecutionConfig:
        """This config with `overrides` applied, refusing any that would raise one of its
        limits (`CEILING_FIELDS`; a value may only go down): what a server's client may
        change. Raises ValueError naming every limit the overrides would raise."""
        merged = self.merged(overrides)
        raised = [
            f"{name} {_shown(getattr(merged, name))} > {_shown(getattr(self, name))}"
            for name in CEILING_FIELDS
            if _limit(merged, name) > _limit(self, name)
        ]
        if raised:
            raise ValueError(
                "execution_config may lower this server's limits, not raise them: "
                + ", ".join(raised)
            )
        return merged

    def llm_time_limits(self, model: str) -> tuple[float | None, float | None]:
        """Seconds an attempt on `model` may take, and may go without a streamed chunk.

        None is no limit: the defaults of an in-process model, whose call has no network
        to hang on and may take minutes on a CPU.
        """
        if model.startswith(IN_PROCESS_MODEL_PREFIX):
            return self.llm_timeout_s, self.llm_stream_idle_timeout_s
        attempt = DEFAULT_LLM_TIMEOUT_S if self.llm_timeout_s is None else self.llm_timeout_s
        idle = self.llm_stream_idle_timeout_s
        return attempt, DEFAULT_LLM_STREAM_IDLE_TIMEOUT_S if idle is None else idle


#: The fields of ExecutionConfig whose larger value lets a run do more (take longer, call
#: the model or a tool more often, keep more); None is no limit. A server's client may
#: lower them, never raise them (`ExecutionConfig.within`).
CEILING_FIELDS = (
    "tool_result_max_length",
    "max_concurrency",
    "step_timeout_s",
    "tool_stop_grace_s",
    "step_max_retries",
    "max_plan_attempts",
    "max_replans",
    "llm_max_retries",
    "llm_timeout_s",
    "llm_stream_idle_timeout_s",
    "llm_max_retry_delay_s",
    "llm_retry_budget_s",
    "max_plan_steps",
    "max_plan_title_chars",
    "max_answer_chars",
)
# What None means for a limit: the provider default where there is one, else no limit.
_NONE_MEANS = {
    "llm_timeout_s": DEFAULT_LLM_TIMEOUT_S,
    "llm_stream_idle_timeout_s": DEFAULT_LLM_STREAM_IDLE_TIMEOUT_S,
}


def _limit(config: ExecutionConfig, name: str) -> float:
    value = getattr(config, name)
    if value is None:
        return _NONE_MEANS.get(name, float("inf"))
    return float(value)


def _shown(value: object) -> str:
    return "null (no limit)" if value is None else repr(value)


class Persona(ArtModel):
    """Who the agent is: extra guidance for the planning and synthesis prompts."""

    name: str = "art"
    planning: str = ""
    synthesis: str = ""


class ProcessOptions(ArtModel):
    """Per-call options for `process`, `aprocess`, `stream` and `resume_execution`.

    `tools` are the run's tools: a registered tool's name, `"*"` for every registered
    tool, or a tool (an `IToolExecutor` or a function) added for this call only; without
    it the run has the instance's tools. `system_context` holds variables every LLM
    call of the run sees (planning, reasoning, synthesis); `metadata` is the
    application's own data, which no LLM sees: hooks get it as `context.metadata`,
    tools as `context.extra`. Both are stored with the run.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    execution_config: dict[str, Any] | None = None
    user_id: str | None = None
    session_id: str | None = None
    llm_params: dict[str, Any] | None = None
    tools: list[Any] | None = None
    system_context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    # The run's id: a new run gets it, and the thread's active run is continued only if
    # it has this id (not matched by query). Queued runs carry one so a retried job
    # continues its own run.
    run_id: str | None = Field(default=None, min_length=1, max_length=200)


class QueueConfig(ArtModel):
    """How queued runs (`submit`, `art worker`) are taken and run; see docs/deployment.md."""

    model_config = ConfigDict(extra="forbid")

    # Workers take runs from this queue only.
    name: str = Field("art", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")
    # Run submitted runs in the submitting process too. None: yes on SQLite and memory
    # storage, no on PostgreSQL (where `art worker` processes run them).
    in_process: bool | None = None
    # Runs one worker executes at the same time.
    concurrency: int = Field(8, ge=1, le=1000)
    # How often a worker records that it is alive (and looks for dead workers).
    heartbeat_s: float = Field(2.0, gt=0)
    # A worker silent this long is dead: its runs are taken over, from their stored steps.
    stalled_after_s: float = Field(10.0, gt=0)
    # On SIGTERM: wait this long for running runs to end, then hand the rest back.
    shutdown_timeout_s: float = Field(30.0, ge=0)
    # How often an idle worker looks for runs it was not told about.
    poll_s: float = Field(1.0, gt=0)
    # Workers delete a finished run's job this long after it ended (the run stays in
    # storage; its handle then reads it there). None keeps every job.
    keep_finished_s: float | None = Field(7 * 86400.0, ge=0)
    # A run whose worker died while it ran alone on it this many times is not run again:
    # it ends `failed` with code WORKER_DIED (its job dead-lettered) and its thread goes on.
    # Runs that shared the dead worker are not charged: they run again alone first.
    max_worker_deaths: int = Field(3, ge=1, le=100)

    @model_validator(mode="after")
    def _stalled_after_heartbeats(self) -> QueueConfig:
        if self.stalled_after_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"stalled_after_s ({self.stalled_after_s}) must be at least twice heartbeat_s "
                f"({self.heartbeat_s}), or a live worker could be taken for dead"
            )
        return self


class ArtInstanceConfig(ArtModel):
    """Everything an ArtInstance is built from. Also accepted as keyword arguments."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    # a model's name, or a Model object (art.llm.model) that calls to its name then reach
    model: str | Model | None = None
    planning_model: str | Model | None = None
    synthesis_model: str | Model | None = None
    tools: list[Any] = Field(default_factory=list)
    storage: Any = None
    execution_config: ExecutionConfig = Field(default_factory=ExecutionConfig)
    persona: Persona = Field(default_factory=Persona)
    llm_params: dict[str, Any] = Field(default_factory=dict)
    # The provider's base URL (llm_params["api_base"]); default $ART_API_BASE.
    api_base: str | None = None
    # The name of the environment variable holding the provider's API key (read into
    # llm_params["api_key"]); default $ART_API_KEY_ENV.
    api_key_env: str | None = None
    # Whether planning asks for JSON-schema structured output (`response_format`): None
    # when litellm's model map says the model supports it. A server that refuses it gets
    # the call again without it.
    structured_output: bool | None = None
    callbacks: Any = None
    # MCP servers whose tools join `tools`: a path to an mcpServers JSON file, a dict in
    # that format, an MCPConfig or an MCPClient (art.adapters.mcp; docs/mcp.md)
    mcp_servers: Any = None
    queue: QueueConfig = Field(default_factory=QueueConfig)

    @field_validator("persona", mode="before")
    @classmethod
    def _persona_from_str(cls, value: object) -> object:
        if isinstance(value, str):
            return {"planning": value, "synthesis": value}
        return value

    @model_validator(mode="after")
    def _provider_settings(self) -> ArtInstanceConfig:
        """api_base, api_key_env and $ART_TIMEOUT into llm_params and execution_config;
        values set in llm_params or execution_config win."""
        params = dict(self.llm_params)
        base = self.api_base or os.environ.get(API_BASE_ENV)
        if base:
            params.setdefault("api_base", base)
        key_env = self.api_key_env or os.environ.get(API_KEY_ENV_ENV)
        if key_env and "api_key" not in params:
            key = os.environ.get(key_env)
            if not key:
                raise ValueError(
                    f"api_key_env names the environment variable {key_env}, which is not set"
                )
            params["api_key"] = key
        self.llm_params = params
        timeout = os.environ.get(TIMEOUT_ENV)
        if timeout and "llm_timeout_s" not in self.execution_config.model_fields_set:
            try:
                seconds = float(timeout)
            except ValueError:
                raise ValueError(f"{TIMEOUT_ENV}={timeout!r} is not a number of seconds") from None
            self.execution_config = self.execution_config.merged({"llm_timeout_s": seconds})
        return self

    def resolved_model(self) -> str | None:
        return model_name(self.model) or os.environ.get(MODEL_ENV) or None

    def model_objects(self) -> dict[str, Model]:
        """The Model objects among `model`, `planning_model` and `synthesis_model`, by name."""
        given = (self.model, self.planning_model, self.synthesis_model)
        return {m.model: m for m in given if isinstance(m, Model)}

    def resolved_storage(self) -> StorageAdapter | str | None:
        return self.storage if self.storage is not None else os.environ.get(STORAGE_ENV)


# Seed 004's run options that art takes elsewhere, and where.
_MOVED_OPTIONS = {
    "stream": "stream the run with inst.stream(query, thread_id, options) instead",
    "temperature": 'pass it in "llm_params"',
    "max_tokens": 'pass it in "llm_params"',
    "maxTokens": 'pass it in "llm_params"',
    "conversation_id": "the thread_id argument names the conversation",
    "conversationId": "the thread_id argument names the conversation",
}


def process_options(options: ProcessOptions | Mapping[str, object] | None) -> ProcessOptions:
    """A call's `options` as ProcessOptions; raises ConfigurationError for a bad one."""
    if options is None:
        return ProcessOptions()
    if isinstance(options, ProcessOptions):
        return _storable_options(options)
    options = dict(options)
    for name, fix in _MOVED_OPTIONS.items():
        if name in options:
            raise ConfigurationError(f"invalid process options: no option {name!r}: {fix}")
    try:
        return _storable_options(ProcessOptions.model_validate(options))
    except ValidationError as exc:
        raise ConfigurationError(f"invalid process options: {exc}") from None


def _storable_options(options: ProcessOptions) -> ProcessOptions:
    """`options`, refused when the data stored with the run could not be read back."""
    for name in ("system_context", "metadata"):
        problem = storable_problem(getattr(options, name))
        if problem is not None:
            raise ConfigurationError(f"invalid process options: {name} {problem}")
    return options


def instance_config(
    config: ArtInstanceConfig | None, fields: Mapping[str, Any]
) -> ArtInstanceConfig:
    """An instance's configuration: `config` with `fields` over it; raises
    ConfigurationError for a bad one."""
    try:
        if config is None:
            return ArtInstanceConfig.model_validate(dict(fields))
        if not isinstance(config, ArtInstanceConfig):
            config = ArtInstanceConfig.model_validate(config)
        if fields:
            merged = {**config.model_dump(exclude_unset=True), **fields}
            # Objects (tools, adapters, callbacks) must not be copied through model_dump.
            for name in ("tools", "storage", "callbacks", "mcp_servers"):
                if name not in fields and name in config.model_fields_set:
                    merged[name] = getattr(config, name)
            return ArtInstanceConfig.model_validate(merged)
        return config
    except ValidationError as exc:
        raise ConfigurationError(f"invalid art configuration: {exc}") from None
