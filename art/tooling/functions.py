"""@art.tool: a typed Python function becomes an IToolExecutor.

The input schema comes from the signature (through pydantic), parameter
descriptions and the tool description from the docstring (Google, NumPy, reST or
Epydoc style: every paragraph before the first section is the description). A
parameter annotated `ExecutionContext` receives the call's context
and is not part of the input. The function may be sync (it then runs in a worker
thread) or async; a plain return value becomes `ToolResult.output` (for a blocking
tool, the question a person is asked: the call suspends), and a returned ToolResult
passes through unchanged.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, Union, get_args, get_origin, overload

import docstring_parser
import pydantic
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from art.core.json import JsonObject
from art.errors import ToolRegistrationError
from art.tooling.contract import (
    ExecutionContext,
    ExecutionMode,
    IToolExecutor,
    ToolExample,
    ToolResult,
    ToolSchema,
)

__all__ = ["FunctionTool", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

_TYPE_HINT = (
    "use JSON-friendly types (str, int, float, bool, list, dict, Literal, enums, "
    "dataclasses, pydantic models)"
)


class FunctionTool(IToolExecutor, Generic[P, R]):
    """A function wrapped as a tool. Calling it calls the function itself (handy in tests)."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        execution_mode: ExecutionMode = "functional",
        blocking_config: Mapping[str, object] | None = None,
        examples: Sequence[ToolExample | Mapping[str, object]] = (),
    ) -> None:
        if not callable(fn):
            raise ToolRegistrationError(f"@art.tool needs a function, got {type(fn).__name__}")
        self.fn = fn
        functools.update_wrapper(self, fn)
        label = getattr(fn, "__qualname__", None) or repr(fn)
        signature = _signature(fn, label)
        hints = _type_hints(fn, label)
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")

        self._context_param: str | None = None
        self._positional: list[str] = []
        fields: dict[str, tuple[object, FieldInfo]] = {}
        self._fields: dict[str, str] = {}  # input name -> field name on the input model
        param_docs = {p.arg_name: _one_line(p.description) for p in doc.params}
        for index, param in enumerate(signature.parameters.values()):
            annotation: object = hints.get(param.name, Any)
            if _is_context(annotation):
                self._context_param = param.name
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolRegistrationError(
                    f"{label}: *{param.name} / **{param.name} cannot be described as tool "
                    "input; give every argument its own named, typed parameter"
                )
            if param.kind is param.POSITIONAL_ONLY:
                self._positional.append(param.name)
            default = ... if param.default is param.empty else param.default
            field_name = f"arg_{index}"  # the real name is the alias: no clash with BaseModel
            self._fields[param.name] = field_name
            fields[field_name] = (
                annotation,
                Field(default, alias=param.name, description=param_docs.get(param.name)),
            )

        tool_name = name or getattr(fn, "__name__", None) or ""
        self._input_model = _input_model(tool_name, fields, label)
        self.schema = _build_schema(
            name=tool_name,
            description=description if description is not None else _description(doc),
            input_schema=_json_schema(self._input_model, label),
            output_schema=_output_schema(hints.get("return")),
            execution_mode=execution_mode,
            blocking_config=blocking_config,
            examples=list(examples),
            label=label,
        )
        self._is_async = inspect.iscoroutinefunction(fn)
        if not self._is_async:
            # A plain `def` executor: the engine runs the call on its tool threads, which
            # max_concurrency bounds (asyncio.to_thread would use the loop's small pool).
            self.execute = self._execute_blocking  # type: ignore[method-assign, assignment]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.schema.name!r})"

    async def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        """Convert the input to the parameter types, call the function, wrap its return.

        For a plain `def` function `execute` is a plain method too, which the engine runs
        in a worker thread."""
        call = self._arguments(input, context)
        if isinstance(call, ToolResult):
            return call
        positional, values = call
        # the arguments were checked against the signature by the input model, at run time
        fn: Callable[..., object] = self.fn
        returned = fn(*positional, **values)
        if inspect.isawaitable(returned):  # always, for the async functions this serves
            returned = await returned
        return self._result(returned, context)

    def _execute_blocking(
        self, input: dict[str, Any], context: ExecutionContext
    ) -> ToolResult | Awaitable[ToolResult]:
        call = self._arguments(input, context)
        if isinstance(call, ToolResult):
            return call
        positional, values = call
        # the arguments were checked against the signature by the input model, at run time
        fn: Callable[..., object] = self.fn
        returned = fn(*positional, **values)
        if inspect.isawaitable(returned):  # a callable object with an async __call__
            return self._awaited(returned, context)
        return self._result(returned, context)

    async def _awaited(self, returned: Awaitable[object], context: ExecutionContext) -> ToolResult:
        return self._result(await returned, context)

    def _result(self, returned: object, context: ExecutionContext) -> ToolResult:
        if isinstance(returned, ToolResult):
            return returned
        # A blocking tool asks before it acts: its return value is the reviewer's question,
        # unless it is running again under an approval (run_on_approval).
        asks = self.schema.mode == "blocking" and context.decision is None
        return ToolResult(
            call_id=context.call_id,
            tool_name=self.schema.name,
            status="suspended" if asks else "success",
            output=returned,
        )

    def _arguments(
        self, input: Mapping[str, object], context: ExecutionContext
    ) -> tuple[list[object], dict[str, object]] | ToolResult:
        """The function's arguments from `input`, or the VALIDATION_ERROR result."""
        try:
            parsed = self._input_model.model_validate(input)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'input'}: {error['msg']}"
                for error in exc.errors()
            )
            return ToolResult(
                call_id=context.call_id,
                tool_name=self.schema.name,
                status="error",
                error=f"invalid input for tool {self.schema.name!r}: {problems}",
                metadata={"error_code": "VALIDATION_ERROR", "retryable": False},
            )
        values: dict[str, object] = {
            name: getattr(parsed, field) for name, field in self._fields.items()
        }
        if self._context_param is not None:
            values[self._context_param] = context
        positional = [values.pop(name) for name in self._positional]
        return positional, values


