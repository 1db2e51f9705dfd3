"""Plan and Step: the DAG the planner writes and the executor runs."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from art._models import ArtModel


class Step(ArtModel):
    """One node of the plan: a tool call with arguments, or (tool=None) a reasoning step."""

    id: str
    description: str = ""
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)

    @field_validator("args", mode="before")
    @classmethod
    def _none_args(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("depends_on", mode="before")
    @classmethod
    def _none_deps(cls, value: Any) -> Any:
        return [] if value is None else value


class Plan(ArtModel):
    """What the planner wrote: an intent, a title and the steps."""

    intent: str = ""
    title: str = ""
    steps: list[Step] = Field(default_factory=list)
