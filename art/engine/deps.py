"""RunDepsFactory: what an instance's configuration makes for its calls, beside the
`RunDeps` (art.engine.run) it lends each run: the LLM client, the planner, the effective
`ExecutionConfig` of a call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from art.config import ArtInstanceConfig, ExecutionConfig, ProcessOptions
from art.engine.run import RunDeps
from art.engine.setup import RunSetup
from art.errors import ConfigurationError
from art.llm.client import LLMClient
from art.planning.planner import Planner
from art.storage.contract import StorageAdapter
from art.tooling.registry import ToolRegistry
from art.tooling.threads import ToolThreads

__all__ = ["RunDepsFactory"]


class RunDepsFactory:
    """Collaborators made from one instance's configuration: one shared LLM client (or one
    a call with its own llm_params), planners, and each run's `RunDeps`."""

    def __init__(
        self,
        config: ArtInstanceConfig,
        registry: ToolRegistry,
        *,
        model: str,
        planning_model: str,
        synthesis_model: str,
        tool_threads: Callable[[], ToolThreads | None],
    ) -> None:
        self._config = config
        self._registry = registry
        self._model = model
        self._planning_model = planning_model
        self._synthesis_model = synthesis_model
        self._tool_threads = tool_threads
        self._llm: LLMClient | None = None

    def llm_client(self, overrides: Mapping[str, Any] | None) -> LLMClient:
        """The LLM client for a call: the instance's, or one with per-call llm_params."""
        models = self._config.model_objects()
        if overrides:
            return LLMClient({**self._config.llm_params, **overrides}, models=models)
        if self._llm is None:  # built once: it scans the environment for keys to mask
            self._llm = LLMClient(self._config.llm_params, models=models)
        return self._llm

    def planner(self, llm: LLMClient, tools: ToolRegistry | None = None) -> Planner:
        """A planner over `tools` (the instance's by default) with the planning model."""
        return Planner(
            llm,
            tools or self._registry,
            persona=self._config.persona,
            model=self._planning_model,
            structured_output=self._config.structured_output,
        )

    def execution_config(self, opts: ProcessOptions) -> ExecutionConfig:
        """The instance's ExecutionConfig with the call's overrides."""
        try:
            return self._config.execution_config.merged(opts.execution_config)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid execution_config override: {exc}") from None

    def run_deps(self, storage: StorageAdapter, opts: ProcessOptions, setup: RunSetup) -> RunDeps:
        """What one run of a call with `opts` borrows: `storage` (the instance's at the
        time: a server wraps it after construction) and its `setup`'s tools."""
        llm = self.llm_client(opts.llm_params)
        return RunDeps(
            storage=storage,
            setup=setup,
            llm=llm,
            planner=self.planner(llm, setup.registry),
            model=self._model,
            synthesis_model=self._synthesis_model,
            persona=self._config.persona,
            tool_threads=self._tool_threads(),
        )
