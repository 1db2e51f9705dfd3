"""Helpers the built-in tools share: building success and error results."""

from __future__ import annotations

from typing import Any

from art.errors import ToolErrorCode
from art.tooling import ExecutionContext, IToolExecutor, ToolResult


def success(
    tool: IToolExecutor, context: ExecutionContext, output: Any, **metadata: Any
) -> ToolResult:
    return ToolResult(
        call_id=context.call_id,
        tool_name=tool.schema.name,
        status="success",
        output=output,
        metadata=metadata,
    )


def failure(
    tool: IToolExecutor,
    context: ExecutionContext,
    code: ToolErrorCode,
    message: str,
    *,
    retryable: bool = False,
    output: Any = None,
    **metadata: Any,
) -> ToolResult:
    return ToolResult(
        call_id=context.call_id,
        tool_name=tool.schema.name,
        status="error",
        output=output,
        error=message,
        metadata={**metadata, "error_code": code.value, "retryable": retryable},
    )
