"""ToolRegistry: the tools a run may use, refused at registration when they are unusable.

A tool is refused (ToolRegistrationError) for a duplicate name, a name that is not
snake_case, a missing or wrong `schema`, an empty description, or an `input_schema`
that is not valid JSON Schema. Checking here means a broken tool fails when the
application starts, not halfway through a run.

Arguments are checked in two stages: `jsonschema-rs` (compiled, so cheap on every call)
says whether they are valid; only when it says no does `jsonschema` find and word
the violations, and its verdict is final. A schema jsonschema-rs cannot compile (a
remote `$ref`, a dialect it does not know) is checked by `jsonschema` alone.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

from art.core.json import JsonObject
from art.core.serialization import truncate
from art.errors import ConfigurationError, ToolRegistrationError
from art.tooling.contract import BLOCKING_PROMPT, RUN_ON_APPROVAL, IToolExecutor, ToolSchema
from art.tooling.functions import tool as function_tool

__all__ = [
    "ALL_TOOLS",
    "TOOL_NAME_PATTERN",
    "FastCheck",
    "ToolEntry",
    "ToolExampleWarning",
    "ToolRegistry",
    "build_fast_check",
    "build_validator",
    "input_errors",
    "passes_fast_check",
]

TOOL_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
#: In a run's list of tools (`ToolRegistry.selected`): every registered tool.
ALL_TOOLS = "*"
# One violation line stays readable even when the offending value is huge.
_MAX_ERROR_LINE = 500

#: A compiled "are these arguments valid?" test; raises for values it cannot read.
FastCheck = Callable[[object], bool]


def build_validator(input_schema: JsonObject, *, check: bool = True) -> Validator:
    """A jsonschema validator for `input_schema` (its `$schema` dialect, default 2020-12).

    With `check`, the schema itself is checked first (raises `SchemaError`). Formats
    (`date-time`, `email`, ...) are checked where jsonschema can check them.
    """
    validator_cls = jsonschema.validators.validator_for(
        input_schema, default=jsonschema.Draft202012Validator
    )
    if check:
        validator_cls.check_schema(input_schema)
    return validator_cls(input_schema, format_checker=validator_cls.FORMAT_CHECKER)


def build_fast_check(input_schema: JsonObject) -> FastCheck | None:
    """jsonschema-rs's `is_valid` for `input_schema`, or None when it cannot compile it.

    It never fetches anything (remote `$ref`s make it None). Formats are checked, as
    `build_validator` checks them.
    """
    import jsonschema_rs

    try:
        compiled = jsonschema_rs.validator_for(input_schema, validate_formats=True, offline=True)
    except Exception:  # jsonschema-rs refuses what it cannot check: jsonschema alone then
        return None
    return compiled.is_valid


def passes_fast_check(fast_check: FastCheck | None, args: object) -> bool:
    """True when `fast_check` says `args` are valid; False when it says no, cannot read
    them (bytes, datetimes, ...) or there is none: then jsonschema decides."""
    if fast_check is None:
        return False
    try:
        return bool(fast_check(args))
    except Exception:
        return False


def input_errors(
    validator: Validator, args: object, *, fast_check: FastCheck | None = None
) -> list[str]:
    """Every violation of `args` against the validator's schema, one line each.

    Each line starts with the JSON path of the offending value, e.g.
    `$.items[2].price: -1 is less than the minimum of 0`. Empty when `args` is valid.
    With `fast_check` (see `build_fast_check`), arguments it accepts are valid at once;
    the rest are checked by `validator`, whose errors decide.
    """
    if type(args) is not dict and not isinstance(args, Mapping):
        return [f"$: arguments must be a JSON object, got {type(args).__name__}"]
    if passes_fast_check(fast_check, args):
        return []
    errors = sorted(
        validator.iter_errors(args), key=lambda e: ([str(p) for p in e.path], e.message)
    )
    return [truncate(f"{error.json_path}: {error.message}", _MAX_ERROR_LINE) for error in errors]


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """What calling a registered tool needs, worked out once when it is registered."""

    tool: IToolExecutor
    validator: Validator
    fast_check: FastCheck | None
    #: `execute` is a coroutine function; a plain `def` runs in a worker thread.
    is_async: bool


class ToolExampleWarning(UserWarning):
    """A tool example whose input does not match the tool's input schema."""


