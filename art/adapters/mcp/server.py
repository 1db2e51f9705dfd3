"""art as an MCP server: an MCP client (Claude Desktop, an IDE, another agent) asks a
question in one tool call and art's planner runs the tools behind it.

Four tools, over stdio or Streamable HTTP:

- `query(question, thread_id?)`: plan, execute and synthesize; the answer as text and, as
  structured content, the status, plan, step outputs, usage and any pending suspensions.
  Progress notifications report the plan and each step as it finishes.
- `plan(question, thread_id?)`: the plan only (nothing runs).
- `list_suspensions(thread_id?)`: steps waiting for a human decision.
- `decide_suspension(thread_id, suspension_id, approved, reason?, modified_args?)`: decide
  one and finish the run (same result as `query`).

A client's `notifications/cancelled` cancels the run (it ends with code CANCELLED).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

from pydantic_core import to_jsonable_python

import art
from art.core.binary import bytes_to_json
from art.core.json import JsonObject, JsonValue
from art.core.log import get_logger
from art.errors import ArtError
from art.tooling.registry import build_validator, input_errors

if TYPE_CHECKING:
    import mcp_types
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from jsonschema.protocols import Validator
    from mcp.server import Server
    from mcp.server.context import ServerRequestContext
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCError
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Receive, Scope, Send

    from art.instance import ArtInstance
    from art.observe.events import Event
    from art.responses import AgentFinalResponse

__all__ = ["ANNOTATIONS", "TOOLS", "aserve", "create_mcp_server", "serve", "streamable_http_app"]

log = get_logger(__name__)

ServerTransport = Literal["stdio", "http"]

#: The longest question the query and plan tools take (what `art serve` takes by default).
MAX_QUESTION_CHARS = 32_000
# What a thread id may be: what `art serve` takes in a URL (art.server.settings).
_THREAD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
_THREAD_ID: JsonObject = {
    "type": "string",
    "pattern": _THREAD_ID_PATTERN,
    "description": "The conversation thread; give the thread_id of an earlier result to "
    "ask a follow-up. A new thread when omitted. 1-128 letters, digits and `._:-`, starting "
    "with a letter or digit.",
}
_QUESTION: JsonObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_QUESTION_CHARS,
    "description": "What to ask the agent.",
}
_RUN_RESULT: JsonObject = {
    "type": "object",
    "properties": {
        "status": {"enum": ["success", "partial", "error", "suspended"]},
        "answer": {"type": "string"},
        "thread_id": {"type": "string"},
        "run_id": {"type": ["string", "null"]},
        "plan": {"type": ["object", "null"], "description": "The plan in art's wire form."},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "tool": {"type": ["string", "null"]},
                    "status": {"type": "string"},
                    "output": {},
                    "error": {"type": ["string", "null"]},
                },
                "required": ["id", "status"],
            },
        },
        "usage": {"type": "object"},
        "llm_calls": {"type": "integer"},
        "tool_calls": {"type": "integer"},
        "duration_ms": {"type": "number"},
        "error": {"type": ["object", "null"]},
        "suspensions": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["status", "answer", "thread_id", "steps"],
}
_SUSPENSIONS: JsonObject = {
    "type": "object",
    "properties": {"suspensions": {"type": "array", "items": {"type": "object"}}},
    "required": ["suspensions"],
}

#: name -> (description, inputSchema, outputSchema)
TOOLS: dict[str, tuple[str, JsonObject, JsonObject]] = {
    "query": (
        "Ask the agent a question. It plans the tool steps needed, runs independent steps "
        "at the same time, and answers from their results. Returns the answer; the "
        "structured result also holds the plan, each step's output, the status and token "
        "usage. A status of 'suspended' means a step waits for a human decision: see "
        "list_suspensions and decide_suspension.",
        {
            "type": "object",
            "properties": {"question": _QUESTION, "thread_id": _THREAD_ID},
            "required": ["question"],
            "additionalProperties": False,
        },
        _RUN_RESULT,
    ),
    "plan": (
        "Show the plan the agent would follow for a question, without running anything. "
        "Returns the steps (tool, arguments, dependencies).",
        {
            "type": "object",
            "properties": {"question": _QUESTION, "thread_id": _THREAD_ID},
            "required": ["question"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"plan": {"type": "object"}},
            "required": ["plan"],
        },
    ),
    "list_suspensions": (
        "List the steps waiting for a human decision (human in the loop), with the "
        "question each asks and the suspension_id to decide it with.",
        {
            "type": "object",
            "properties": {
                "thread_id": {
                    "type": "string",
                    "pattern": _THREAD_ID_PATTERN,
                    "description": "Only this thread (default: the 100 most recent threads).",
                }
            },
            "additionalProperties": False,
        },
        _SUSPENSIONS,
    ),
    "decide_suspension": (
        "Approve or reject a step waiting for a human decision; the run then goes on. "
        "Returns the same result as query.",
        {
            "type": "object",
            "properties": {
                "thread_id": {"type": "string", "pattern": _THREAD_ID_PATTERN},
                "suspension_id": {"type": "string", "maxLength": 200},
                "approved": {"type": "boolean"},
                "reason": {"type": "string", "description": "Why (the agent sees it)."},
                "modified_args": {
                    "type": "object",
                    "description": "Run the step with these arguments instead.",
                },
            },
            "required": ["thread_id", "suspension_id", "approved"],
            "additionalProperties": False,
        },
        _RUN_RESULT,
    ),
}
#: The tools' MCP annotations (hints for clients that ask before a call): `query` and
#: `decide_suspension` run tools, but every tool that must ask a person asks through
#: art's own suspensions, so neither is destructive itself.
ANNOTATIONS: dict[str, dict[str, bool]] = {
    "query": {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": True},
    "plan": {"readOnlyHint": True, "openWorldHint": False},
    "list_suspensions": {"readOnlyHint": True, "openWorldHint": False},
    "decide_suspension": {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": True},
}
# Events a query reports as progress, besides the finished steps.
_REPORTED = frozenset({"plan:created", "plan:updated", "step:status", "suspended"})
_FINISHED_STEP = frozenset({"completed", "failed", "skipped"})


def create_mcp_server(instance: ArtInstance, *, name: str = "art") -> Server[dict[str, object]]:
    """An MCP server (the SDK's low-level `Server`) answering with `instance`.

    Serve it yourself, or use `serve` / `aserve` / `streamable_http_app`. The instance
    stays yours: close it when the server is done."""
    from mcp.server import Server

    tools = _Tools(instance)
    return Server(
        name,
        version=art.__version__,
        instructions=(
            "An art agent: call query with a question; it plans and runs tools in parallel "
            "and returns the answer with the plan and each step's output."
        ),
        on_list_tools=tools.list_tools,
        on_call_tool=tools.call_tool,
    )


def streamable_http_app(
    instance: ArtInstance,
    *,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    name: str = "art",
    api_keys: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """A Starlette app serving `instance` over Streamable HTTP at `path` (mount it, or run
    it with any ASGI server).

    It answers only to the loopback names, `host` (the address it is reached on, unless a
    wildcard) and `allowed_hosts` as Host, and to pages of those origins (DNS rebinding);
    with `api_keys`, every request needs `Authorization: Bearer <one of them>`."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = ["127.0.0.1", "localhost", "[::1]", *allowed_hosts]
    if host not in _WILDCARDS:
        names.append(f"[{host}]" if ":" in host else host)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[pattern for n in names for pattern in (n, f"{n}:*")],
        allowed_origins=[
            f"{scheme}://{n}{port}"
            for n in names
            for scheme in ("http", "https")
            for port in ("", ":*")
        ],
    )
    server = create_mcp_server(instance, name=name)
    app = server.streamable_http_app(
        streamable_http_path=path, host=host, transport_security=security
    )
    if api_keys:
        app.add_middleware(_KeyCheck, keys=list(api_keys))
    return app


