"""What `art mcp` and `art tools` do (art/cli/app.py declares their options and calls these).

The MCP SDK is an optional extra: it is imported inside the commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from art.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Output,
    build_instance,
    builtin_tools,
    escape,
    load_instance,
    load_tools,
    one_line,
)

if TYPE_CHECKING:
    from art.adapters.mcp.client import ServerStatus
    from art.adapters.mcp.tools import MCPTool
    from art.core.json import JsonObject
    from art.tooling.contract import ToolSchema

__all__ = ["list_tools", "serve_command"]


async def serve_command(
    *,
    instance: str | None,
    model: str | None,
    storage: str | None,
    tools: list[str] | None,
    mcp_config: Path | None,
    http: bool,
    host: str,
    port: int,
    path: str,
    api_keys: list[str] | None = None,
    no_auth: bool = False,
    allowed_hosts: list[str] | None = None,
) -> int:
    """`art mcp`: serve an agent over stdio (or Streamable HTTP) until stopped."""
    from art.adapters.mcp.server import aserve
    from art.server.settings import ServerSettings, keys_from_env

    if instance is not None and (model or storage or tools or mcp_config):
        raise CliError(
            "CONFIG_ERROR",
            "--instance builds the whole agent: leave out --model, --storage, --tools "
            "and --mcp-config (configure them in the instance)",
            EXIT_USAGE,
        )
    keys = list(api_keys or keys_from_env())
    if http:  # refused before anything starts: keys of 16+ characters, loopback without
        ServerSettings(host=host, api_keys=keys, allow_unauthenticated=no_auth).check_exposure()
    inst = (
        load_instance(instance) if instance else build_instance(model, storage, tools, mcp_config)
    )

    def ready(line: str) -> None:
        print(f"art: {line}", file=sys.stderr, flush=True)

    async with inst:
        await aserve(
            inst,
            "http" if http else "stdio",
            host=host,
            port=port,
            path=path,
            ready=ready,
            api_keys=keys,
            allow_unauthenticated=no_auth,
            allowed_hosts=allowed_hosts or (),
        )
    return EXIT_OK


async def list_tools(out: Output, tools: list[str] | None, mcp_config: Path | None) -> int:
    """`art tools`: the tools an agent gets from these options, and how its MCP servers are."""
    from art.adapters.mcp.client import MCPClient
    from art.tooling.registry import ToolRegistry

    # Registered as the agent would register them: a tool it would refuse is refused here.
    local = ToolRegistry(load_tools(tools) if tools else builtin_tools()).schemas()
    client = MCPClient(mcp_config) if mcp_config is not None else None
    try:
        if client is not None:
            await client.astart(strict=False)
        rows = [_local_row(schema, "--tools" if tools else "built-in") for schema in local]
        rows += [_mcp_row(tool) for tool in (client.tools if client is not None else [])]
        servers = client.status() if client is not None else []
    finally:
        if client is not None:
            await client.aclose()
    failed = [s for s in servers if s.state == "failed"]
    if out.json:
        out.emit_json(
            {
                "tools": rows,
                "mcp_servers": [
                    {
                        "name": s.name,
                        "state": s.state,
                        "transport": s.transport,
                        "target": s.target,
                        "protocol_version": s.protocol_version,
                        "tools": s.tools,
                        "error": s.error,
                        "left_out": s.left_out,
                    }
                    for s in servers
                ],
            }
        )
    else:
        _print_tools(out, rows, servers)
    return EXIT_ERROR if failed else EXIT_OK


class _ToolRow(TypedDict):
    """A tool as `art tools` lists it."""

    name: str
    source: str
    mcp_tool: NotRequired[str]
    description: str
    input_schema: JsonObject
    output_schema: NotRequired[JsonObject | None]


def _local_row(schema: ToolSchema, source: str) -> _ToolRow:
    return {
        "name": schema.name,
        "source": source,
        "description": schema.description,
        "input_schema": schema.input_schema,
    }


def _mcp_row(tool: MCPTool) -> _ToolRow:
    schema = tool.schema
    return {
        "name": schema.name,
        "source": f"mcp:{tool.server_name}",
        "mcp_tool": tool.mcp_name,
        "description": schema.description,
        "input_schema": schema.input_schema,
        "output_schema": schema.output_schema,
    }


def _print_tools(out: Output, rows: list[_ToolRow], servers: list[ServerStatus]) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("tool", "from", "description"):
        table.add_column(column, overflow="fold" if column == "description" else "ellipsis")
    for row in rows:
        origin = row["source"]
        if "mcp_tool" in row:
            origin += f" ({row['mcp_tool']})"
        table.add_row(row["name"], escape(origin), escape(one_line(row["description"], 90)))
    out.console.print(table)
    if not servers:
        return
    out.console.print()
    for s in servers:
        style = {"running": "green", "failed": "red"}.get(s.state, "dim")
        line = (
            f"[{style}]{s.state}[/] MCP server [bold]{escape(s.name)}[/] ({s.transport}: "
            f"{escape(s.target)}): {len(s.tools)} tools"
        )
        out.console.print(line)
        for tool, reason in s.left_out.items():
            out.console.print(f"  [dim]left out {escape(tool)}: {escape(reason)}[/]")
        if s.error:
            out.errors.print(f"  [red]{escape(s.error)}[/]")
