"""What every storage adapter shares: records stored as the same JSON, timestamps as the
same fixed-width UTC text, metadata merged and searched alike, thread cursors read alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_json

from art.core.json import JsonValue
from art.core.redaction import Secrets, current_secrets
from art.core.serialization import escape_unencodable_data

__all__ = [
    "as_utc",
    "dump_json",
    "load_json",
    "load_json_as",
    "merge_metadata",
    "metadata_matches",
    "thread_cursor",
    "timestamp_key",
]

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")


def _json_fallback(value: object) -> list[object] | str:
    """Values JSON cannot carry (sets, bytes, arbitrary objects) are stored as text."""
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return repr(value)


def dump_json(
    model: BaseModel, *, exclude: set[str] | None = None, secrets: Secrets | None = None
) -> str:
    """The record as JSON text (snake_case keys), never failing on odd tool outputs (lone
    surrogates are written as `\\udcff` escapes), with `secrets` masked (default: those
    of the run in progress, `art.core.redaction.secrets_in_use`)."""
    serializer = model.__pydantic_serializer__
    try:
        # What model_dump_json does, without its layer of keyword defaults (twice per step).
        text = serializer.to_json(model, exclude=exclude, fallback=_json_fallback).decode()
    except PydanticSerializationError:  # a lone surrogate, which UTF-8 cannot carry
        text = ""
    if secrets is None:
        secrets = current_secrets()
    if not text or (secrets and (not secrets.json_plain or secrets.found_in(text))):
        try:
            data = serializer.to_python(
                model, mode="json", exclude=exclude, fallback=_json_fallback
            )
        except (UnicodeError, PydanticSerializationError):  # a lone surrogate in a dict key
            data = serializer.to_python(model, exclude=exclude, fallback=_json_fallback)
        data = secrets.mask(escape_unencodable_data(data))
        text = to_json(data, fallback=_json_fallback, inf_nan_mode="null").decode()
    return text


def load_json(model_type: type[ModelT], text: str | bytes) -> ModelT:
    """The record stored as `text` (see `load_json_as`)."""
    return _read(model_type.model_validate_json, model_type.model_validate, text)


def load_json_as(adapter: TypeAdapter[T], text: str | bytes) -> T:
    """The value stored as `text`. JSON nested deeper than pydantic's parser reads (200
    levels; the doors refuse such data, but older versions stored it) is parsed by the
    standard library instead, so no stored thread is unreadable."""
    return _read(adapter.validate_json, adapter.validate_python, text)


def _read(
    from_json: Callable[[str | bytes], T], from_data: Callable[[JsonValue], T], text: str | bytes
) -> T:
    try:
        return from_json(text)
    except ValidationError as exc:
        if not any(error["type"] == "json_invalid" for error in exc.errors()):
            raise
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise exc from None
        return from_data(data)


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive one is read as UTC, as every adapter reads it."""
    if moment.tzinfo is UTC:
        return moment
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def timestamp_key(moment: datetime) -> str:
    """A fixed-width UTC ISO string, so text order is time order (naive means UTC)."""
    # isoformat, cheaper than strftime, always ends in "+00:00" with explicit microseconds.
    return as_utc(moment).isoformat(timespec="microseconds")[:-6] + "Z"


def merge_metadata(current: Mapping[str, T], update: Mapping[str, T | None]) -> dict[str, T]:
    """`current` with `update`'s keys set, and those `update` gives None removed."""
    merged = dict(current)
    for key, value in update.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def metadata_matches(stored: Mapping[str, object], wanted: Mapping[str, object]) -> bool:
    """Whether every key of `wanted` is in `stored` with that scalar value: strings equal,
    numbers equal by value, booleans and null only themselves (what every adapter's
    search does)."""
    for key, value in wanted.items():
        if key not in stored:
            return False
        found = stored[key]
        if isinstance(value, bool) or value is None or isinstance(found, bool):
            if found is not value:
                return False
        elif isinstance(value, str) != isinstance(found, str) or found != value:
            return False
    return True


def thread_cursor(cursor: str | None) -> int | None:
    """The position a `ThreadPage.next_cursor` stands for; ValueError when it is not one."""
    if cursor is None:
        return None
    if not cursor.isdigit() or len(cursor) > 19:
        raise ValueError(f"not a thread cursor: {cursor[:40]!r}")
    return int(cursor)
