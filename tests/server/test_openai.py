"""The OpenAI-compatible endpoint, called with OpenAI's own Python SDK (a dependency of
litellm): plain and streamed completions that run the agent, threads, suspensions, errors."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from .conftest import APPROVAL_PLAN, Server

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow


def sdk(server: Server, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.url}/v1", api_key="unused", default_headers=headers, max_retries=0
    )


def test_a_completion_runs_the_agent(server: Server) -> None:
    client = sdk(server)

    completion = client.chat.completions.create(
        model="art", messages=[{"role": "user", "content": "What is 17 * 23 + 12?"}]
    )

    assert completion.choices[0].message.content == "The answer is 403."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    art_fields = completion.model_extra["art"]
    assert art_fields["status"] == "success" and art_fields["thread_id"].startswith("chat-")
    assert [m.id for m in client.models.list().data] == ["art"]


def test_a_streamed_completion_sends_the_answer_in_chunks(make_server: Any) -> None:
    answer = "Seventeen times twenty-three is 391, and 391 plus twelve is 403, which is the answer."
    server = make_server(synthesis=answer)  # more words than one buffered group holds
    client = sdk(server)

    stream = client.chat.completions.create(
        model="art",
        messages=[{"role": "user", "content": "sum?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answer
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_a_thread_header_keeps_the_conversation_in_art(server: Server) -> None:
    client = sdk(server, **{"X-Art-Thread-Id": "t-chat"})
    for question in ("first?", "second?"):
        client.chat.completions.create(
            model="art", messages=[{"role": "user", "content": question}]
        )

    history = server.client().get("/threads/t-chat").json()["history"]

    assert [m["content"] for m in history] == [
        "first?",
        "The answer is 403.",
        "second?",
        "The answer is 403.",
    ]


def test_without_a_thread_earlier_messages_reach_the_planner(server: Server) -> None:
    sdk(server).chat.completions.create(
        model="art",
        messages=[
            {"role": "user", "content": "My number is 17."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Multiply it by 23."},
        ],
    )

    prompt = server.model.calls_for("planning")[0].messages[-1]["content"]
    assert "user: My number is 17." in prompt and "assistant: Noted." in prompt
    assert "Multiply it by 23." in prompt


def test_a_suspended_run_says_what_it_waits_for(make_server: Any) -> None:
    server = make_server(APPROVAL_PLAN)

    completion = sdk(server).chat.completions.create(
        model="art", messages=[{"role": "user", "content": "go"}]
    )
    stream = sdk(server).chat.completions.create(
        model="art", messages=[{"role": "user", "content": "go"}], stream=True
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    assert completion.model_extra["art"]["status"] == "suspended"
    for text in (completion.choices[0].message.content, streamed):
        assert text.startswith("Waiting for a human decision on 1 step(s):")
        assert "s3 (ask_human)" in text and "Add 12?" in text and "/decision" in text


def test_a_failed_run_is_a_problem(make_server: Any) -> None:
    server = make_server({"steps": [{"id": "s1", "tool": "no_such_tool", "args": {}}]})

    with pytest.raises(openai.APIStatusError) as failed:
        sdk(server).chat.completions.create(
            model="art", messages=[{"role": "user", "content": "x"}]
        )

    assert failed.value.status_code == 502
    assert failed.value.code == "PLAN_INVALID"  # OpenAI's error shape, which the SDK reads
