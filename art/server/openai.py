"""An OpenAI-compatible `/v1/chat/completions` (plain and streamed) that runs the agent.

Chat front ends that speak OpenAI's API can use an art agent as a model: the last user
message is the query. The thread is the `X-Art-Thread-Id` header or the body's
`thread_id`, whose history art keeps itself (earlier messages in the request are then not
needed); without one, each request is a new thread and the earlier messages are given to
the planner as context inside the query. A run that suspends for approval answers with
what it waits for (decide it in the inspector or through the API); a failed run is a 502
problem. `/v1/models` lists the one model, `art`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

from fastapi import APIRouter, Depends, Header
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import ServerSentEvent
from starlette.responses import JSONResponse, Response

from art.core.json import JsonObject
from art.engine.suspension import suspended_message
from art.server.context import ServerContext, get_context
from art.server.principals import Principal, authenticated
from art.server.problems import Problem
from art.server.runs import ActiveRun
from art.server.settings import valid_thread_id
from art.server.sse import sse_event

__all__ = ["ChatRequest", "router"]

router = APIRouter(prefix="/v1", tags=["openai"])
Context = Annotated[ServerContext, Depends(get_context)]
Caller = Annotated[Principal, Depends(authenticated)]
MODEL_ID = "art"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """OpenAI's chat completion request; fields art has no use for are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = MODEL_ID
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    thread_id: str | None = Field(default=None, description="art: the thread to run on.")


def _text(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def _query(request: ChatRequest, threaded: bool) -> str:
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=None)
    if last_user is None:
        raise Problem(422, "the messages have no user message to answer")
    question = _text(request.messages[last_user])
    if not question.strip():
        raise Problem(422, "the last user message is empty", code="QUERY_EMPTY")
    earlier = [m for m in request.messages[:last_user] if m.role in ("user", "assistant")]
    if threaded or not earlier:
        return question
    lines = [f"{m.role}: {_text(m)}" for m in earlier]
    return "Conversation so far:\n" + "\n".join(lines) + f"\n\nAnswer this: {question}"


@router.get("/models")
async def list_models() -> JsonObject:
    """The models this endpoint serves: one, the agent."""
    return {
        "object": "list",
        "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "art"}],
    }


@router.post(
    "/chat/completions",
    responses={200: {"content": {"application/json": {}, "text/event-stream": {}}}},
)
async def chat_completions(
    body: ChatRequest,
    ctx: Context,
    caller: Caller,
    thread_header: Annotated[str | None, Header(alias="X-Art-Thread-Id", max_length=128)] = None,
) -> Response:
    """Run the agent on the last user message; a chat completion (or its chunks)."""
    thread_id = thread_header or body.thread_id
    if thread_id is not None and not valid_thread_id(thread_id):
        raise Problem(422, f"bad thread id {thread_id!r}: 1-128 letters, digits and ._:-")
    query = _query(body, threaded=thread_id is not None)
    if len(query) > ctx.settings.max_query_chars:
        raise Problem(422, "the query is too long for this server", code="QUERY_TOO_LONG")
    thread_id = thread_id or f"chat-{uuid.uuid4().hex[:16]}"
    await ctx.threads.claim(caller, thread_id)
    options = caller.run_options({}) or None
    active = await ctx.runs.start(thread_id, query, options)
    completion_id = f"chatcmpl-{active.run_id or uuid.uuid4().hex}"
    if body.stream:
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        chunks = _chunks(ctx, active, completion_id, body.model, include_usage)
        return ctx.streams.response(chunks, ping_s=ctx.settings.ping_interval_s)
    response = await active.wait()
    meta = response.metadata
    if meta.status == "error":
        error = meta.error
        raise Problem(
            502,
            f"the run failed: {error.message if error else 'unknown error'}",
            code=error.code if error else "RUN_FAILED",
        )
    usage = meta.usage
    content = response.content
    if meta.status == "suspended":
        content = await _waiting_text(ctx, active.thread_id, active.run_id)
    content = ctx.secrets.text(content)  # as the stored answer and the streamed chunks are
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
            "art": _art_fields(active, meta.status, list(meta.suspension_ids)),
        },
        headers={"X-Art-Thread-Id": active.thread_id},
    )


class _ArtFields(TypedDict):
    """What a completion says about art's run (its `art` field)."""

    thread_id: str
    run_id: str | None
    status: str
    suspension_ids: list[str]


def _art_fields(active: ActiveRun, status: str, suspension_ids: list[str]) -> _ArtFields:
    return {
        "thread_id": active.thread_id,
        "run_id": active.run_id,
        "status": status,
        "suspension_ids": suspension_ids,
    }


async def _chunks(
    ctx: ServerContext, active: ActiveRun, completion_id: str, model: str, include_usage: bool
) -> AsyncIterator[ServerSentEvent]:
    created = int(time.time())

    def chunk(delta: dict[str, str], finish: str | None = None, **extra: object) -> ServerSentEvent:
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return sse_event(json.dumps(body, ensure_ascii=False))

    yield chunk({"role": "assistant", "content": ""})
    streamed = False
    async for event in ctx.feed.session(active):
        data = event.data
        if event.name == "buffer:flush" and data.get("phase") == "synthesis":
            text = "".join(str(c) for c in data.get("chunks") or [])
            if text:
                streamed = True
                yield chunk({"content": text})
        elif event.name == "session:end":
            status = data.get("status")
            if status == "error":
                error = data.get("error") or {}
                problem = {"message": error.get("message"), "code": error.get("code")}
                yield sse_event(json.dumps({"error": problem}))
                break
            if not streamed:
                text = data.get("answer") or await _waiting_text(
                    ctx, active.thread_id, active.run_id
                )
                yield chunk({"content": text})
            suspension_ids = list(data.get("suspension_ids") or [])
            art = _art_fields(active, str(status), suspension_ids)
            yield chunk({}, "stop", art=art)
            if include_usage:
                usage = data.get("usage") or {}
                yield sse_event(
                    json.dumps(
                        {
                            "id": completion_id,
                            "object": "chat.completion.chunk",
                            "created": created,
                            "model": model,
                            "choices": [],
                            "usage": {
                                key: usage.get(key, 0)
                                for key in ("prompt_tokens", "completion_tokens", "total_tokens")
                            },
                        }
                    )
                )
            break
    yield sse_event("[DONE]")


async def _waiting_text(ctx: ServerContext, thread_id: str, run_id: str | None) -> str:
    """What a suspended run waits for, and where to decide it."""
    pending = await ctx.instance.storage.list_suspensions(thread_id)
    pending = [s for s in pending if s.run_id == run_id]
    hint = (
        ""
        if not pending
        else (
            f"\nDecide in the inspector, or with POST /threads/{thread_id}/suspensions/"
            f"{pending[0].suspension_id}/decision."
        )
    )
    return suspended_message(pending) + hint
