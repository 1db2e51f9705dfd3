"""What an evaluation records of one case: its figures and the result of each check."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["CHECKS", "CaseResult"]

#: The checks a case result may have, in the order reports show them.
CHECKS = (
    "right_tools",
    "right_args",
    "right_values",
    "snapshot",
    "max_llm_calls",
    "max_cost_usd",
    "max_latency_s",
    "judge",
)


class CaseResult(BaseModel):
    """One case's run: what happened, its figures, and each check (None: not asked or
    not measurable, e.g. the answer's values in a plan-only evaluation)."""

    case: str
    query: str
    status: Literal["ok", "error", "timeout"] = "ok"
    error: str | None = None
    plan: dict[str, Any] | None = None
    mermaid: str | None = None
    answer: str | None = None
    valid_plan: bool = False
    valid_first: bool = False
    repairs: int = 0
    checks: dict[str, bool | None] = Field(default_factory=dict)
    failures: list[str] = Field(default_factory=list)
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0

    @property
    def passed(self) -> bool:
        """The run finished with a valid plan and no check failed."""
        return (
            self.status == "ok"
            and self.valid_plan
            and all(passed is not False for passed in self.checks.values())
        )
