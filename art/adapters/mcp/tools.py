"""MCPTool: one MCP server tool as an art `IToolExecutor`, and how its results are read.

What a call returns becomes a ToolResult this way:

- `structuredContent` is the `output`; the content blocks (text, images, ...) are kept
  beside it in `metadata["content"]`;
- otherwise text-only content is the `output` as one string (blocks joined by newlines);
- otherwise (images, audio, resources) the `output` is the list of content blocks in MCP's
  JSON form, binary data as base64: `{"type": "image", "mimeType": "image/png", "data": ...}`;
- `isError` makes an error result whose `error` is the server's text (error code UNKNOWN,
  not retried).

Every result carries `metadata["mcp_server"]` and `metadata["mcp_tool"]` (the MCP name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from art.adapters.mcp.connection import MCPCallError
from art.core.log import get_logger
from art.errors import ToolErrorCode
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tooling.registry import build_validator

if TYPE_CHECKING:
    import mcp_types

    from art.adapters.mcp.connection import ProgressCallback

__all__ = ["MCPTool", "tool_result"]

log = get_logger(__name__)
_PERMISSIVE_INPUT: dict[str, Any] = {"type": "object"}


class ToolCaller(Protocol):
    """What an `MCPTool` calls its server through (an `MCPClient`)."""

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        on_progress: ProgressCallback | None = None,
    ) -> mcp_types.CallToolResult: ...


class MCPTool(IToolExecutor):
    """A tool of an MCP server, called through the `MCPClient` that listed it."""

    def __init__(self, client: ToolCaller, server: str, tool: mcp_types.Tool, name: str) -> None:
        self.client = client
        self.server_name = server
        #: The tool's name on its server (what is sent in `tools/call`).
        self.mcp_name = tool.name
        self.mcp_tool = tool
        self.schema = ToolSchema(
            name=name,
            description=_description(server, tool),
            input_schema=_input_schema(server, tool),
            output_schema=tool.output_schema,
        )

    def __repr__(self) -> str:
        return f"MCPTool({self.schema.name!r}, server={self.server_name!r}, mcp={self.mcp_name!r})"

    async def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        def on_progress(progress: float, total: float | None, message: str | None) -> None:
            # MCP progress carries no partial output: a `running` update.
            title = message or (f"{progress:g}/{total:g}" if total else f"{progress:g}")
            context.progress(title, {"progress": progress, "total": total, "message": message})

        try:
            result = await self.client.call(self.server_name, self.mcp_name, input, on_progress)
        except MCPCallError as exc:
            return ToolResult(
                call_id=context.call_id,
                tool_name=self.schema.name,
                status="error",
                error=exc.message,
                metadata={
                    "error_code": exc.code.value,
                    "retryable": exc.retryable,
                    **self._origin(),
                },
            )
        return tool_result(result, context.call_id, self.schema.name, self._origin())

    def _origin(self) -> dict[str, str]:
        return {"mcp_server": self.server_name, "mcp_tool": self.mcp_name}


def tool_result(
    result: mcp_types.CallToolResult,
    call_id: str,
    tool_name: str,
    metadata: dict[str, Any] | None = None,
) -> ToolResult:
    """The ToolResult of an MCP `CallToolResult` (see the module docstring)."""
    blocks = [
        block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
    ]
    texts = [block["text"] for block in blocks if block.get("type") == "text"]
    meta = dict(metadata or {})
    if result.is_error:
        if len(texts) < len(blocks):
            meta["content"] = blocks
        return ToolResult(
            call_id=call_id,
            tool_name=tool_name,
            status="error",
            error="\n".join(texts) or "the MCP tool reported an error without a message",
            metadata={"error_code": ToolErrorCode.UNKNOWN.value, "retryable": False, **meta},
        )
    if result.structured_content is not None:
        output: Any = result.structured_content
        meta["content"] = blocks
    elif len(texts) == len(blocks):
        output = "\n".join(texts)
    else:
        output = blocks
    return ToolResult(
        call_id=call_id, tool_name=tool_name, status="success", output=output, metadata=meta
    )


def _description(server: str, tool: mcp_types.Tool) -> str:
    text = (tool.description or "").strip() or (tool.title or "").strip()
    return text or f"The {tool.name!r} tool of the MCP server {server!r}."


def _input_schema(server: str, tool: mcp_types.Tool) -> dict[str, Any]:
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
