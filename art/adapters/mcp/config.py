"""Which MCP servers to use: `MCPServerConfig` for one, `MCPConfig` for a set, in code or
from an `mcpServers` JSON file (Claude Desktop's format, also read by Cursor and Claude
Code; VS Code's top-level `servers` key is accepted too).

A server is a `command` (stdio: art starts and stops the process) or a `url` (Streamable
HTTP, falling back to SSE for servers that only speak the older transport). `${VAR}` and
`${VAR:-default}` in the command, args, env, cwd, url and headers are replaced from the
environment when the config is read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from art.adapters.mcp.naming import server_prefixes
from art.core.models import ArtModel
from art.errors import ConfigurationError

__all__ = ["MCPConfig", "MCPServerConfig", "Transport", "load_mcp_config"]

#: `stdio` runs `command`; `http` is Streamable HTTP with the SSE fallback; `sse` is SSE only.
Transport = Literal["stdio", "http", "sse"]

_TRANSPORT_NAMES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
    "sse": "sse",
}
# Keys other MCP hosts write into the same file; they mean nothing to art.
_FOREIGN_KEYS = frozenset({"autoApprove", "alwaysAllow", "description"})
_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


class MCPServerConfig(ArtModel):
    """One MCP server: a `command` to run over stdio, or a `url` to reach over HTTP."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    #: Extra environment for a stdio server, over the SDK's safe defaults (PATH, HOME, ...).
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Inferred when absent: `stdio` with a command, `http` with a url.
    transport: Transport | None = Field(default=None, alias="type")
    #: How long one request may take before its step fails with TIMEOUT (None: the step's
    #: own `step_timeout_s` decides).
    timeout_s: float | None = Field(default=None, gt=0, alias="timeout")
    #: How long starting the server (process start, handshake, tool listing) may take.
    startup_timeout_s: float = Field(default=30.0, gt=0, alias="startupTimeout")
    disabled: bool = False

    @model_validator(mode="before")
    @classmethod
    def _drop_foreign_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if k not in _FOREIGN_KEYS}
        return data

    @field_validator("transport", mode="before")
    @classmethod
    def _transport_alias(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _TRANSPORT_NAMES.get(value.lower(), value)
        return value

    @model_validator(mode="after")
    def _command_or_url(self) -> MCPServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("give either `command` (a stdio server) or `url` (an HTTP server)")
        if self.transport is None:
            self.transport = "stdio" if self.command else "http"
        elif (self.transport == "stdio") != bool(self.command):
            needs = "`command`" if self.transport == "stdio" else "`url`"
            raise ValueError(f"transport {self.transport!r} needs {needs}")
        return self

    @property
    def kind(self) -> Transport:
        """The transport, never None (set by validation)."""
        return self.transport or ("stdio" if self.command else "http")

    def describe(self) -> str:
        """The command line or the URL, for messages."""
        if self.command:
            return " ".join([self.command, *self.args])
        return f"{self.url} ({self.kind})"

    def expanded(self, environ: Mapping[str, str]) -> MCPServerConfig:
        """A copy with `${VAR}` / `${VAR:-default}` replaced from `environ`.

        Raises KeyError naming the first variable that is unset and has no default."""

        def sub(text: str | None) -> str | None:
            if text is None:
                return None

            def value(match: re.Match[str]) -> str:
                name, default = match.group("name"), match.group("default")
                if name in environ:
                    return environ[name]
                if default is not None:
                    return default
                raise KeyError(name)

            return _VARIABLE.sub(value, text)

        return self.model_copy(
            update={
                "command": sub(self.command),
                "args": [sub(a) or "" for a in self.args],
                "env": {k: sub(v) or "" for k, v in self.env.items()},
                "cwd": sub(self.cwd),
                "url": sub(self.url),
                "headers": {k: sub(v) or "" for k, v in self.headers.items()},
            }
        )


class MCPConfig(ArtModel):
    """A set of named MCP servers (`mcpServers` in the JSON file), in the file's order."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, MCPServerConfig] = Field(default_factory=dict, alias="mcpServers")
    #: Where the config was read from, for messages (None when built in code).
    source: str | None = None

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        source: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> MCPConfig:
        """A config from `{"mcpServers": {name: {...}}}` (or VS Code's `{"servers": ...}`),
        or from the bare `{name: {...}}` mapping. Other top-level keys are ignored, so a
        whole `claude_desktop_config.json` can be read. Raises ConfigurationError."""
        where = f" in {source}" if source else ""
        if "mcpServers" in data:
            servers = data["mcpServers"]
        elif "servers" in data and isinstance(data["servers"], Mapping):
            servers = data["servers"]
        elif all(isinstance(v, Mapping | MCPServerConfig) for v in data.values()):
            servers = data
        else:
            raise ConfigurationError(f'no "mcpServers" object{where}')
        if not isinstance(servers, Mapping):
            raise ConfigurationError(f'"mcpServers"{where} must be an object of named servers')
        env = os.environ if environ is None else environ
        parsed: dict[str, MCPServerConfig] = {}
        for name, entry in servers.items():
            if not isinstance(name, str) or not name.strip():
                raise ConfigurationError(f"an MCP server{where} has an empty name")
            try:
                server = (
                    entry
                    if isinstance(entry, MCPServerConfig)
                    else MCPServerConfig.model_validate(entry)
                )
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'server'}: {e['msg']}"
                    for e in exc.errors()
                )
                raise ConfigurationError(f"MCP server {name!r}{where}: {problems}") from None
            try:
                parsed[name] = server.expanded(env)
            except KeyError as missing:
                raise ConfigurationError(
                    f"MCP server {name!r}{where} uses ${{{missing.args[0]}}}, which is not set "
                    f"in the environment (set it, or write ${{{missing.args[0]}:-default}})"
                ) from None
        config = cls.model_validate({"servers": parsed, "source": source})

        server_prefixes(config.servers)  # raises when two names collide once snake_cased
        return config

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MCPConfig:
        """Read an `mcpServers` JSON file. Raises ConfigurationError."""
        file = Path(path).expanduser()
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the MCP config {file}: {exc.strerror or exc}"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"the MCP config {file} is not valid JSON: {exc.msg} (line {exc.lineno}, "
                f"column {exc.colno})"
            ) from None
        if not isinstance(data, dict):
            raise ConfigurationError(f"the MCP config {file} must hold a JSON object")
        return cls.from_dict(data, source=str(file))

    def enabled(self) -> dict[str, MCPServerConfig]:
        """The servers not marked `disabled`."""
        return {name: s for name, s in self.servers.items() if not s.disabled}


def load_mcp_config(
    target: MCPConfig | Mapping[str, Any] | str | os.PathLike[str],
) -> MCPConfig:
    """An MCPConfig from a config, a dict in the file's format, or a JSON file's path."""
    if isinstance(target, MCPConfig):
        return target
    if isinstance(target, Mapping):
        return MCPConfig.from_dict(target)
    if isinstance(target, str | os.PathLike):
        return MCPConfig.load(target)
    raise ConfigurationError(
        f"mcp_servers must be a path to an mcpServers JSON file, a dict in that format, an "
        f"MCPConfig or an MCPClient; got {type(target).__name__}"
    )
