"""Helpers the built-in tools share: building success and error results."""

from __future__ import annotations

from art.errors import ToolErrorCode
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult


def success(
    tool: IToolExecutor, context: ExecutionContext, output: object, **metadata: object
) -> ToolResult:
    return tool.ok(context, output, metadata)


def failure(
    tool: IToolExecutor,
    context: ExecutionContext,
    code: ToolErrorCode,
    message: str,
    *,
    retryable: bool = False,
    output: object = None,
    **metadata: object,
) -> ToolResult:
    return tool.fail(
        context, message, code=code.value, retryable=retryable, output=output, metadata=metadata
    )
