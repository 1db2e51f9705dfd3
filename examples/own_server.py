"""Run art against your own model server: vLLM, llama.cpp's llama-server, LM Studio,
Ollama (its OpenAI API under /v1) or a LiteLLM proxy.

    python examples/own_server.py --api-base http://127.0.0.1:8000/v1 \\
        --model openai/<the served model> [--api-key-env VLLM_KEY] [--timeout 120]
    python examples/own_server.py            # a stand-in server on 127.0.0.1

The stand-in is art.testing.FakeProvider, a real HTTP server: it refuses the first call
with a rate limit (HTTP 429 with Retry-After), which art waits for and retries, and cuts
the answer at the output limit, so the run ends `partial` as it would with a real
server whose max_tokens is too low.
"""

from __future__ import annotations

import argparse
import json
import sys

import art
from art.tools import Calculator

QUESTION = "What is 17 * 23?"
PLAN = {
    "title": "Multiply",
    "steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}}],
}


def stand_in():
    """A FakeProvider scripted for QUESTION: a rate limit, a plan, a cut-off answer."""
    from art.testing import Answer, FakeProvider, HTTPStatus

    return FakeProvider(
        HTTPStatus(429, {"Retry-After": "1"}, message="Rate limit reached; retry in 1 s"),
        Answer(json.dumps(PLAN)),
        Answer("17 * 23 is", finish_reason="length"),
        model="stand-in-model",
    ).start()


def show_retry(data: dict, context: object) -> None:
    """Print each retried LLM call (the `error` events that are `recoverable`)."""
    if data.get("recoverable"):
        print(f"retrying {data['phase']} call in {data['retry_in_s']:.1f} s: {data['code']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-base", help="the server's base URL (default: a stand-in)")
    parser.add_argument("--model", default="openai/served-model", help="litellm model name")
    parser.add_argument("--api-key-env", help="the environment variable holding the key")
    parser.add_argument("--timeout", type=float, help="seconds one LLM call attempt may take")
    parser.add_argument("question", nargs="?", default=QUESTION)
    args = parser.parse_args()

    server = None if args.api_base else stand_in()
    settings: dict = {"api_base": args.api_base or server.openai_base}
    if args.api_key_env:
        settings["api_key_env"] = args.api_key_env
    else:
        settings["llm_params"] = {"api_key": "no-key"}  # servers started without a key
    if args.timeout:
        settings["execution_config"] = {"llm_timeout_s": args.timeout}
    try:
        with art.create_art_instance(
            model=args.model, tools=[Calculator()], storage="memory://", **settings
        ) as inst:
            inst.on("error", show_retry)
            resp = inst.process(args.question, "own-server")
    finally:
        if server is not None:
            server.close()

    meta = resp.metadata
    print(f"status: {meta.status}")
    print(f"answer: {resp.content}")
    print(f"model: {meta.model}, finish_reason: {meta.finish_reason}, LLM calls: {meta.llm_calls}")
    if meta.error is not None:
        print(f"{meta.error.code}: {meta.error.message}")
    return 1 if meta.status == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
