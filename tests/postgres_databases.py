"""Databases of their own for tests on a PostgreSQL server: made empty, dropped after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit


def with_database(url: str, database: str) -> str:
    """`url` (a postgresql:// URL) naming another database on the same server."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the server at `server_url`, dropped after."""
    import psycopg

    name = f"art_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
