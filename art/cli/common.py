"""What the `art` command's modules share: exit codes, options, output, building the
instance from the command line, error reporting and small formatting helpers.

The commands import the engine (and litellm) inside their bodies, so `art --help` starts
in a fraction of a second; these helpers do the same.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, TextIO, TypedDict, cast

import typer

import art
from art.cli.checks import positive_seconds

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from art.config import ExecutionConfig
    from art.core.json import JsonValue
    from art.instance import ArtInstance
    from art.tooling.contract import IToolExecutor

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SUSPENDED",
    "EXIT_USAGE",
    "PIPED_WIDTH",
    "RUN_STATUS_STYLE",
    "ApiBaseOption",
    "ApiKeyEnvOption",
    "CliError",
    "FullOption",
    "JsonOption",
    "McpConfigOption",
    "ModelOption",
    "NewThreadOption",
    "Output",
    "StorageOption",
    "ThreadArgument",
    "TimeoutOption",
    "ToolsOption",
    "build_instance",
    "builtin_tools",
    "compact",
    "escape",
    "exit_with",
    "format_duration",
    "format_seconds",
    "format_when",
    "guard",
    "instance_fields",
    "key_values",
    "load_instance",
    "load_model",
    "load_tools",
    "make_console",
    "one_line",
    "status_text",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SUSPENDED = 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


# -- shared options ---------------------------------------------------------------------
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        metavar="MODEL",
        help="litellm model name (default: $ART_MODEL), e.g. openai/gpt-4o-mini or "
        "local/smollm2; path/to/file.py:ATTR names a ScriptedModel defined in that file.",
        show_default=False,
    ),
]
StorageOption = Annotated[
    str | None,
    typer.Option(
        "--storage",
        "-s",
        metavar="URL",
        help="memory://, sqlite:///path.db or postgresql://... (default: $ART_STORAGE, "
        "else SQLite under the user data directory).",
        show_default=False,
    ),
]
ToolsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tools",
        "-t",
        metavar="MODULE:ATTR",
        help="module:attr (or path/to/file.py:attr) naming a tool, a list of tools, or a "
        "factory returning them. Repeatable. Replaces the built-in tools.",
        show_default=False,
    ),
]
McpConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--mcp-config",
        metavar="PATH",
        help="An mcpServers JSON file (Claude Desktop's format): its servers' tools join "
        "the others. See docs/mcp.md.",
        show_default=False,
    ),
]
ApiBaseOption = Annotated[
    str | None,
    typer.Option(
        "--api-base",
        metavar="URL",
        help="The provider's base URL, e.g. http://127.0.0.1:8000/v1 for a vLLM server "
        "(default: $ART_API_BASE).",
        show_default=False,
    ),
]
ApiKeyEnvOption = Annotated[
    str | None,
    typer.Option(
        "--api-key-env",
        metavar="NAME",
        help="The environment variable holding the provider's API key "
        "(default: $ART_API_KEY_ENV, else the provider's usual one).",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="Seconds one LLM call attempt may take (default: $ART_TIMEOUT, else 90).",
        show_default=False,
        callback=positive_seconds,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout (for scripts).")
]
NewThreadOption = Annotated[
    str | None,
    typer.Option(
        "--thread",
        "-T",
        metavar="THREAD",
        help="Thread id (default: a new one).",
        show_default=False,
    ),
]
FullOption = Annotated[
    bool,
    typer.Option(
        "--full",
        help="Show every step's arguments and description whole in the tree "
        "(by default they are cut to fit one line).",
    ),
]
ThreadArgument = Annotated[
    str, typer.Argument(help="The thread id.", show_default=False, metavar="THREAD")
]


class CliError(Exception):
    """A failure the CLI reports in one line (no traceback) with a code and an exit code."""

    def __init__(self, code: str, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code


@dataclass
class Output:
    """Where a command writes: a rich console on stdout, one on stderr, and the JSON flag."""

    json: bool
    console: Console = field(default_factory=lambda: make_console())
    errors: Console = field(default_factory=lambda: make_console(stderr=True))
    # Under --json, the command's stdout while everything else printed goes to stderr.
    json_stream: TextIO | None = None

    def emit_json(self, document: object) -> None:
        from art.core.redaction import known_secrets

        document = known_secrets().mask(document)
        # Plain stdout: rich would wrap long lines and could add colour codes.
        stream = self.json_stream or sys.stdout
        stream.write(json.dumps(document, indent=2, default=str) + "\n")
        stream.flush()


@contextlib.contextmanager
def _json_only_on_stdout(out: Output) -> Iterator[None]:
    """Under --json, send whatever else is written to stdout (a tool's print(), a C
    library's write(1, ...), litellm) to stderr, and keep stdout for the JSON document."""
    real = sys.stdout
    real.flush()
    try:
        fd: int | None = real.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None  # not a file (a test runner's buffer): redirect Python's writes only
    saved: int | None = None
    if fd is not None:
        saved = os.dup(fd)
        os.dup2(2, fd)
        out.json_stream = os.fdopen(saved, "w", encoding="utf-8", closefd=False)
    else:
        out.json_stream = real
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = real
        out.json_stream.flush()
        out.json_stream = None
        if fd is not None and saved is not None:
            os.dup2(saved, fd)
            os.close(saved)


def make_console(*, stderr: bool = False) -> Console:
    """The console commands render to (tests replace it with a recording console); the
    keys art knows (the environment's) are masked in whatever it writes."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    terminal = _is_terminal(stream)
    if terminal or os.environ.get("COLUMNS"):
        # COLUMNS sets the width of piped output too; only a terminal gets rich's padding.
        masked = _Masked(stream, strip_trailing=not terminal)
        return Console(file=cast(TextIO, masked), highlight=False, soft_wrap=False)
    # Piped or redirected: no terminal width to fit, so lines are not wrapped at 80.
    return Console(
        file=cast(TextIO, _Masked(stream, strip_trailing=True)),
        highlight=False,
        soft_wrap=True,
        width=PIPED_WIDTH,
    )


# The width rich lays out piped output in: long enough that no line is wrapped.
PIPED_WIDTH = 1000


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Masked:
    """A text stream that masks the keys art knows in what is written through it."""

    def __init__(self, stream: TextIO, *, strip_trailing: bool = False) -> None:
        self._stream = stream
        self._strip = strip_trailing  # rich pads lines to the width; a pipe needs no padding

    def write(self, text: str) -> int:
        from art.core.redaction import known_secrets

        if self._strip:
            text = "\n".join(line.rstrip(" ") for line in text.split("\n"))
        return self._stream.write(known_secrets().text(text))

    def __getattr__(self, name: str) -> object:  # flush, isatty, encoding, fileno...
        return getattr(self._stream, name)


class InstanceFields(TypedDict, total=False):
    """The ArtInstanceConfig fields a command's options give."""

    tools: list[IToolExecutor]
    model: str
    storage: str
    mcp_servers: Path
    api_base: str
    api_key_env: str
    execution_config: ExecutionConfig | dict[str, float]


def build_instance(
    model: str | None,
    storage: str | None,
    tools: list[str] | None,
    mcp_config: Path | None = None,
    provider: InstanceFields | None = None,
) -> ArtInstance:
    """The instance a command runs on (an async context manager: closed after use)."""
    fields = instance_fields(model, storage, tools)
    fields.update(provider or {})
    if mcp_config is not None:
        fields["mcp_servers"] = mcp_config
    return art.create_art_instance(**fields)


def instance_fields(
    model: str | None, storage: str | None, tools: list[str] | None
) -> InstanceFields:
    """The instance fields of --model, --storage and --tools, read the same way by every
    command: a model as `load_model` resolves it ($ART_MODEL when not given), tools as
    `load_tools` loads them (the built-in tools when not given)."""
    fields: InstanceFields = {"tools": load_tools(tools) if tools else builtin_tools()}
    model = model or os.environ.get("ART_MODEL")
    if model:
        fields["model"] = load_model(model)
    if storage:
        fields["storage"] = storage
    return fields


def builtin_tools() -> list[IToolExecutor]:
    """The built-in tools (art.tools), what a command runs with when --tools is not given."""
    from art import tools

    return list(tools.builtin_tools())


def load_tools(specs: Iterable[str]) -> list[IToolExecutor]:
    """Tools from `module:attr` or `path/file.py:attr` specs: a tool instance, an
    IToolExecutor subclass, a list of either, or a factory returning them."""
    tools: list[IToolExecutor] = []
    for spec in specs:
        target, sep, attr = spec.rpartition(":")
        if not sep or not target or not attr:
            raise CliError("CONFIG_ERROR", f"--tools {spec!r}: expected module:attr", EXIT_USAGE)
        module = _import_target(target, spec)
        try:
            value = getattr(module, attr)
        except AttributeError:
            raise CliError(
                "CONFIG_ERROR", f"--tools {spec!r}: {target} has no attribute {attr!r}", EXIT_USAGE
            ) from None
        tools.extend(_as_tools(value, spec))
    return tools


def load_model(spec: str) -> str:
    """The litellm model name `spec` stands for: `path/to/file.py:ATTR` or `module:ATTR`
    names a model object defined there (a `ScriptedModel`, or anything with a `model`
    name) or a string; any other value is a litellm model name already."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not (target.endswith(".py") or _names_a_module(target, attr)):
        return spec
    module = _import_target(target, spec, "--model")
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise CliError(
            "CONFIG_ERROR", f"--model {spec!r}: {target} has no attribute {attr!r}", EXIT_USAGE
        ) from None
    name = value if isinstance(value, str) else getattr(value, "model", None)
    if not isinstance(name, str):
        raise CliError(
            "CONFIG_ERROR",
            f"--model {spec!r}: expected {attr!r} to be a model (a ScriptedModel) or a "
            f"model name, got {type(value).__name__}",
            EXIT_USAGE,
        )
    return name


def load_instance(spec: str) -> ArtInstance:
    """The ArtInstance named by `module:attr` (an instance, or a function returning one)."""
    from art import ArtInstance

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise CliError("CONFIG_ERROR", f"--instance {spec!r}: expected module:attr", EXIT_USAGE)
    value = getattr(_import_target(target, spec), attr, None)
    if callable(value) and not isinstance(value, ArtInstance):
        value = value()
    if not isinstance(value, ArtInstance):
        raise CliError(
            "CONFIG_ERROR",
            f"--instance {spec!r}: expected an ArtInstance or a function returning one, "
            f"got {type(value).__name__}",
            EXIT_USAGE,
        )
    return value


def _names_a_module(target: str, attr: str) -> bool:
    """Whether `target:attr` reads as a module's attribute (`pkg.module:NAME`) rather than
    a litellm model name holding a colon (`ollama/llama3:8b`, `openai/ft:gpt-4o:org::id`).
    No model litellm knows has the first shape, so a typo in a module name is reported
    as one instead of reaching a provider."""
    return attr.isidentifier() and all(part.isidentifier() for part in target.split("."))


def _working_directory_importable() -> None:
    # A console script does not have the working directory on sys.path.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _import_target(target: str, spec: str, option: str = "--tools") -> ModuleType:
    try:
        if target.endswith(".py") or os.sep in target or "/" in target:
            path = Path(target).expanduser().resolve()
            loaded = sys.modules.get(path.stem)
            if loaded is not None and getattr(loaded, "__file__", None) == str(path):
                return loaded  # --tools and --model may name the same file: run it once
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None or not path.is_file():
                raise FileNotFoundError(f"no such file: {path}")
            module = importlib.util.module_from_spec(module_spec)
            # As under `python file.py`, the file imports the modules next to it.
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
            return module
        _working_directory_importable()
        return importlib.import_module(target)
    except (ImportError, OSError) as exc:
        raise CliError(
            "CONFIG_ERROR", f"{option} {spec!r}: cannot import {target}: {exc}", EXIT_USAGE
        ) from exc
    except SystemExit as exc:  # not art's exit: the command would end as if it had run
        raise CliError(
            "CONFIG_ERROR",
            f"{option} {spec!r}: importing {target} called sys.exit({exc.code!r})",
            EXIT_USAGE,
        ) from None


def _as_tools(value: object, spec: str, depth: int = 0) -> list[IToolExecutor]:
    from art.tooling.contract import IToolExecutor

    if isinstance(value, IToolExecutor):
        return [value]
    if isinstance(value, type) and issubclass(value, IToolExecutor):
        return [value()]
    if isinstance(value, list | tuple):
        return [tool for item in value for tool in _as_tools(item, spec, depth + 1)]
    if callable(value) and depth == 0:
        return _as_tools(value(), spec, depth + 1)
    raise CliError(
        "CONFIG_ERROR",
        f"--tools {spec!r}: expected a tool (IToolExecutor or @art.tool function), a list "
        f"of tools, or a factory returning them; got {type(value).__name__}",
        EXIT_USAGE,
    )


# -- error handling ---------------------------------------------------------------------
def guard(out: Output, body: Callable[[], Coroutine[object, None, int]]) -> int:
    """Run a command's async body, turning failures into one readable line and an exit code."""
    if out.json:
        with _json_only_on_stdout(out):
            return _guarded(out, body)
    return _guarded(out, body)


def _guarded(out: Output, body: Callable[[], Coroutine[object, None, int]]) -> int:
    import asyncio

    try:
        return asyncio.run(body())
    except KeyboardInterrupt:
        out.errors.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except Exception as exc:
        if os.environ.get("ART_DEBUG"):
            raise
        code, message, exit_code = _describe(exc)
        if out.json:
            out.emit_json({"error": {"code": code, "message": message}})
        else:
            out.errors.print(f"[red bold]error[/] [red]{code}[/]: {escape(message)}")
            problems = getattr(exc, "problems", None) or []
            for problem in problems:
                if str(problem) not in message:  # a PlanError's message lists them already
                    out.errors.print(f"  • {escape(str(problem))}")
        return exit_code


def _describe(exc: Exception) -> tuple[str, str, int]:
    from art.core.redaction import redact
    from art.errors import ArtError, ConfigurationError

    if isinstance(exc, CliError):
        return exc.code, redact(exc.message), exc.exit_code
    if isinstance(exc, ConfigurationError):
        message = exc.message
        if "model" in message.lower() and "ART_MODEL" in message:
            message += " (try --model local/smollm2 for the offline demo model)"
        return str(exc.code), redact(message), EXIT_USAGE
    if isinstance(exc, ArtError):
        return str(exc.code), redact(exc.message), EXIT_ERROR
    return "INTERNAL_ERROR", redact(f"{type(exc).__name__}: {exc}"), EXIT_ERROR


def exit_with(code: int) -> None:
    raise typer.Exit(code)


RUN_STATUS_STYLE = {
    "success": "green",
    "completed": "green",
    "partial": "yellow",
    "error": "red",
    "failed": "red",
    "suspended": "magenta",
    "running": "yellow",
    "abandoned": "dim",
}


def status_text(status: str) -> Text:
    from rich.text import Text

    return Text(status, style=RUN_STATUS_STYLE.get(status, "default"))


def compact(value: object, limit: int | None) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    return text if limit is None else one_line(text, limit)


def key_values(pairs: Iterable[str], option: str) -> dict[str, JsonValue]:
    """`KEY=VALUE` pairs as a dict; a value that is JSON is read as JSON, else text."""
    found: dict[str, JsonValue] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=option)
        try:
            found[key.strip()] = json.loads(value)
        except ValueError:
            found[key.strip()] = value
    return found


def one_line(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(text: str) -> str:
    from rich.markup import escape

    return escape(str(text))


def format_duration(delta: timedelta) -> str:
    return format_seconds(max(delta.total_seconds(), 0.0))


def format_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:.0f} s"


def format_when(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
