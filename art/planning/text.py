"""A plan as text a person reviews (what plan snapshots store), and the diff of two,
each change under the heading of its step."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator

from art.planning.plans import Plan

__all__ = ["plan_text_diff", "render_plan_text"]


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


def plan_text_diff(snapshot: str, received: str) -> Iterator[str]:
    """Every changed line of two rendered plans, under the heading of its section.

    Only changed lines and their headings (`## s2 · order_total`, ```` ```mermaid ````) are
    shown, so a diff of several changes fits pytest's default assertion output, and an
    added argument says which step it belongs to.
    """
    old, new = snapshot.splitlines(), received.splitlines()
    shown_heading: str | None = None
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        heading = _heading(new, j1) if j1 < len(new) or not old else _heading(old, i1)
        changed = {*old[i1:i2], *new[j1:j2]}
        if heading is not None and heading != shown_heading and heading not in changed:
            yield f"  {heading}"
        shown_heading = heading
        yield from (f"- {line}" for line in old[i1:i2])
        yield from (f"+ {line}" for line in new[j1:j2])
        if new[j1:j2]:
            shown_heading = _heading(new, j2 - 1)


def _heading(lines: list[str], index: int) -> str | None:
    """The section heading (`# title`, `## step`, ```` ```mermaid ````) line `index` is under."""
    for line in reversed(lines[: index + 1]):
        if line.startswith("#") or line == "```mermaid":
            return line
    return None