def _warn_about_bad_examples(schema: ToolSchema, entry: ToolEntry) -> None:
    """Warn about each example the planner will not be shown because its input is invalid,
    at the line that wrote the tool (its function or class) when its source is known."""
    invalid = [
        (index, problems)
        for index, example in enumerate(schema.examples)
        if (problems := input_errors(entry.validator, example.input, fast_check=entry.fast_check))
    ]
    if not invalid:
        return
    site = _definition_site(entry.tool)  # reads and parses the module: only when warning
    for index, problems in invalid:
        message = (
            f"tool {schema.name!r}: examples[{index}] is left out of the planner's "
            f"prompt: its input does not match the input schema ({'; '.join(problems)})"
        )
        if site is None:
            warnings.warn(message, ToolExampleWarning, stacklevel=_first_caller_outside_art())
            continue
        filename, lineno, module = site
        warnings.warn_explicit(
            message,
            ToolExampleWarning,
            filename,
            lineno,
            module=module.__name__,
            registry=vars(module).setdefault("__warningregistry__", {}),
            module_globals=vars(module),
        )


def _definition_site(tool: IToolExecutor) -> tuple[str, int, ModuleType] | None:
    """Where a tool was written: its function (an `@art.tool`) or else its class."""
    written = getattr(tool, "__wrapped__", None) or type(tool)
    module = sys.modules.get(getattr(written, "__module__", None) or "")
    try:
        filename = inspect.getsourcefile(written)
        lineno = inspect.getsourcelines(written)[1]
    except (OSError, TypeError):
        return None
    return (filename, lineno, module) if filename and module is not None else None


_ART_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _first_caller_outside_art() -> int:
    """The `stacklevel` of the innermost caller outside art's package, so that a warning
    names the application's line (`ToolRegistry(...)`, `create_art_instance(...)`)."""
    level, frame = 1, inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # the function that warns
    while frame is not None and frame.f_code.co_filename.startswith(_ART_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def is_async_tool(tool: object) -> bool:
    """Whether `tool.execute` is a coroutine function (else it blocks: run it in a thread)."""
    return inspect.iscoroutinefunction(getattr(tool, "execute", None))


class ToolRegistry:
    """The tools available to a run, by name, in registration order."""

    def __init__(self, tools: Iterable[IToolExecutor | Callable[..., object]] = ()) -> None:
        self._entries: dict[str, ToolEntry] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: IToolExecutor | Callable[..., object]) -> IToolExecutor:
        """Add a tool (an IToolExecutor instance, or a function wrapped with `art.tool`).

        Returns the registered executor. Raises ToolRegistrationError, with the reason
        and the fix, when the tool cannot be used.
        """
        executor = self._as_executor(tool)
        schema = _checked_schema(executor)
        if schema.name in self._entries:
            existing = type(self._entries[schema.name].tool).__name__
            raise ToolRegistrationError(
                f"a tool named {schema.name!r} is already registered ({existing}); "
                "tool names must be unique: rename one of them"
            )
        try:
            validator = build_validator(schema.input_schema)
        except SchemaError as exc:
            raise ToolRegistrationError(
                f"tool {schema.name!r}: input_schema is not valid JSON Schema: "
                f"{exc.message} (at {exc.json_path} in the schema)"
            ) from exc
        entry = ToolEntry(
            tool=executor,
            validator=validator,
            fast_check=build_fast_check(schema.input_schema),
            is_async=is_async_tool(executor),
        )
        _warn_about_bad_examples(schema, entry)
        self._entries[schema.name] = entry
        return executor

    def selected(self, spec: Iterable[str | IToolExecutor | Callable[..., object]]) -> ToolRegistry:
        """A registry of the tools `spec` lists, for one run: a registered tool's name,
        `"*"` for every registered tool, or a tool (an IToolExecutor or a function) to
        add. Registered tools keep their compiled checks. Raises ConfigurationError for
        an unknown name, ToolRegistrationError for a tool that cannot be registered."""
        chosen = ToolRegistry()
        entries = chosen._entries
        for item in spec:
            if isinstance(item, str):
                if item == ALL_TOOLS:
                    for name, entry in self._entries.items():
                        entries.setdefault(name, entry)
                elif item in self._entries:
                    entries.setdefault(item, self._entries[item])
                else:
                    names = ", ".join(self._entries) or "none"
                    raise ConfigurationError(
                        f"unknown tool {item!r} in the run's tools (registered tools: "
                        f"{names}; '*' stands for all of them, and a tool object adds one)"
                    )
            else:
                name = getattr(getattr(item, "schema", None), "name", "")
                known = self._entries.get(name) if isinstance(name, str) else None
                if known is not None and known.tool is item:  # registered: keep its checks
                    entries.setdefault(name, known)
                else:
                    chosen.register(item)
        return chosen

    def combined(self, other: ToolRegistry) -> ToolRegistry:
        """A registry of this one's tools and then `other`'s whose names are not taken."""
        both = ToolRegistry()
        both._entries = dict(self._entries)
        for name, entry in other._entries.items():
            both._entries.setdefault(name, entry)
        return both

    def get(self, name: str) -> IToolExecutor | None:
        entry = self._entries.get(name)
        return entry.tool if entry is not None else None

    def entry(self, name: str) -> ToolEntry | None:
        """The registered tool `name` with its compiled checks, or None."""
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[IToolExecutor]:
        return iter([entry.tool for entry in self._entries.values()])

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"

    def names(self) -> list[str]:
        return list(self._entries)

    def schemas(self) -> list[ToolSchema]:
        return [entry.tool.schema for entry in self._entries.values()]

    def validator(self, name: str) -> Validator | None:
        """The compiled input validator of tool `name` (built once, at registration)."""
        entry = self._entries.get(name)
        return entry.validator if entry is not None else None

    def fast_check(self, name: str) -> FastCheck | None:
        """The compiled is-valid test of tool `name` (see `build_fast_check`), or None."""
        entry = self._entries.get(name)
        return entry.fast_check if entry is not None else None

    def validate_input(self, name: str, args: object) -> list[str]:
        """Every problem with calling tool `name` with `args`; empty when the call is valid."""
        entry = self._entries.get(name)
        if entry is None:
            known = ", ".join(self._entries) or "none"
            return [f"unknown tool {name!r} (registered tools: {known})"]
        return input_errors(entry.validator, args, fast_check=entry.fast_check)

    @staticmethod
    def _as_executor(tool: object) -> IToolExecutor:
        if isinstance(tool, IToolExecutor):
            return tool
        if isinstance(tool, type):
            raise ToolRegistrationError(
                f"register an instance, not the class: {tool.__name__}() instead of {tool.__name__}"
            )
        if callable(tool):
            try:
                wrapped: IToolExecutor = function_tool(tool)
                return wrapped
            except ToolRegistrationError:
                raise
            except Exception as exc:
                raise ToolRegistrationError(
                    f"cannot turn {getattr(tool, '__name__', tool)!r} into a tool: {exc}"
                ) from exc
        raise ToolRegistrationError(
            f"expected an IToolExecutor instance or a function, got {type(tool).__name__}"
        )


