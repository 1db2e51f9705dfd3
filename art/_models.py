"""The base model every boundary type shares: snake_case in Python, camelCase on the wire."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ArtModel(BaseModel):
    """Accepts both `call_id` and `callId`; `model_dump(by_alias=True)` emits camelCase."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=False,
    )

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON form (what travels to storage, events and other languages)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


ModelT = TypeVar("ModelT", bound=BaseModel)


def trusted(
    cls: type[ModelT],
    values: dict[str, Any],
    *,
    private: dict[str, Any] | None = None,
    fields_set: set[str] | None = None,
) -> ModelT:
    """An instance of `cls` holding `values` as they are: no validation, no defaults.

    For hot paths whose values are already of the declared types and name every field;
    pydantic's own `model_construct` costs more than validating. `private` holds the
    values of the model's private attributes, if it has any; `fields_set` the fields
    given explicitly (default: all of `values`), as `model_fields_set` reports them.
    """
    model = _new(cls)
    _set_dict(model, "__dict__", values)
    _set_fields_set(model, set(values) if fields_set is None else fields_set)
    _set_extra(model, None)
    _set_private(model, private)
    return model


# The slots pydantic keeps beside `__dict__`, written through their descriptors because
# pydantic's __setattr__ validates.
_new = BaseModel.__new__  # object's: pydantic models do not define one
_set_dict = object.__setattr__
_set_fields_set: Callable[[BaseModel, set[str]], None] = vars(BaseModel)[
    "__pydantic_fields_set__"
].__set__
_set_extra: Callable[[BaseModel, dict[str, Any] | None], None] = vars(BaseModel)[
    "__pydantic_extra__"
].__set__
_set_private: Callable[[BaseModel, dict[str, Any] | None], None] = vars(BaseModel)[
    "__pydantic_private__"
].__set__
