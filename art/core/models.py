"""The base model every boundary type shares: snake_case in Python, camelCase on the wire."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

M = TypeVar("M", bound=BaseModel)


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


def builder(model: type[M]) -> Callable[[Mapping[str, object]], M]:
    """`model(**fields)` as a function of the fields, for the per-step path: the model's own
    validator, which `model(**fields)` runs too, without `__init__`'s Python frame."""
    return model.__pydantic_validator__.validate_python
