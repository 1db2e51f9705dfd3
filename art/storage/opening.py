"""Choose a storage adapter by URL.

`open_storage` accepts an adapter (returned as is), a URL, or None (the `ART_STORAGE`
environment variable, else a SQLite file under the user data directory). Concrete adapters
are imported here, lazily, the first time one is asked for: `import art` never loads them.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from art.config import STORAGE_ENV
from art.core.redaction import redact
from art.errors import ConfigurationError
from art.storage.codec import (
    as_utc,
    dump_json,
    load_json,
    load_json_as,
    merge_metadata,
    metadata_matches,
    thread_cursor,
    timestamp_key,
)
from art.storage.contract import StorageAdapter

__all__ = [
    "ACCEPTED_URLS",
    # the codec's names (art.storage.codec), importable from here too
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