_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


class _KeyCheck:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer <one of keys>`."""

    def __init__(self, app: ASGIApp, keys: Sequence[str]) -> None:
        self.app = app
        self._keys = [key.encode() for key in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        # Compare with every key, always: the time taken says nothing about which matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(given.strip(), key)
        if scheme.lower() == b"bearer" and matched:
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {"error": "this server needs an API key: send Authorization: Bearer <key>"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="art"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class ServeOptions(TypedDict, total=False):
    """`aserve`'s keyword arguments, which `serve` passes on."""

    host: str
    port: int
    path: str
    name: str
    ready: Callable[[str], None] | None
    api_keys: Sequence[str]
    allow_unauthenticated: bool
    allowed_hosts: Sequence[str]


async def aserve(
    instance: ArtInstance,
    transport: ServerTransport = "stdio",
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    name: str = "art",
    ready: Callable[[str], None] | None = None,
    api_keys: Sequence[str] = (),
    allow_unauthenticated: bool = False,
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve `instance` until the client hangs up (stdio) or the process is stopped (HTTP).

    Over HTTP, without `api_keys` it refuses to listen beyond loopback unless
    `allow_unauthenticated` (a proxy in front authenticates); see `streamable_http_app`.
    `ready` is called with a line saying where it listens, once it does."""
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        server = create_mcp_server(instance, name=name)
        async with stdio_server() as (read_stream, write_stream):
            if ready is not None:
                ready("serving MCP over stdio")
            async with _answering_unreadable(read_stream, write_stream) as requests:
                await server.run(requests, write_stream, server.create_initialization_options())
        return
    if transport != "http":
        raise ValueError(f"transport must be 'stdio' or 'http', got {transport!r}")
    import socket

    import uvicorn

    from art.server.settings import ServerSettings

    # The rules of `art serve`: keys of 16+ characters; none beyond loopback only by choice.
    ServerSettings(
        host=host, api_keys=list(api_keys), allow_unauthenticated=allow_unauthenticated
    ).check_exposure()
    app = streamable_http_app(
        instance, path=path, host=host, name=name, api_keys=api_keys, allowed_hosts=allowed_hosts
    )
    # Bound here, so port 0 picks a free port that `ready` can name.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    http = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    if ready is not None:
        where = f"[{host}]" if ":" in host else host
        ready(f"serving MCP at http://{where}:{bound}{path}")
    try:
        await http.serve(sockets=[sock])
    finally:
        sock.close()


@contextlib.asynccontextmanager
async def _answering_unreadable(
    read_stream: MemoryObjectReceiveStream[SessionMessage | Exception],
    write_stream: MemoryObjectSendStream[SessionMessage],
) -> AsyncIterator[MemoryObjectReceiveStream[SessionMessage | Exception]]:
    """`read_stream` as the server reads it, except that a request the SDK could not read
    (pydantic's JSON parser stops at 200 levels of nesting) is answered with an error
    naming why, instead of never: the client would wait for ever."""
    import anyio
    from mcp.shared.message import SessionMessage

    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def forward() -> None:
        async with send:
            async for item in read_stream:
                if isinstance(item, Exception):
                    answer = _invalid_request_answer(item)
                    if answer is not None:
                        await write_stream.send(SessionMessage(answer))
                        continue
                await send.send(item)

    async with anyio.create_task_group() as group:
        group.start_soon(forward)
        try:
            yield receive
        finally:
            group.cancel_scope.cancel()


def _invalid_request_answer(error: Exception) -> JSONRPCError | None:
    """The JSON-RPC error answering the request whose text failed to parse as `error`, or
    None when it is not a request with an id (nothing to answer)."""
    from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return None
    text = next((e.get("input") for e in error.errors() if "input" in e), None)
    if not isinstance(text, str | bytes):
        return None
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    if type(request_id) not in (int, str) or "method" not in message:
        return None
    reason = error.errors()[0].get("msg", "not a valid request")
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(code=INVALID_REQUEST, message=f"invalid request: {reason}"),
    )


def serve(
    instance: ArtInstance, transport: ServerTransport = "stdio", **options: Unpack[ServeOptions]
) -> None:
    """Sync `aserve` (blocks until the server stops)."""
    asyncio.run(aserve(instance, transport, **options))


class _Tools:
    """The server's tool handlers, over one ArtInstance."""

    def __init__(self, instance: ArtInstance) -> None:
        self.instance = instance
        self._validators: dict[str, Validator] = {}

    async def list_tools(
        self,
        ctx: ServerRequestContext[dict[str, object]],
        params: mcp_types.PaginatedRequestParams | None,
    ) -> mcp_types.ListToolsResult:
        from mcp_types import ListToolsResult, Tool, ToolAnnotations

        return ListToolsResult(
            tools=[
                Tool(
                    name=name,
                    description=text,
                    input_schema=inputs,
                    output_schema=outputs,
                    annotations=ToolAnnotations.model_validate(ANNOTATIONS[name]),
                )
                for name, (text, inputs, outputs) in TOOLS.items()
            ]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[dict[str, object]], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        from mcp import MCPError
        from mcp_types import INVALID_PARAMS

        name, args = params.name, dict(params.arguments or {})
        if name not in TOOLS:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        if problems := self._problems(name, args):
            return _error_result(f"invalid arguments for {name}: " + "; ".join(problems))
        try:
            if name == "query":
                thread_id = args.get("thread_id") or f"mcp-{uuid.uuid4().hex[:12]}"
                response = await self._with_progress(
                    ctx, thread_id, lambda: self.instance.aprocess(args["question"], thread_id)
                )
                return await self._run_result(response, thread_id)
            if name == "decide_suspension":
                thread_id = args["thread_id"]
                decision = {
                    "approved": args["approved"],
                    "reason": args.get("reason"),
                    "modified_args": args.get("modified_args"),
                }
                response = await self._with_progress(
                    ctx,
                    thread_id,
                    lambda: self.instance.aresume_execution(
                        thread_id, args["suspension_id"], decision
                    ),
                )
                return await self._run_result(response, thread_id)
            if name == "plan":
                plan = await self.instance.aplan(args["question"], args.get("thread_id"))
                return _structured({"plan": plan.to_wire()}, _plan_text(plan.to_wire()))
            return _structured(
                {"suspensions": await self._suspensions(args.get("thread_id"))},
                None,
            )
        except Exception as exc:
            if not isinstance(exc, ArtError):
                log.exception("MCP tool call failed inside art", tool=name)
                return _error_result(f"{name} failed: {type(exc).__name__}: {exc}")
            return _error_result(f"{name} failed ({exc.code}): {exc.message}")

    async def _run_result(
        self, response: AgentFinalResponse, thread_id: str
    ) -> mcp_types.CallToolResult:
        suspensions = []
        if response.metadata.status == "suspended":
            suspensions = await self._suspensions(response.metadata.thread_id or thread_id)
        return _run_result(response, thread_id, suspensions)

    def _problems(self, name: str, args: Mapping[str, object]) -> list[str]:
        validator = self._validators.get(name)
        if validator is None:
            validator = self._validators[name] = build_validator(TOOLS[name][1])
        return input_errors(validator, args)

    async def _with_progress(
        self,
        ctx: ServerRequestContext[dict[str, object]],
        thread_id: str,
        start: Callable[[], Awaitable[AgentFinalResponse]],
    ) -> AgentFinalResponse:
        """Run `start()` (a run on `thread_id`), reporting its plan and finished steps as
        MCP progress; a cancelled call cancels the run and waits for it to end."""
        import anyio

        queue: asyncio.Queue[Event | None] = asyncio.Queue()

        def sink(event: Event) -> None:
            if event.thread_id == thread_id and event.name in _REPORTED:
                queue.put_nowait(event)

        unsubscribe = self.instance.events.subscribe(sink)
        reporter = asyncio.ensure_future(_report_progress(ctx, queue))
        run = asyncio.ensure_future(start())
        try:
            return await asyncio.shield(run)
        except asyncio.CancelledError:
            if not self.instance.cancel(thread_id, "cancelled by the MCP client"):
                run.cancel()
            with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                await run  # the run records its end (CANCELLED) before the call is dropped
            raise
        finally:
            unsubscribe()
            queue.put_nowait(None)
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await reporter

    async def _suspensions(self, thread_id: str | None) -> list[JsonValue]:
        inst = self.instance
        if thread_id is not None:
            threads = [thread_id]
        else:
            threads = [t.thread_id for t in await inst.alist_threads(limit=100)]
        found: list[JsonValue] = []
        for thread in threads:
            state = await inst.acheck_for_suspended_state(thread)
            if state is None:
                continue
            found.extend(
                {
                    "thread_id": thread,
                    "suspension_id": s.suspension_id,
                    "run_id": s.run_id,
                    "step_id": s.step_id,
                    "tool": s.tool_name,
                    "args": _jsonable(s.args),
                    "prompt": _jsonable(s.prompt),
                    "query": state.query,
                }
                for s in state.suspensions
            )
        return found


async def _report_progress(
    ctx: ServerRequestContext[dict[str, object]], queue: asyncio.Queue[Event | None]
) -> None:
    """Send the run's events from `queue` as progress notifications until None comes."""
    total: int | None = None
    done = 0
    while (event := await queue.get()) is not None:
        data = event.data
        if event.name in ("plan:created", "plan:updated"):
            steps = data.get("steps")
            plan = data.get("plan")
            if not isinstance(steps, int) and isinstance(plan, dict):
                steps = len(plan.get("steps", []))
            total = steps if isinstance(steps, int) else total
            message = f"planned {total} steps" if event.name == "plan:created" else "replanned"
        elif event.name == "step:status":
            if data.get("status") not in _FINISHED_STEP:
                continue
            done += 1
            message = (
                f"{data.get('step_id')} {data.get('tool') or 'reasoning'}: {data.get('status')}"
            )
        else:
            message = "waiting for a human decision (see list_suspensions)"
        try:
            await ctx.session.report_progress(done, total, message)
        except Exception:  # the client went away: the run goes on
            log.debug("could not send MCP progress", exc_info=True)


def _run_result(
    response: AgentFinalResponse, thread_id: str, suspensions: list[JsonValue]
) -> mcp_types.CallToolResult:
    meta = response.metadata
    structured: JsonObject = {
        "status": meta.status,
        "answer": response.content,
        "thread_id": meta.thread_id or thread_id,
        "run_id": meta.run_id,
        "plan": response.plan.to_wire() if response.plan is not None else None,
        "steps": [
            {
                "id": record.step_id,
                "tool": record.tool,
                "status": record.status,
                "output": _jsonable(record.output),
                "error": (record.result.error if record.result is not None else None)
                or record.reason,
            }
            for record in response.steps
        ],
        "usage": meta.usage.model_dump(mode="json"),
        "llm_calls": meta.llm_calls,
        "tool_calls": meta.tool_calls,
        "duration_ms": meta.total_duration_ms,
        "error": meta.error.model_dump(mode="json") if meta.error is not None else None,
        "suspensions": suspensions,
    }
    text = response.content
    if meta.status == "suspended":
        text += f"\n(thread_id {structured['thread_id']}; decide with decide_suspension)"
    return _structured(structured, text, is_error=meta.status == "error")


def _jsonable(value: object) -> JsonValue:
    """`value` as JSON data, bytes as art's `{"$bytes": "<base64>"}` (`art.core.binary`)."""
    data: JsonValue = to_jsonable_python(bytes_to_json(value), fallback=str)
    return data


def _structured(
    data: JsonObject, text: str | None, *, is_error: bool = False
) -> mcp_types.CallToolResult:
    from mcp_types import CallToolResult, TextContent

    body = text if text is not None else json.dumps(data, ensure_ascii=False, default=str)
    return CallToolResult(
        content=[TextContent(type="text", text=body)],
        structured_content=data,
        is_error=is_error,
    )


def _error_result(message: str) -> mcp_types.CallToolResult:
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _plan_text(plan: JsonObject) -> str:
    lines = [f"Plan: {plan.get('title') or 'untitled'}"]
    steps = plan.get("steps")
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, dict):
            continue
        what = step.get("tool") or "reasoning"
        args = json.dumps(step.get("args", {}), ensure_ascii=False, default=str)
        after = step.get("dependsOn")
        shown = ", ".join(map(str, after)) if isinstance(after, list) else ""
        lines.append(f"- {step.get('id')} {what} {args}" + (f" (after {shown})" if shown else ""))
    return "\n".join(lines)
