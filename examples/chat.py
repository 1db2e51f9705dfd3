"""One LLM call without a plan: art.chat and art.chat_stream (thinking, answer, usage).

    python examples/chat.py                   # a local OpenAI-compatible test server
    ART_MODEL=openai/gpt-4o-mini python examples/chat.py   # any litellm model

Without $ART_MODEL the calls go over HTTP to art.testing.FakeProvider on 127.0.0.1,
which answers like a reasoning model (its thinking arrives as `reasoning_content`).
The calls have art's retries, time limits, error codes and key masking either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import art

QUESTION = "Is 1764 a perfect square?"
SYSTEM = "Answer in one sentence."


async def main(model: str, llm_params: dict) -> None:
    async with art.create_art_instance(
        model=model, storage="memory://", llm_params=llm_params
    ) as inst:
        response = await inst.achat(QUESTION, system_prompt=SYSTEM)
        print(f"thinking: {response.thinking}")
        print(f"answer:   {response.content}")
        print(f"usage:    {response.usage.total_tokens} tokens, finish {response.finish_reason}")

        print("streamed:", end="")
        section = None
        async for chunk in inst.chat_stream(QUESTION, system_prompt=SYSTEM):
            for name, text in (("thinking", chunk.thinking), ("answer", chunk.content)):
                if text:
                    if section != name:  # thinking arrives first, then the answer
                        section = name
                        print(f"\n  {name}: ", end="")
                    print(text, end="", flush=True)
            if chunk.done:  # the last chunk carries the stream's finish reason and usage
                print(f"\n  usage on the last chunk: {chunk.usage.total_tokens} tokens")


if __name__ == "__main__":
    model = os.environ.get("ART_MODEL")
    with contextlib.ExitStack() as stack:
        params: dict = {}
        if not model:
            from art.testing import Answer, FakeProvider

            reply = Answer("Yes: 42 * 42 = 1764.", reasoning="sqrt(1764) is 42, a whole number.")
            server = stack.enter_context(FakeProvider(default=reply))
            model = "openai/reasoner"
            params = {"api_base": server.openai_base, "api_key": "not-a-real-key"}
        asyncio.run(main(model, params))