@overload
def tool(fn: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    execution_mode: ExecutionMode = "functional",
    blocking_config: Mapping[str, object] | None = None,
    examples: Sequence[ToolExample | Mapping[str, object]] = (),
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    execution_mode: ExecutionMode = "functional",
    blocking_config: Mapping[str, object] | None = None,
    examples: Sequence[ToolExample | Mapping[str, object]] = (),
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Turn a typed function into a tool: `@art.tool` or `@art.tool(name=..., ...)`.

    `name` defaults to the function's name, `description` to the docstring's
    paragraphs before its first section (plus its Returns section); `execution_mode`,
    `blocking_config` and `examples` go into the schema as they are.
    Raises ToolRegistrationError when the function cannot be described (no docstring,
    `*args`, unknown annotations).
    """

    def wrap(function: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(
            function,
            name=name,
            description=description,
            execution_mode=execution_mode,
            blocking_config=blocking_config,
            examples=examples,
        )

    return wrap(fn) if fn is not None else wrap


# --- building the schema ---------------------------------------------------------------


def _signature(fn: Callable[..., object], label: str) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolRegistrationError(f"{label}: cannot read the signature: {exc}") from exc


def _type_hints(fn: Callable[..., object], label: str) -> dict[str, object]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolRegistrationError(
            f"{label}: cannot resolve the type annotations ({exc}); define the types it "
            "names at module level"
        ) from exc


def _is_context(annotation: object) -> bool:
    if inspect.isclass(annotation) and issubclass(annotation, ExecutionContext):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return len(members) == 1 and _is_context(members[0])
    return False


def _input_model(
    name: str, fields: dict[str, tuple[object, FieldInfo]], label: str
) -> type[BaseModel]:
    # create_model's keywords also name its options (__config__, ...): a dict of field
    # tuples cannot be matched against those, so the definitions go in untyped.
    definitions: dict[str, Any] = dict(fields)
    try:
        return create_model(
            f"{name or 'tool'}_input",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **definitions,
        )
    except Exception as exc:
        raise ToolRegistrationError(
            f"{label}: a parameter type cannot be tool input ({_first_line(exc)}); {_TYPE_HINT}"
        ) from exc


def _json_schema(model: type[BaseModel], label: str) -> JsonObject:
    try:
        with warnings.catch_warnings():
            # A default that is not JSON-serializable is left out of the schema; fine.
            warnings.simplefilter("ignore", pydantic.json_schema.PydanticJsonSchemaWarning)
            schema = model.model_json_schema(by_alias=True)
    except Exception as exc:
        raise ToolRegistrationError(
            f"{label}: a parameter type has no JSON Schema ({_first_line(exc)}); {_TYPE_HINT}"
        ) from exc
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _output_schema(annotation: object) -> JsonObject | None:
    if annotation is None or annotation is type(None) or annotation is Any:
        return None
    if inspect.isclass(annotation) and issubclass(annotation, ToolResult):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pydantic.TypeAdapter(annotation).json_schema()
    except Exception:  # an arbitrary return type: the schema is optional
        return None


def _description(doc: docstring_parser.Docstring) -> str:
    """Every paragraph of the docstring before its first section (each on one line,
    separated by a blank line), plus its Returns section when there is one."""
    paragraphs = [doc.short_description or ""]
    if doc.long_description:
        rest = doc.long_description.split("\n\n")
        if not doc.blank_after_short_description:  # the summary runs on into the text
            paragraphs[0] = f"{paragraphs[0]} {rest.pop(0)}"
        paragraphs += rest
    description = "\n\n".join(p for p in map(_one_line, paragraphs) if p)
    if doc.returns is not None and doc.returns.description:
        description = f"{description} Returns: {_one_line(doc.returns.description)}".strip()
    return description


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _build_schema(*, label: str, **fields: object) -> ToolSchema:
    if not fields["description"]:
        raise ToolRegistrationError(
            f"{label}: a tool needs a description; add a docstring (its first paragraph "
            "becomes the description) or pass description=..."
        )
    try:
        return ToolSchema(**fields)
    except pydantic.ValidationError as exc:
        raise ToolRegistrationError(f"{label}: invalid tool settings: {exc}") from exc
