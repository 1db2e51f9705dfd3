"""The one-call-per-step baseline: how the TypeScript ART runs a todo list, priced in tokens.

The TypeScript ART plans a todo list, then works through the items one at a time,
each with a ReAct turn: an LLM call that sees the whole conversation so far and
answers with the tool call for the current item; the tool's result is appended to
the conversation before the next item; a final call writes the answer. For a plan
of N tool steps that is N + 2 calls (a real ReAct loop also spends a call reading
each result before it closes the item, so this is a lower bound).

To price it honestly on the same plan, the baseline reuses art's own planning and
synthesis calls (same messages, same token count) and sends each item call through
the same scripted model, and every prompt is counted by the same litellm token counter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.art_side import LlmCall

if TYPE_CHECKING:
    from art.llm.model import Model

REACT_SYSTEM = (
    "You are an agent working through a todo list one item at a time. For the current "
    "item, call exactly one tool with the right arguments; earlier items' results are "
    "in the conversation. Tools:\n{tools}"
)


@dataclass
class CallCost:
    phase: str
    prompt_tokens: int  # litellm.token_counter on the exact messages sent
    scripted_tokens: int | None  # what the scripted model reported (it counts words)


@dataclass
class Cost:
    calls: list[CallCost] = field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.calls)

    @property
    def scripted_tokens(self) -> int:
        return sum(c.scripted_tokens or 0 for c in self.calls)


def count_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of `messages` by litellm's counter (tiktoken's cl100k_base)."""
    import litellm

    return int(litellm.token_counter(model="gpt-4o", messages=messages))


def cost_of(calls: list[LlmCall]) -> Cost:
    """What art's own calls cost, counted the same way as the baseline's."""
    return Cost(
        [CallCost(c.phase or "?", count_tokens(c.messages), c.prompt_tokens) for c in calls]
    )


def _stringify(value: Any, limit: int) -> str:
    try:
        from art.core.serialization import safe_stringify

        text = safe_stringify(value)
    except ImportError:
        text = json.dumps(value, default=str)
    return text[:limit]


def item_messages(
    *,
    query: str,
    plan: dict[str, Any],
    tools: list[dict[str, Any]],
    outputs: dict[str, Any],
    upto: int,
    result_limit: int,
) -> list[dict[str, Any]]:
    """The messages of the ReAct call for item `upto` (0-based) of `plan`."""
    steps = plan["steps"]
    todo = "\n".join(f"{i + 1}. [{s['id']}] {s['description']}" for i, s in enumerate(steps))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": REACT_SYSTEM.format(tools=json.dumps(tools))},
        {"role": "user", "content": query},
        {"role": "assistant", "content": f"Todo list:\n{todo}"},
    ]
    for step in steps[:upto]:
        call_id = f"call_{step['id']}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": step["tool"], "arguments": json.dumps(step["args"])},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": _stringify(outputs.get(step["id"]), result_limit),
            }
        )
    current = steps[upto]
    messages.append(
        {"role": "user", "content": f"Current item {upto + 1}: {current['description']}"}
    )
    return messages


async def price_baseline(
    *,
    model: Model,
    query: str,
    plan: dict[str, Any],
    tools: list[dict[str, Any]],
    outputs: dict[str, Any],
    art_calls: list[LlmCall],
    result_limit: int,
) -> Cost:
    """Calls and prompt tokens of the one-call-per-step run of `plan`.

    `art_calls` are art's own calls on the same plan (its planning and synthesis calls
    are the baseline's first and last); `outputs` are the step outputs art produced.
    Each item call is sent through the same scripted model.
    """
    from art.llm.model import ModelRequest

    by_phase = {c.phase: c for c in art_calls}
    missing = [p for p in ("planning", "synthesis") if p not in by_phase]
    if missing:
        raise RuntimeError(f"art made no {' or '.join(missing)} call to compare against")
    art_cost = {c.phase: c for c in cost_of([by_phase["planning"], by_phase["synthesis"]]).calls}
    cost = Cost([art_cost["planning"]])
    for index in range(len(plan["steps"])):
        messages = item_messages(
            query=query,
            plan=plan,
            tools=tools,
            outputs=outputs,
            upto=index,
            result_limit=result_limit,
        )
        response = await model.request(
            ModelRequest(messages=messages, metadata={"art_phase": "step"})
        )
        cost.calls.append(
            CallCost("item", count_tokens(messages), int(response.usage.prompt_tokens))
        )
    cost.calls.append(art_cost["synthesis"])
    return cost
