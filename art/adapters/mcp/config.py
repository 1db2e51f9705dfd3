"""Which MCP servers to use: `MCPServerConfig` for one, `MCPConfig` for a set, in code or
from an `mcpServers` JSON file (Claude Desktop's format, also read by Cursor and Claude
Code; VS Code's top-level `servers` key is accepted too).

A server is a `command` (stdio: art starts and stops the process) or a `url` (Streamable
HTTP, falling back to SSE for servers that only speak the older transport). `${VAR}` and
`${VAR:-default}` in the command, args, env, cwd, url, headers and envFile are replaced
from the environment when the config is read, and so are VS Code's variables:
`${env:VAR}`, `${workspaceFolder}`, `${workspaceFolderBasename}`, `${userHome}`,
`${pathSeparator}` (`${/}`) and `${input:ID}` (from the `inputs` given; a server that
uses an input without a value is refused, with the reason, and the others are kept).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from art.adapters.mcp.naming import server_prefixes
from art.core.log import get_logger
from art.core.models import ArtModel
from art.errors import ConfigurationError

if TYPE_CHECKING:
    import mcp_types

__all__ = ["Approval", "MCPConfig", "MCPServerConfig", "Transport", "load_mcp_config"]

log = get_logger(__name__)

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
_FOREIGN_KEYS = frozenset({"description"})
#: When a server's tools ask a person first (see `MCPServerConfig.approval`).
Approval = Literal["destructive", "always", "never"]
_VARIABLE = re.compile(
    r"\$\{(?:(?P<scope>env|input):)?(?P<name>[A-Za-z_][\w.-]*|/)(?::-(?P<default>[^}]*))?\}"
)


class _Refused(ValueError):
    """A server entry art cannot use as written (the others in the file still load)."""

    def __init__(self, message: str, input_id: str | None = None) -> None:
        super().__init__(message)
        self.input_id = input_id


class MCPServerConfig(ArtModel):
    """One MCP server: a `command` to run over stdio, or a `url` to reach over HTTP."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    #: Extra environment for a stdio server, over the SDK's safe defaults (PATH, HOME, ...).
    env: dict[str, str] = Field(default_factory=dict)
    #: A dotenv file (VS Code's `envFile`) whose variables are added to `env` (`env` wins);
    #: a relative path is relative to the workspace folder.
    env_file: str | None = Field(default=None, alias="envFile")
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
    #: Which tools ask a person before they run (art's blocking path: the run suspends, and
    #: an approval runs the tool with the approved arguments): `destructive` (the default)
    #: the tools whose annotations do not say read-only and say destructive (MCP's defaults
    #: apply to absent hints: a tool without annotations counts as destructive), `always`
    #: every tool, `never` none.
    approval: Approval = "destructive"
    #: MCP tool names that never ask (Cline's `autoApprove`, Roo Code's `alwaysAllow`).
    auto_approve: list[str] = Field(default_factory=list, alias="autoApprove")
    always_allow: list[str] = Field(default_factory=list, alias="alwaysAllow")
    #: MCP tool names that always ask, whatever `approval` and their annotations say.
    require_approval: list[str] = Field(default_factory=list, alias="requireApproval")
    #: Whether the server may ask art's model for a completion (MCP sampling), and within
    #: which limits: tokens per request (the server's own max lowered to this) and
    #: requests per minute.
    #: Whether the server may ask a person for input mid-call (MCP elicitation): the run
    #: suspends with the question, and the answer runs the call again.
    elicitation: bool = True
    sampling: bool = True
    sampling_max_tokens: int = Field(default=1024, ge=1, alias="samplingMaxTokens")
    sampling_per_minute: int = Field(default=10, ge=1, alias="samplingPerMinute")

    @model_validator(mode="before")
    @classmethod
    def _drop_foreign_keys(cls, data: object) -> object:
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if k not in _FOREIGN_KEYS}
        return data

    @field_validator("transport", mode="before")
    @classmethod
    def _transport_alias(cls, value: object) -> object:
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

    @model_validator(mode="after")
    def _approval_lists_agree(self) -> MCPServerConfig:
        both = sorted(set(self.require_approval) & set(self.approved_tools))
        if both:
            raise ValueError(
                f"{', '.join(both)} cannot be both in requireApproval and in "
                "autoApprove / alwaysAllow"
            )
        return self

    @property
    def approved_tools(self) -> frozenset[str]:
        """The MCP tool names that never ask (`autoApprove` and `alwaysAllow` together)."""
        return frozenset(self.auto_approve) | frozenset(self.always_allow)

    def asks_before(self, tool: mcp_types.Tool) -> bool:
        """Whether calling `tool` waits for a person's approval (see `approval`)."""
        if tool.name in self.require_approval:
            return True
        if tool.name in self.approved_tools or self.approval == "never":
            return False
        if self.approval == "always":
            return True
        hints = tool.annotations
        read_only = bool(hints and hints.read_only_hint)
        destructive = hints is None or hints.destructive_hint is not False
        return not read_only and destructive

    @property
    def kind(self) -> Transport:
        """The transport, never None (set by validation)."""
        return self.transport or ("stdio" if self.command else "http")

    def describe(self) -> str:
        """The command line or the URL, for messages."""
        if self.command:
            return " ".join([self.command, *self.args])
        return f"{self.url} ({self.kind})"

    def expanded(
        self,
        environ: Mapping[str, str],
        *,
        workspace: str | os.PathLike[str] | None = None,
        inputs: Mapping[str, str] | None = None,
    ) -> MCPServerConfig:
        """A copy with the variables replaced (see the module docstring) and `envFile`'s
        variables added to `env`.

        Raises KeyError naming the first environment variable that is unset and has no
        default, and ValueError saying why when an input has no value, `${workspaceFolder}`
        has no workspace or the envFile cannot be read."""
        folder = Path(workspace) if workspace is not None else None
        given = inputs or {}

        def value(match: re.Match[str]) -> str:
            scope, name, default = match.group("scope", "name", "default")
            if scope == "input":
                if name in given:
                    return given[name]
                raise _Refused(
                    f"uses ${{input:{name}}}, a VS Code input art cannot prompt for; give "
                    f"its value in code: MCPConfig.load(path, inputs={{{name!r}: ...}})",
                    input_id=name,
                )
            if scope is None and name in _WORKSPACE_VARIABLES:
                if folder is None:
                    raise _Refused(f"uses ${{{name}}}, but there is no workspace folder")
                return str(folder) if name == "workspaceFolder" else folder.name
            if scope is None and name in ("userHome", "pathSeparator", "/"):
                return str(Path.home()) if name == "userHome" else os.sep
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise KeyError(name)

        def sub(text: str | None) -> str | None:
            return None if text is None else _VARIABLE.sub(value, text)

        env = {k: sub(v) or "" for k, v in self.env.items()}
        env_file = sub(self.env_file)
        if env_file is not None:
            env = {**_read_env_file(env_file, folder), **env}
        return self.model_copy(
            update={
                "command": sub(self.command),
                "args": [sub(a) or "" for a in self.args],
                "env": env,
                "env_file": env_file,
                "cwd": sub(self.cwd),
                "url": sub(self.url),
                "headers": {k: sub(v) or "" for k, v in self.headers.items()},
            }
        )


