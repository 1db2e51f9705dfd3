"""Plan snapshots for syrupy: each plan stored as a readable Markdown file.

The file lists the title, the intent, every step (id, tool, arguments, dependencies)
and the Mermaid graph, so a changed plan shows up in review as a readable diff.
"""

from __future__ import annotations

import json
from typing import Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from art.planning.plans import Plan

__all__ = ["PlanSnapshotExtension", "render_plan_text"]


def render_plan_text(plan: Plan) -> str:
    """The plan as deterministic, human-readable Markdown (what the snapshot file holds)."""
    lines = [f"# {plan.title or '(untitled plan)'}", ""]
    if plan.intent:
        lines += [f"intent: {plan.intent}", ""]
    if not plan.steps:
        lines += ["(no steps: the answer is written directly)", ""]
    for step in plan.steps:
        tool = step.tool if step.tool is not None else "(reasoning, no tool)"
        lines.append(f"## {step.id} · {tool}")
        lines.append("")
        if step.description:
            lines.append(f"description: {step.description}")
        dependencies = ", ".join(step.all_dependencies) or "(none)"
        lines.append(f"depends on: {dependencies}")
        if step.args:
            arguments = json.dumps(step.args, indent=2, sort_keys=True, ensure_ascii=False)
            lines += ["args:", "```json", arguments, "```"]
        else:
            lines.append("args: (none)")
        lines.append("")
    lines += ["```mermaid", plan.to_mermaid(), "```", ""]
    return "\n".join(lines)


def _as_plan(data: Any) -> Plan:
    if isinstance(data, Plan):
        return data
    if hasattr(data, "plan") and isinstance(data.plan, Plan):  # an AgentFinalResponse
        return data.plan
    if isinstance(data, str | bytes):
        return Plan.loads(data)
    return Plan.model_validate(data)


class PlanSnapshotExtension(SingleFileSnapshotExtension):
    """Stores a Plan (or a response's plan, or wire-format data) as `<test>.plan.md`."""

    file_extension = "plan.md"
    _write_mode = WriteMode.TEXT

    def serialize(self, data: Any, **kwargs: Any) -> str:
        return render_plan_text(_as_plan(data))