def _checked_schema(tool: IToolExecutor) -> ToolSchema:
    label = type(tool).__name__
    schema = getattr(tool, "schema", None)
    if schema is None:
        raise ToolRegistrationError(
            f"tool {label} has no schema: set `schema = ToolSchema(name=..., "
            "description=..., input_schema={...})` on the class"
        )
    if not isinstance(schema, ToolSchema):
        raise ToolRegistrationError(
            f"tool {label}: schema must be a ToolSchema, got {type(schema).__name__}; "
            "build it with ToolSchema(...) or ToolSchema.model_validate(...)"
        )
    if not TOOL_NAME_PATTERN.match(schema.name):
        raise ToolRegistrationError(
            f"tool {label}: name {schema.name!r} is not snake_case; use lower-case letters, "
            "digits and underscores, starting with a letter (e.g. 'get_weather')"
        )
    if not schema.description.strip():
        raise ToolRegistrationError(
            f"tool {schema.name!r} has an empty description; say what it does, when to use "
            "it and what it returns (the planner chooses tools by their descriptions)"
        )
    _check_mode_configs(schema)
    schema_type = schema.input_schema.get("type")
    if schema_type is not None and schema_type != "object":
        raise ToolRegistrationError(
            f"tool {schema.name!r}: input_schema must describe an object (type 'object'), "
            f"got type {schema_type!r}; tool input is a dict of named arguments"
        )
    return schema


def _check_mode_configs(schema: ToolSchema) -> None:
    """`blocking_config` and `display_config` only where the mode reads them, with the
    keys the engine reads of the right types."""
    name = schema.name
    if schema.blocking_config is not None:
        if schema.mode != "blocking":
            raise ToolRegistrationError(
                f"tool {name!r} has a blocking_config but execution_mode "
                f"{schema.execution_mode!r}; it applies to blocking tools only: set "
                "execution_mode='blocking' or drop it"
            )
        run_on_approval = schema.blocking_config.get(RUN_ON_APPROVAL, False)
        if not isinstance(run_on_approval, bool):
            raise ToolRegistrationError(
                f"tool {name!r}: blocking_config['run_on_approval'] must be true or false, "
                f"got {run_on_approval!r}"
            )
        prompt = schema.blocking_config.get(BLOCKING_PROMPT)
        if prompt is not None and not isinstance(prompt, str):
            raise ToolRegistrationError(
                f"tool {name!r}: blocking_config['prompt'] must be text, got {prompt!r}"
            )
    if schema.display_config is not None and schema.mode != "display":
        raise ToolRegistrationError(
            f"tool {name!r} has a display_config but execution_mode "
            f"{schema.execution_mode!r}; it applies to display tools only: set "
            "execution_mode='display' or drop it"
        )
