"""Helpers the built-in tools share: building success and error results."""

from __future__ import annotations

from typing import Any

from art.errors import ToolErrorCode
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult


def success(
    tool: IToolExecutor, context: ExecutionContext, output: Any, **metadata: Any
) -> ToolResult:
    return tool.ok(context, output, metadata)


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
    return tool.fail(
        context, message, code=code.value, retryable=retryable, output=output, metadata=metadata
    )
