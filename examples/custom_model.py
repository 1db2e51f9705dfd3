"""A model of your own: an `art.llm.model.Model` written by hand, no litellm involved.

    python examples/custom_model.py

`RuleModel` answers arithmetic questions by rule: its plan is one calculator step, its
answer reads the step's output from the synthesis prompt. It writes `request` (one reply)
and `request_stream` (the reply word by word), and says what art asks before a call: that
it takes a JSON schema `response_format` and how many tokens fit. Everything past the model
(events, retries, error codes, usage, streaming to the events) is art's, as for any model.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator

import art
from art.core.usage import TokenUsage
from art.errors import ModelErrorCode
from art.llm.model import (
    Model,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ModelStream,
    ProviderError,
)
from art.tools import Calculator

EXPRESSION = re.compile(r"[\d.]+(?:\s*[-+*/]\s*[\d.]+)+")


class RuleModel(Model):
    """Plans one calculator step for the arithmetic in the question; answers with its result."""

    model = "rules/arithmetic"

    async def request(self, request: ModelRequest) -> ModelResponse:
        phase = request.metadata.get("art_phase")
        prompt = str(request.messages[-1]["content"])
        if phase == "planning":
            found = EXPRESSION.search(prompt.rpartition("Request:")[2])
            if found is None:
                raise ProviderError("no arithmetic in the question", ModelErrorCode.UNKNOWN)
            step = {"id": "s1", "tool": "calculator", "args": {"expression": found.group()}}
            text = json.dumps({"title": "Calculate", "steps": [step]})
        else:
            output = prompt.partition("Output:")[2].split()
            text = f"The result is {output[0] if output else 'unknown'}."
        words = len(prompt.split())
        usage = TokenUsage(
            prompt_tokens=words,
            completion_tokens=len(text.split()),
            total_tokens=words + len(text.split()),
        )
        return ModelResponse(content=text, usage=usage, finish_reason="stop", cost=0.0)

    async def request_stream(self, request: ModelRequest) -> ModelStream:
        whole = await self.request(request)

        async def words() -> AsyncIterator[ModelChunk]:
            pieces = re.findall(r"\S+\s*", whole.content)
            for piece in pieces[:-1]:
                yield ModelChunk(text=piece)
                await asyncio.sleep(0.01)  # as a provider would
            yield ModelChunk(text=pieces[-1], usage=whole.usage, finish_reason="stop", cost=0.0)

        return words()  # an async generator: `aclose()` ends it early

    def supports_response_schema(self) -> bool:
        return True  # the planner then sends the plan's JSON schema as response_format

    def context_window(self) -> int | None:
        return 8192


async def main() -> None:
    model = RuleModel()
    async with art.create_art_instance(
        model=model, tools=[Calculator()], storage="memory://"
    ) as inst:
        streamed: list[str] = []
        inst.on("chunk:after", lambda data, context: streamed.append(data["chunk"]))
        response = await inst.aprocess("What is 17 * 23 + 12?", "thread-1")
        print(f"answer:   {response.content}")
        print(f"streamed: {'|'.join(piece for piece in streamed if piece)}")
        print(f"steps:    {[(step.tool, step.output) for step in response.steps]}")
        print(f"calls:    {response.metadata.llm_calls}, cost {response.metadata.llm_cost}")

        failed = await inst.aprocess("Tell me a story.", "thread-2")
        print(f"refused:  {failed.metadata.error.code}: {failed.metadata.error.message}")
    print(f"litellm imported: {'litellm' in sys.modules}")


if __name__ == "__main__":
    asyncio.run(main())
