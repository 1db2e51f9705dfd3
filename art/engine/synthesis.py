"""Synthesis: one streamed LLM call writes the answer from the query and the step results.

The prompt holds the query, the thread's earlier turns, the plan, every step's output
cut to `tool_result_max_length`, what failed or was skipped and why, what a human
rejected or approved, and a note for each output that was only shown to the user
(display tools: their content stays out of the prompt). When the model's context
window is known, the prompt is fitted into it by cutting the largest outputs first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from art.core.binary import describe_attachments
from art.core.serialization import context_text, safe_stringify
from art.llm.client import LLMClient, LLMResult, context_window, count_tokens
from art.responses import ConversationMessage, Source, StepRecord

if TYPE_CHECKING:
    from art.engine.context import RunContext
    from art.planning.plans import Plan

__all__ = [
    "SYNTHESIS_SYSTEM_PROMPT",
    "SynthesisInput",
    "fit_to_context",
    "gather_sources",
    "incomplete_answer",
    "synthesis_messages",
    "synthesize",
]

SYNTHESIS_SYSTEM_PROMPT = (
    "You write the final answer to the user's question from the results of the steps "
    "that were run for it. Use only those results and the conversation; do not invent "
    "data. If a step failed, was skipped or was rejected by a human, say plainly what "
    "could not be done. Do not repeat content that was shown to the user separately. "
    "Answer directly, without describing the plan."
)
# Prompt tokens left free for the answer: a quarter of the window, at most this many.
_ANSWER_RESERVE_TOKENS = 4096
# Outputs are never cut below this many characters while fitting (the marker needs room).
_MIN_OUTPUT_CHARS = 40
_HISTORY_MESSAGE_CHARS = 4000
_FIT_ROUNDS = 6


@dataclass
class SynthesisInput:
    """Everything the synthesis prompt is written from."""

    query: str
    records: Sequence[StepRecord]
    plan: Plan | None = None
    history: Sequence[ConversationMessage] = ()
    display_tools: frozenset[str] = frozenset()
    persona: str = ""
    # The run's system context: variables every LLM call of the run sees.
    system_context: Mapping[str, Any] = field(default_factory=dict)
    max_length: int = 60_000
    # Per-step output limits below `max_length`, set while fitting into the context window.
    limits: dict[str, int] = field(default_factory=dict)


def synthesis_messages(data: SynthesisInput) -> list[dict[str, Any]]:
    """The messages of the synthesis call."""
    system = SYNTHESIS_SYSTEM_PROMPT
    if data.persona:
        system = f"{system}\n\n{data.persona}"
    if data.system_context:
        system = f"{system}\n\n{context_text(data.system_context)}"
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in data.history:
        if message.role in ("user", "assistant") and message.content:
            content = message.content
            if len(content) > _HISTORY_MESSAGE_CHARS:
                content = safe_stringify(content, max_length=_HISTORY_MESSAGE_CHARS)
            messages.append({"role": message.role, "content": content})
    messages.append({"role": "user", "content": _results_text(data)})
    return messages


def _results_text(data: SynthesisInput) -> str:
    descriptions: dict[str, str] = {}
    parts = [f"Question: {data.query}"]
    if data.plan is not None:
        descriptions = {step.id: step.description for step in data.plan.steps}
        title = data.plan.title or data.plan.intent
        if title:
            parts.append(f"Plan: {title}")
    if data.records:
        parts.append("Results of the steps:")
        display_tools, limits, max_length = data.display_tools, data.limits, data.max_length
        for record in data.records:
            # The usual step (completed, a tool's output in the prompt, no human decision)
            # written here, without a call per step; _step_text writes every other case.
            result, tool = record.result, record.tool
            if (
                record.status != "completed"
                or result is None
                or result.metadata
                or not tool
                or tool in display_tools
            ):
                parts.append(_step_text(record, descriptions, data))
                continue
            step_id = record.step_id
            what = descriptions.get(step_id) or ""
            output = safe_stringify(result.output, max_length=limits.get(step_id, max_length))
            parts.append(f"[{step_id}] {what} (tool {tool}): completed. Output:\n{output}")
    else:
        parts.append("No steps were needed: answer from the conversation and what you know.")
    # "every part": small models otherwise answer the first of several questions only.
    parts.append("Write the answer to the question now, answering every part of it.")
    return "\n\n".join(parts)


def _step_text(record: StepRecord, descriptions: Mapping[str, str], data: SynthesisInput) -> str:
    what = descriptions.get(record.step_id) or ""
    tool = f" (tool {record.tool})" if record.tool else ""
    head = f"[{record.step_id}] {what}{tool}".rstrip()
    result = record.result
    metadata = result.metadata if result is not None else {}
    if record.status == "completed":
        if record.tool in data.display_tools:
            return f"{head}: shown to the user directly; its content is not repeated here."
        limit = data.limits.get(record.step_id, data.max_length)
        output = safe_stringify(record.output, max_length=limit)
        note = " (approved by a human reviewer)" if metadata.get("decision") == "approved" else ""
        attached = describe_attachments(metadata)
        if attached:  # their bytes never reach the model: it learns what was attached
            output += "\nAttached (shown to the user, not to you):\n" + "\n".join(
                f"- {line}" for line in attached
            )
        return f"{head}: completed{note}. Output:\n{output}"
    if record.status == "failed":
        if metadata.get("rejected"):
            return (
                f"{head}: REJECTED by a human reviewer, so it was not done. {record.reason or ''}"
            )
        return f"{head}: FAILED: {record.reason or 'no reason recorded'}"
    if record.status == "skipped":
        return f"{head}: NOT RUN ({record.reason or 'skipped'})"
    if record.status == "waiting":
        return f"{head}: still waiting for a human decision"
    return f"{head}: NOT RUN ({record.status})"


# -- fitting into the context window -------------------------------------------------------


def fit_to_context(
    data: SynthesisInput,
    model: str,
    *,
    window: Callable[[str], int | None] | None = None,
    count: Callable[[str, list[dict[str, Any]]], int] | None = None,
) -> list[dict[str, Any]]:
    """The synthesis messages, with the largest outputs cut until the prompt fits.

    Unknown window (the model does not say it): the messages as they are.
    """
    if window is None or count is None:
        window = window or context_window
        count = count or count_tokens
    messages = synthesis_messages(data)
    limit = window(model)
    if not limit:
        return messages
    budget = limit - min(_ANSWER_RESERVE_TOKENS, limit // 4)
    tokens = count(model, messages)
    if tokens <= budget:
        return messages
    lengths = _output_lengths(data)
    for _ in range(_FIT_ROUNDS):
        chars = sum(len(str(m.get("content") or "")) for m in messages) or 1
        chars_per_token = chars / max(tokens, 1)
        excess_chars = int((tokens - budget) * chars_per_token * 1.1) + 64
        caps = _water_fill(lengths, excess_chars)
        if caps == {sid: lengths[sid] for sid in caps}:
            break  # nothing left to cut
        data.limits.update(caps)
        lengths.update(caps)
        messages = synthesis_messages(data)
        tokens = count(model, messages)
        if tokens <= budget:
            return messages
    # Still too long: the outputs are as short as they go; drop the oldest history turns.
    while tokens > budget and len(data.history) > 0:
        data.history = list(data.history)[1:]
        messages = synthesis_messages(data)
        tokens = count(model, messages)
    return messages


def _output_lengths(data: SynthesisInput) -> dict[str, int]:
    lengths = {}
    for record in data.records:
        if record.status == "completed" and record.tool not in data.display_tools:
            text = safe_stringify(record.output, max_length=data.max_length)
            lengths[record.step_id] = len(text)
    return lengths


def _water_fill(lengths: Mapping[str, int], excess: int) -> dict[str, int]:
    """A cap for each output so that cutting everything above it frees `excess` characters;
    only the largest outputs are touched."""
    if not lengths:
        return {}
    ordered = sorted(lengths.values(), reverse=True)
    cap = ordered[0]
    freed = 0
    # Lower the cap level by level until enough characters are freed.
    for index, length in enumerate([*ordered[1:], _MIN_OUTPUT_CHARS]):
        length = max(length, _MIN_OUTPUT_CHARS)
        above = index + 1  # outputs at or above the current cap
        step = (cap - length) * above
        if freed + step >= excess:
            cap -= (excess - freed + above - 1) // above
            break
        freed += step
        cap = length
    cap = max(cap, _MIN_OUTPUT_CHARS)
    return {sid: min(length, cap) for sid, length in lengths.items()}


# -- sources ---------------------------------------------------------------------------------


def gather_sources(records: Sequence[StepRecord]) -> list[Source]:
    """The sources tools named in `ToolResult.metadata["sources"]`, deduplicated, in order."""
    found: list[Source] = []
    seen: set[tuple[str, str | None]] = set()
    for record in records:
        result = record.result
        if result is None or not result.metadata or record.status != "completed":
            continue
        raw = result.metadata.get("sources")
        if not raw:
            continue
        for item in raw if isinstance(raw, list | tuple) else [raw]:
            source = _as_source(item)
            if source is None:
                continue
            key = (source.source_name, source.url)
            if key not in seen:
                seen.add(key)
                found.append(source)
    return found


def _as_source(item: Any) -> Source | None:
    if isinstance(item, Source):
        return item
    if isinstance(item, str):
        url = item if item.startswith(("http://", "https://")) else None
        return Source(source_name=item, url=url)
    if isinstance(item, Mapping):
        data = dict(item)
        name = (
            data.pop("source_name", None)
            or data.pop("sourceName", None)
            or data.get("name")
            or data.get("title")
            or data.get("url")
        )
        if not name:
            return None
        try:
            return Source.model_validate({**data, "source_name": str(name)})
        except Exception:
            return Source(source_name=str(name))
    return None


# -- the call --------------------------------------------------------------------------------

# The finish reason of an answer the model ended itself (litellm maps Anthropic's
# end_turn and stop_sequence, Ollama's stop, and the like to it).
NORMAL_FINISH = "stop"


def incomplete_answer(finish_reason: str | None) -> str | None:
    """Why an answer that ended with `finish_reason` may be incomplete; None when the
    model ended it normally."""
    if finish_reason == NORMAL_FINISH:
        return None
    if finish_reason == "length":
        return (
            "the answer was cut off at the model's output limit (finish_reason 'length'); "
            "raise max_tokens in llm_params"
        )
    if finish_reason == "content_filter":
        return "the provider's content filter stopped the answer (finish_reason 'content_filter')"
    if finish_reason is None:
        return "the answer's stream ended without a finish reason; it may be incomplete"
    return f"the model stopped with finish_reason {finish_reason!r}; the answer may be incomplete"


async def synthesize(
    run: RunContext, llm: LLMClient, model: str, data: SynthesisInput
) -> LLMResult:
    """One streamed `synthesis` call; tokens reach events as `chunk:*` and `buffer:flush`."""
    messages = fit_to_context(data, model, window=llm.context_window, count=llm.count_tokens)
    return await llm.complete(
        run, phase="synthesis", model=model, messages=messages, span=run.span.child(), stream=True
    )
