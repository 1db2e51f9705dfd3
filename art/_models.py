"""The base model every boundary type shares: snake_case in Python, camelCase on the wire."""

from __future__ import annotations

from typing import Any

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
