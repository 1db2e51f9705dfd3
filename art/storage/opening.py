"""Choose a storage adapter by URL, and the JSON codec every adapter shares.

`open_storage` accepts an adapter (returned as is), a URL, or None (the `ART_STORAGE`
environment variable, else a SQLite file under the user data directory). Concrete adapters
are imported here, lazily, the first time one is asked for: `import art` never loads them.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_json

from art.config import STORAGE_ENV
from art.core.redaction import current_secrets, redact
from art.core.serialization import escape_unencodable_data
from art.errors import ConfigurationError
from art.storage.contract import StorageAdapter

__all__ = [
    "ACCEPTED_URLS",
    "as_utc",
    "default_sqlite_path",
    "dump_json",
    "load_json",
    "load_json_as",
    "merge_metadata",
    "metadata_matches",
    "open_storage",
    "thread_cursor",
    "timestamp_key",
]

ACCEPTED_URLS = (
    "memory://",
    "sqlite:///relative/path.db",
    "sqlite:////absolute/path.db",
    "postgresql://user:password@host:5432/dbname",
)

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")


def default_sqlite_path() -> Path:
    """`<user data dir>/art.db`, e.g. `~/.local/share/art/art.db` on Linux."""
    import platformdirs

    return Path(platformdirs.user_data_dir("art")) / "art.db"


def open_storage(target: StorageAdapter | str | os.PathLike[str] | None = None) -> StorageAdapter:
    """The adapter for `target`: an adapter, a storage URL, or None for the default.

    The adapter is built but not opened: call (and await) its `open()` before use.
    """
    if isinstance(target, StorageAdapter):
        return target
    if target is None:
        target = os.environ.get(STORAGE_ENV) or None
    if target is None:
        from art.adapters.sqlite import SQLiteStorage

        return SQLiteStorage(default_sqlite_path())
    if isinstance(target, os.PathLike):
        target = f"sqlite:///{os.fspath(target)}"
    if not isinstance(target, str):
        raise ConfigurationError(
            f"storage must be a StorageAdapter or a URL string, not {type(target).__name__}"
        )
    url = target.strip()
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        from art.adapters.memory import MemoryStorage

        return MemoryStorage()
    if scheme == "sqlite":
        return _open_sqlite(url)
    if scheme in ("postgresql", "postgres"):
        if importlib.util.find_spec("psycopg") is None or (
            importlib.util.find_spec("psycopg_pool") is None
        ):
            raise ConfigurationError(
                "PostgreSQL storage needs psycopg 3 and psycopg_pool: "
                'pip install "art-pes[postgres]"'
            )
        from art.adapters.postgres import PostgresStorage

        return PostgresStorage(url)
    accepted = ", ".join(ACCEPTED_URLS)
    raise ConfigurationError(
        f"unknown storage URL {redact(url)!r}: expected a StorageAdapter or one of {accepted} "
        "(postgres:// also works)"
    )


def _open_sqlite(url: str) -> StorageAdapter:
    from art.adapters.sqlite import SQLiteStorage

    # urlsplit would read "sqlite:///a.db" as netloc "" and path "/a.db"; the convention
    # (SQLAlchemy's) is three slashes for a relative path and four for an absolute one.
    rest = url[len("sqlite:") :]
    query = ""
    if "?" in rest:
        rest, query = rest.split("?", 1)
    if not rest.startswith("///"):
        raise ConfigurationError(
            f"bad SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path = rest[3:]
    if not path:
        raise ConfigurationError(f"bad SQLite URL {url!r}: no database file named")
    options = {key.lower(): values[-1] for key, values in parse_qs(query).items()}
    synchronous = options.pop("synchronous", "normal").lower()
    if synchronous not in ("normal", "full"):
        raise ConfigurationError(
            f"bad SQLite URL {url!r}: synchronous must be 'normal' or 'full', not {synchronous!r}"
        )
    if options:
        raise ConfigurationError(
            f"bad SQLite URL {url!r}: unknown option(s) {sorted(options)}; "
            "the only one is ?synchronous=normal|full"
        )
    return SQLiteStorage(Path(path), synchronous=synchronous)


# -- the codec: every adapter stores records as the same JSON ------------------------


def _json_fallback(value: Any) -> Any:
    """Values JSON cannot carry (sets, bytes, arbitrary objects) are stored as text."""
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return repr(value)


def dump_json(model: BaseModel, *, exclude: set[str] | None = None) -> str:
    """The record as JSON text (snake_case keys), never failing on odd tool outputs (lone
    surrogates are written as `\\udcff` escapes), with the secrets of the run in
    progress masked (`art.core.redaction.secrets_in_use`)."""
    serializer = model.__pydantic_serializer__
    try:
        # What model_dump_json does, without its layer of keyword defaults (twice per step).
        text = serializer.to_json(model, exclude=exclude, fallback=_json_fallback).decode()
    except PydanticSerializationError:  # a lone surrogate, which UTF-8 cannot carry
        text = ""
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
    from_json: Callable[[str | bytes], T], from_data: Callable[[Any], T], text: str | bytes
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


def merge_metadata(current: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`current` with `update`'s keys set, and those `update` gives None removed."""
    merged = dict(current)
    for key, value in update.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def metadata_matches(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
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
