"""MCP without servers: the config file, tool names, schemas and how results are read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mcp_types
import pytest

import art
from art.adapters.mcp import (
    MCPClient,
    MCPConfig,
    MCPServerConfig,
    MCPTool,
    load_mcp_config,
    tool_result,
)
from art.adapters.mcp.naming import snake_case, tool_names
from art.errors import ConfigurationError
from art.tooling.registry import TOOL_NAME_PATTERN, ToolRegistry

CLAUDE_DESKTOP = {
    "globalShortcut": "Ctrl+Space",  # another key of claude_desktop_config.json
    "mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        "remote": {"url": "https://mcp.example.com/mcp", "headers": {"X-Key": "k"}},
        "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
        "off": {"command": "nothing", "disabled": True, "autoApprove": ["x"]},
    },
}


def test_claude_desktop_file_is_read_with_transports_inferred(tmp_path):
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(CLAUDE_DESKTOP))
    config = MCPConfig.load(path)
    assert list(config.servers) == ["time", "remote", "legacy", "off"]
    time = config.servers["time"]
    assert (time.kind, time.command, time.args, time.env) == (
        "stdio",
        "uvx",
        ["mcp-server-time"],
        {"TZ": "UTC"},
    )
    assert config.servers["remote"].kind == "http"
    assert config.servers["remote"].headers == {"X-Key": "k"}
    assert config.servers["legacy"].kind == "sse"
    assert list(config.enabled()) == ["time", "remote", "legacy"]
    assert config.source == str(path)


def test_vs_code_servers_key_type_aliases_and_art_options():
    config = MCPConfig.from_dict(
        {
            "servers": {
                "a": {"type": "streamable-http", "url": "http://x/mcp", "timeout": 5},
                "b": {"type": "stdio", "command": "srv", "startupTimeout": 2.5, "cwd": "/tmp"},
            }
        }
    )
    assert config.servers["a"].kind == "http" and config.servers["a"].timeout_s == 5
    assert config.servers["b"].startup_timeout_s == 2.5 and config.servers["b"].cwd == "/tmp"


def test_environment_variables_are_expanded_with_defaults():
    config = MCPConfig.from_dict(
        {
            "mcpServers": {
                "api": {
                    "url": "https://${HOST}/mcp",
                    "headers": {"Authorization": "Bearer ${TOKEN}", "X-Mode": "${MODE:-fast}"},
                },
                "local": {"command": "${BIN:-srv}", "args": ["--key", "${TOKEN}"]},
            }
        },
        environ={"HOST": "mcp.example.com", "TOKEN": "s3cret"},
    )
    assert config.servers["api"].url == "https://mcp.example.com/mcp"
    assert config.servers["api"].headers == {"Authorization": "Bearer s3cret", "X-Mode": "fast"}
    assert config.servers["local"].command == "srv"
    assert config.servers["local"].args == ["--key", "s3cret"]


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"x": {"command": "a", "url": "http://b"}}, "either `command`"),
        ({"x": {"args": ["a"]}}, "either `command`"),
        ({"x": {"type": "stdio", "url": "http://b"}}, "needs `command`"),
        ({"x": {"command": "a", "argz": []}}, "argz"),
        ({"x": {"url": "http://${NOPE}/"}}, "${NOPE}, which is not set"),
        ({"My Server": {"command": "a"}, "my-server": {"command": "b"}}, "rename one"),
        ({"x": "just a string"}, 'no "mcpServers"'),
    ],
)
def test_bad_configs_are_refused_with_the_reason(servers, message):
    data = servers if "just a string" in str(servers) else {"mcpServers": servers}
    with pytest.raises(ConfigurationError) as caught:
        MCPConfig.from_dict(data, environ={})
    assert message in str(caught.value)


def test_unreadable_and_invalid_files_say_why(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read the MCP config"):
        MCPConfig.load(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {')
    with pytest.raises(ConfigurationError, match=r"not valid JSON: .* \(line 1, column 17\)"):
        load_mcp_config(broken)
    with pytest.raises(ConfigurationError, match="mcp_servers must be"):
        load_mcp_config(42)  # type: ignore[arg-type]


def test_config_in_code():
    config = load_mcp_config({"time": MCPServerConfig(command="python", args=["-m", "x"])})
    assert config.servers["time"].kind == "stdio"
    assert load_mcp_config(config) is config


@pytest.mark.parametrize(
    ("text", "snake"),
    [
        ("get-tiny-image", "get_tiny_image"),
        ("getWeather", "get_weather"),
        ("HTTPRequest", "http_request"),
        ("fetch.url", "fetch_url"),
        ("Café  Menu", "cafe_menu"),
        ("__x__y__", "x_y"),
        ("日本", ""),
    ],
)
def test_snake_case(text, snake):
    assert snake_case(text) == snake


def test_tool_names_are_prefixed_snake_case_and_unique():
    names = tool_names("My Files", ["readFile", "read-file", "read_file", "", "2fa"])
    assert names == {
        "readFile": "my_files__read_file",
        "read-file": "my_files__read_file_2",
        "read_file": "my_files__read_file_3",
        "": "my_files__tool",
        "2fa": "my_files__2fa",
    }
    assert tool_names("42", ["x"]) == {"x": "mcp_42__x"}
    assert all(TOOL_NAME_PATTERN.match(name) for name in [*names.values(), "mcp_42__x"])


def _tool(**fields):
    return mcp_types.Tool.model_validate(
        {"name": "get-weather", "inputSchema": {"type": "object"}, **fields}
    )


def test_mcp_tool_schema_carries_name_description_and_both_schemas():
    tool = _tool(
        description="Current weather for a city.",
        inputSchema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        outputSchema={"type": "object", "properties": {"celsius": {"type": "number"}}},
    )
    mcp_tool = MCPTool(None, "weather", tool, "weather__get_weather")  # type: ignore[arg-type]
    schema = mcp_tool.schema
    assert schema.name == "weather__get_weather"
    assert schema.description == "Current weather for a city."
    assert schema.input_schema["required"] == ["city"]
    assert schema.output_schema == {
        "type": "object",
        "properties": {"celsius": {"type": "number"}},
    }
    assert (mcp_tool.server_name, mcp_tool.mcp_name) == ("weather", "get-weather")
    assert ToolRegistry([mcp_tool]).validate_input("weather__get_weather", {}) == [
        "$: 'city' is a required property"
    ]


def test_a_tool_without_description_or_with_a_broken_schema_is_still_usable():
    tool = _tool(inputSchema={"type": "object", "properties": {"n": {"type": "nonsense"}}})
    mcp_tool = MCPTool(None, "srv", tool, "srv__get_weather")  # type: ignore[arg-type]
    assert mcp_tool.schema.description == "The 'get-weather' tool of the MCP server 'srv'."
    assert mcp_tool.schema.input_schema == {"type": "object"}  # the server checks arguments
    ToolRegistry([mcp_tool])


def _result(**fields):
    return mcp_types.CallToolResult.model_validate(fields)


def test_structured_content_is_the_output_and_the_content_is_kept():
    result = tool_result(
        _result(
            content=[{"type": "text", "text": '{"celsius": 18}'}],
            structuredContent={"celsius": 18},
        ),
        "c1",
        "weather__get",
        {"mcp_server": "weather"},
    )
    assert result.status == "success"
    assert result.output == {"celsius": 18}
    assert result.metadata["content"] == [{"type": "text", "text": '{"celsius": 18}'}]
    assert result.metadata["mcp_server"] == "weather"


def test_text_content_is_the_output_as_one_string():
    result = tool_result(
        _result(content=[{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}]),
        "c1",
        "t",
    )
    assert result.output == "line 1\nline 2"
    assert tool_result(_result(content=[]), "c1", "t").output == ""


def test_binary_data_in_images_audio_and_resources_becomes_bytes():
    blocks = [
        {"type": "text", "text": "Here it is:"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {
            "type": "resource",
            "resource": {"uri": "file:///a.bin", "blob": "AAEC", "mimeType": "application/x"},
        },
        {"type": "resource_link", "uri": "file:///b.txt", "name": "b.txt"},
    ]
    result = tool_result(_result(content=blocks), "c1", "t")
    assert result.status == "success"
    assert result.output == [
        blocks[0],
        {"type": "image", "data": b"\x89PNG\r\n\x1a\n", "mimeType": "image/png"},
        {"type": "audio", "data": b"RIFF", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {**blocks[3]["resource"], "blob": b"\x00\x01\x02"}},
        blocks[4],
    ]
    # JSON carries the bytes losslessly, as {"$bytes": base64}
    dumped = result.model_dump(mode="json")["output"]
    assert dumped[1]["data"] == {"$bytes": "iVBORw0KGgo="}
    assert art.ToolResult.model_validate_json(result.model_dump_json()).output == result.output


def test_is_error_becomes_an_error_result_with_the_servers_message():
    result = tool_result(
        _result(content=[{"type": "text", "text": "Invalid timezone: Mars/Base"}], isError=True),
        "c1",
        "t",
    )
    assert result.status == "error"
    assert result.error == "Invalid timezone: Mars/Base"
    assert result.error_code == "UNKNOWN" and not result.retryable


def test_importing_art_and_the_adapter_does_not_load_the_sdk():
    code = (
        "import sys, art, art.adapters.mcp; "
        "print(any(m == 'mcp' or m.startswith(('mcp.', 'mcp_types')) for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_missing_npm_server_fails_under_ci_and_skips_otherwise(monkeypatch, tmp_path):
    import mcp_fixtures

    monkeypatch.setattr(mcp_fixtures, "EVERYTHING", tmp_path / "mcp-server-everything")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"install it with: bash \.ci/mcp-servers\.sh"):
        mcp_fixtures.require_everything()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="is not installed"):
        mcp_fixtures.require_everything()


# -- VS Code's variables, inputs and envFile -----------------------------------------------
VSCODE = {
    "inputs": [
        {"type": "promptString", "id": "api-key", "description": "Search API key", "password": True}
    ],
    "servers": {
        "files": {
            "type": "stdio",
            "command": "npx",
            "args": ["${workspaceFolder}/docs", "${workspaceFolderBasename}", "${env:HOME}"],
            "env": {"MODE": "strict", "WHERE": "${userHome}${pathSeparator}x"},
            "envFile": "${workspaceFolder}/.env",
        },
        "search": {
            "type": "http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer ${input:api-key}"},
        },
    },
}


def _vscode_workspace(tmp_path) -> Path:
    workspace = tmp_path / "proj"
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / ".vscode" / "mcp.json").write_text(json.dumps(VSCODE))
    (workspace / ".env").write_text('# secrets\nTOKEN="t0k"\nexport MODE=loose\n')
    return workspace / ".vscode" / "mcp.json"


def test_vscode_variables_and_env_file_are_resolved(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = MCPConfig.load(_vscode_workspace(tmp_path), inputs={"api-key": "k3y"})
    workspace = tmp_path / "proj"
    files = config.servers["files"]
    assert files.args == [f"{workspace}/docs", "proj", str(tmp_path / "home")]
    # envFile's variables under `env`, which wins
    assert files.env == {"TOKEN": "t0k", "MODE": "strict", "WHERE": f"{tmp_path}/home/x"}
    assert files.env_file == f"{workspace}/.env"
    assert config.servers["search"].headers == {"Authorization": "Bearer k3y"}
    assert config.refused == {}


def test_a_server_needing_an_input_without_a_value_is_refused_alone(tmp_path):
    path = _vscode_workspace(tmp_path)
    config = MCPConfig.load(path)
    assert list(config.enabled()) == ["files"]  # the other server still loads
    reason = config.refused["search"]
    assert "${input:api-key}" in reason and "Search API key" in reason
    assert "inputs={'api-key': ...}" in reason
    client = MCPClient(config)
    statuses = {s.name: s for s in client.status()}
    assert statuses["search"].state == "failed" and statuses["search"].error == reason
    assert client.errors() == {"search": reason}
    client.close()


def test_an_unreadable_env_file_refuses_that_server_with_the_reason(tmp_path):
    config = MCPConfig.from_dict(
        {
            "servers": {
                "a": {"command": "srv", "envFile": "missing.env"},
                "b": {"command": "srv"},
            }
        },
        workspace=tmp_path,
    )
    assert list(config.enabled()) == ["b"]
    assert f"cannot read its envFile {tmp_path / 'missing.env'}" in config.refused["a"]