_WORKSPACE_VARIABLES = frozenset({"workspaceFolder", "workspaceFolderBasename"})


def _read_env_file(path: str, workspace: Path | None) -> dict[str, str]:
    """The variables of a dotenv file (`KEY=value` lines, `#` comments, quotes)."""
    from dotenv import dotenv_values

    file = Path(path).expanduser()
    if not file.is_absolute() and workspace is not None:
        file = workspace / file
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise _Refused(f"cannot read its envFile {file}: {exc.strerror or exc}") from None
    import io

    return {k: v or "" for k, v in dotenv_values(stream=io.StringIO(text)).items()}


class MCPConfig(ArtModel):
    """A set of named MCP servers (`mcpServers` in the JSON file), in the file's order."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, MCPServerConfig] = Field(default_factory=dict, alias="mcpServers")
    #: Where the config was read from, for messages (None when built in code).
    source: str | None = None
    #: The servers that cannot be used as written (an input without a value, an unreadable
    #: envFile, ...), each with the reason; they stay in `servers` as written.
    refused: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, object],
        *,
        source: str | None = None,
        environ: Mapping[str, str] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        inputs: Mapping[str, str] | None = None,
    ) -> MCPConfig:
        """A config from `{"mcpServers": {name: {...}}}` (or VS Code's `{"servers": ...}`),
        or from the bare `{name: {...}}` mapping. Other top-level keys are ignored, so a
        whole `claude_desktop_config.json` can be read. `workspace` is what
        `${workspaceFolder}` means (default: the current directory), `inputs` the values
        of VS Code's `${input:ID}` variables. Raises ConfigurationError."""
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
        folder = Path.cwd() if workspace is None else workspace
        described = _input_descriptions(data.get("inputs"))
        parsed: dict[str, MCPServerConfig] = {}
        refused: dict[str, str] = {}
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
                parsed[name] = server.expanded(env, workspace=folder, inputs=inputs)
            except _Refused as exc:
                parsed[name] = server
                refused[name] = f"MCP server {name!r}{where} {exc}"
                if exc.input_id in described:
                    refused[name] += f" (the input is described as: {described[exc.input_id]})"
                log.warning("MCP server refused", server=name, reason=refused[name])
            except KeyError as missing:
                raise ConfigurationError(
                    f"MCP server {name!r}{where} uses ${{{missing.args[0]}}}, which is not set "
                    f"in the environment (set it, or write ${{{missing.args[0]}:-default}})"
                ) from None
        config = cls.model_validate({"servers": parsed, "source": source, "refused": refused})

        server_prefixes(config.servers)  # raises when two names collide once snake_cased
        return config

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, inputs: Mapping[str, str] | None = None
    ) -> MCPConfig:
        """Read an `mcpServers` JSON file (VS Code's `mcp.json` too). `${workspaceFolder}`
        is the folder holding the file, or its parent when that folder is `.vscode`.
        Raises ConfigurationError."""
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
        folder = file.resolve().parent
        if folder.name == ".vscode":
            folder = folder.parent
        return cls.from_dict(data, source=str(file), workspace=folder, inputs=inputs)

    def enabled(self) -> dict[str, MCPServerConfig]:
        """The servers not marked `disabled` and not refused."""
        return {
            name: s
            for name, s in self.servers.items()
            if not s.disabled and name not in self.refused
        }


def _input_descriptions(inputs: object) -> dict[str, str]:
    """VS Code's top-level `inputs`: each input's id and description."""
    if not isinstance(inputs, list):
        return {}
    return {
        str(item["id"]): str(item.get("description") or "")
        for item in inputs
        if isinstance(item, Mapping) and "id" in item and item.get("description")
    }


def load_mcp_config(
    target: MCPConfig | Mapping[str, object] | str | os.PathLike[str],
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
