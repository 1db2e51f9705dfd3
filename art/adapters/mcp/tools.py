"""MCPTool: one MCP server tool as an art `IToolExecutor`, and how its results are read.

What a call returns becomes a ToolResult this way:

- `structuredContent` is the `output`; the content blocks (text, images, ...) are kept
  beside it in `metadata["content"]`;
- otherwise text-only content is the `output` as one string (blocks joined by newlines);
- otherwise (images, audio, resources) the `output` is the list of content blocks in MCP's
  JSON form with binary data decoded to `bytes`: `{"type": "image", "mimeType":
  "image/png", "data": b"..."}`, an embedded resource's `blob` likewise. Like any bytes in
  an output they are kept as bytes, and prompts describe them (`<binary data: 2,048 bytes,
  image/png>`) instead of holding them (see `art.core.binary`);
- `isError` makes an error result whose `error` is the server's text, not retried: error
  code VALIDATION_ERROR when the text is a server SDK's argument rejection (the
  TypeScript SDK's `MCP error -32602: Input validation error: ...`, the Python SDK's
  `Error executing tool X: 1 validation error for ...`), UNKNOWN otherwise.

Every result carries `metadata["mcp_server"]` and `metadata["mcp_tool"]` (the MCP name).

A tool the server's config says asks first (`MCPServerConfig.asks_before`: its annotations,
`approval`, `autoApprove` / `alwaysAllow`, `requireApproval`) is a blocking tool that runs
on approval: its first call suspends the run with the question, and an approval runs it
with the approved arguments. A failure outside the tool that could be retried (a timeout,
a server that went away mid-call) is marked retryable only for a tool whose annotations
say it is read-only or idempotent: the failed call may have had its effect.

A server's log notifications while the call runs become `running` progress updates, and
its elicitation (a question for a person) suspends the step (`ASKS_FOR_INPUT`); the
answer runs the call again (see `_Elicitation`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from art.adapters.mcp.connection import MCPCallError
from art.core.json import JsonObject
from art.core.log import get_logger
from art.core.serialization import safe_stringify
from art.errors import ToolErrorCode
from art.tooling.contract import (
    ASKS_FOR_INPUT,
    RUN_ON_APPROVAL,
    ExecutionContext,
    IToolExecutor,
    ToolResult,
    ToolSchema,
)
from art.tooling.registry import build_validator

if TYPE_CHECKING:
    import mcp_types

    from art.adapters.mcp.connection import ElicitCallback, LogCallback, ProgressCallback

__all__ = ["MCPTool", "tool_result"]

log = get_logger(__name__)
_PERMISSIVE_INPUT: JsonObject = {"type": "object"}
# How the server SDKs word a tool call whose arguments failed the tool's input schema: the
# TypeScript SDK (JSON-RPC's -32602 as an isError result) and the Python SDK (pydantic's
# message inside its ToolError).
_ARGUMENTS_REJECTED = re.compile(
    r"MCP error -32602\b|Input validation error\b"
    r"|Error executing tool \S+: \d+ validation errors? for "
)


class ToolCaller(Protocol):
    """What an `MCPTool` calls its server through (an `MCPClient`)."""

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, object],
        on_progress: ProgressCallback | None = None,
        on_log: LogCallback | None = None,
        on_elicit: ElicitCallback | None = None,
    ) -> mcp_types.CallToolResult: ...


class MCPTool(IToolExecutor):
    """A tool of an MCP server, called through the `MCPClient` that listed it."""

    def __init__(
        self,
        client: ToolCaller,
        server: str,
        tool: mcp_types.Tool,
        name: str,
        *,
        asks_first: bool = False,
    ) -> None:
        self.client = client
        self.server_name = server
        #: The tool's name on its server (what is sent in `tools/call`).
        self.mcp_name = tool.name
        self.mcp_tool = tool
        #: Whether a call waits for a person's approval first (`MCPServerConfig.asks_before`).
        self.asks_first = asks_first
        hints = tool.annotations
        #: Whether calling again after a failure cannot repeat an effect (MCP's defaults:
        #: not read-only, not idempotent).
        self.safe_to_retry = bool(hints and (hints.read_only_hint or hints.idempotent_hint))
        self.schema = ToolSchema(
            name=name,
            description=_description(server, tool),
            input_schema=_input_schema(server, tool),
            output_schema=tool.output_schema,
            execution_mode="blocking" if self.asks_first else "functional",
            blocking_config={RUN_ON_APPROVAL: True} if self.asks_first else None,
        )

    def __repr__(self) -> str:
        return f"MCPTool({self.schema.name!r}, server={self.server_name!r}, mcp={self.mcp_name!r})"

    async def execute(self, input: dict[str, object], context: ExecutionContext) -> ToolResult:
        if self.asks_first and context.decision is None:
            return ToolResult(
                call_id=context.call_id,
                tool_name=self.schema.name,
                status="suspended",
                output=self._question(input),
                metadata=self._origin(),
            )

        def on_progress(progress: float, total: float | None, message: str | None) -> None:
            # MCP progress carries no partial output: a `running` update.
            title = message or (f"{progress:g}/{total:g}" if total else f"{progress:g}")
            context.progress(title, {"progress": progress, "total": total, "message": message})

        def on_log(level: str, logger: str | None, data: object) -> None:
            # A server's log message while the call runs: a `running` update.
            text = data if isinstance(data, str) else safe_stringify(data, 500)
            context.progress(
                f"{level}: {text}", {"mcp_log": {"level": level, "logger": logger, "data": data}}
            )

        elicitation = _Elicitation(context.decision)
        try:
            result = await self.client.call(
                self.server_name, self.mcp_name, input, on_progress, on_log, elicitation.answer
            )
        except MCPCallError as exc:
            return ToolResult(
                call_id=context.call_id,
                tool_name=self.schema.name,
                status="error",
                error=exc.message,
                metadata={
                    "error_code": exc.code.value,
                    "retryable": exc.retryable and self.safe_to_retry,
                    **self._origin(),
                },
            )
        if elicitation.asked is not None:
            # The server asked a person something: the call was cancelled, and the run
            # waits for the answer; the call then runs again and gets it.
            return ToolResult(
                call_id=context.call_id,
                tool_name=self.schema.name,
                status="suspended",
                output=self._elicited(elicitation.asked, input),
                metadata={ASKS_FOR_INPUT: True, **self._origin()},
            )
        return tool_result(result, context.call_id, self.schema.name, self._origin())

    def _elicited(
        self, params: mcp_types.ElicitRequestParams, arguments: Mapping[str, object]
    ) -> dict[str, object]:
        """What the person asked by an elicitation is shown: the server's question and
        the form (answered as the decision's `modified_args`) or the URL to visit."""
        asked = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        asked.pop("_meta", None)
        return {
            "question": params.message,
            "elicitation": asked,
            "server": self.server_name,
            "tool": self.mcp_name,
            "arguments": arguments,
        }

    def _origin(self) -> dict[str, str]:
        return {"mcp_server": self.server_name, "mcp_tool": self.mcp_name}

    def _question(self, arguments: Mapping[str, object]) -> dict[str, object]:
        """What the reviewer of a call is shown."""
        hints = self.mcp_tool.annotations
        return {
            "question": f"Run the tool {self.mcp_name!r} of the MCP server "
            f"{self.server_name!r} with these arguments?",
            "server": self.server_name,
            "tool": self.mcp_name,
            "arguments": arguments,
            "annotations": hints.model_dump(mode="json", by_alias=True, exclude_none=True)
            if hints is not None
            else None,
        }


class _Elicitation:
    """One call's elicitation handler: the first request of a call that runs again with a
    person's answer (`decision["answer"]`) gets that answer; otherwise the request is
    kept (to suspend the run with it) and cancelled, and any later one declined."""

    def __init__(self, decision: Mapping[str, object] | None) -> None:
        self._answer = decision.get("answer") if decision else None
        self._answered = False
        self.asked: mcp_types.ElicitRequestParams | None = None

    async def answer(self, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        from mcp_types import ElicitResult

        if self._answer is not None and not self._answered:
            self._answered = True
            content = self._answer if params.mode == "form" else None
            return ElicitResult(action="accept", content=content)
        if self.asked is None and not self._answered:
            self.asked = params
            return ElicitResult(action="cancel")
        log.warning("MCP elicitation declined: the call already asks", message=params.message)
        return ElicitResult(action="decline")


def tool_result(
    result: mcp_types.CallToolResult,
    call_id: str,
    tool_name: str,
    metadata: Mapping[str, object] | None = None,
) -> ToolResult:
    """The ToolResult of an MCP `CallToolResult` (see the module docstring)."""
    blocks = [
        _with_bytes(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        for block in result.content
    ]
    texts = [str(block["text"]) for block in blocks if block.get("type") == "text"]
    meta = dict(metadata or {})
    if result.is_error:
        if len(texts) < len(blocks):
            meta["content"] = blocks
        error = "\n".join(texts) or "the MCP tool reported an error without a message"
        code = ToolErrorCode.VALIDATION_ERROR if _ARGUMENTS_REJECTED.match(error) else None
        return ToolResult(
            call_id=call_id,
            tool_name=tool_name,
            status="error",
            error=error,
            metadata={
                "error_code": (code or ToolErrorCode.UNKNOWN).value,
                "retryable": False,
                **meta,
            },
        )
    if result.structured_content is not None:
        output: object = result.structured_content
        meta["content"] = blocks
    elif len(texts) == len(blocks):
        output = "\n".join(texts)
    else:
        output = blocks
    return ToolResult(
        call_id=call_id, tool_name=tool_name, status="success", output=output, metadata=meta
    )


def _with_bytes(block: dict[str, object]) -> dict[str, object]:
    """A content block with its base64 data (an image's or audio's `data`, an embedded
    resource's `blob`) decoded to bytes; left as it is when the base64 is not valid."""
    data = block.get("data")
    if block.get("type") in ("image", "audio") and isinstance(data, str):
        decoded = _decoded(data)
        return block if decoded is None else {**block, "data": decoded}
    resource = block.get("resource")
    if block.get("type") == "resource" and isinstance(resource, dict):
        blob = resource.get("blob")
        if isinstance(blob, str) and (decoded := _decoded(blob)) is not None:
            return {**block, "resource": {**resource, "blob": decoded}}
    return block


def _decoded(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None


def _description(server: str, tool: mcp_types.Tool) -> str:
    text = (tool.description or "").strip() or (tool.title or "").strip()
    return text or f"The {tool.name!r} tool of the MCP server {server!r}."


def _input_schema(server: str, tool: mcp_types.Tool) -> JsonObject:
    """The tool's inputSchema, or a permissive one when it is not valid JSON Schema (the
    server still checks the arguments itself)."""
    from jsonschema.exceptions import SchemaError

    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    try:
        build_validator(schema)
    except SchemaError as exc:
        log.warning(
            "MCP tool has an invalid inputSchema; its arguments are not checked before the call",
            server=server,
            tool=tool.name,
            error=exc.message,
        )
        return dict(_PERMISSIVE_INPUT)
    return schema
