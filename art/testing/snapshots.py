"""Plan snapshots for syrupy: each plan stored as a readable Markdown file.

The file lists the title, the intent, every step (id, tool, arguments, dependencies)
and the Mermaid graph, so a changed plan shows up in review as a readable diff.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from art.planning.plans import Plan
from art.planning.text import plan_text_diff, render_plan_text

if TYPE_CHECKING:
    from syrupy.types import SerializedData

__all__ = ["PlanSnapshotExtension", "plan_text_diff", "render_plan_text"]


def _as_plan(data: object) -> Plan:
    if isinstance(data, Plan):
        return data
    plan = getattr(data, "plan", None)
    if isinstance(plan, Plan):  # an AgentFinalResponse
        return plan
    if isinstance(data, str | bytes):
        return Plan.loads(data)
    return Plan.model_validate(data)


class PlanSnapshotExtension(SingleFileSnapshotExtension):
    """Stores a Plan (or a response's plan, or wire-format data) as `<test>.plan.md`."""

    file_extension = "plan.md"
    _write_mode = WriteMode.TEXT

    def serialize(self, data: object, **kwargs: object) -> str:
        return render_plan_text(_as_plan(data))

    def diff_lines(
        self, serialized_data: SerializedData, snapshot_data: SerializedData
    ) -> Iterator[str]:
        yield from plan_text_diff(str(snapshot_data), str(serialized_data))
