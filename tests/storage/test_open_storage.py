"""open_storage: adapters chosen by URL, the default location, clear errors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from art.errors import ConfigurationError
from art.storage.opening import default_sqlite_path, open_storage


def test_an_adapter_is_returned_as_is() -> None:
    from art.adapters.memory import MemoryStorage

    adapter = MemoryStorage()
    assert open_storage(adapter) is adapter


def test_memory_url() -> None:
    from art.adapters.memory import MemoryStorage

    first, second = open_storage("memory://"), open_storage("memory://")
    assert isinstance(first, MemoryStorage) and first is not second


@pytest.mark.parametrize(
    ("url", "expected", "synchronous"),
    [
        ("sqlite:///data/art.db", Path("data/art.db").absolute(), "normal"),
        ("sqlite:////var/tmp/art.db", Path("/var/tmp/art.db"), "normal"),
        ("sqlite:////var/tmp/art.db?synchronous=full", Path("/var/tmp/art.db"), "full"),
        ("sqlite:///art.db?synchronous=NORMAL", Path("art.db").absolute(), "normal"),
    ],
)
def test_sqlite_urls(url: str, expected: Path, synchronous: str) -> None:
    from art.adapters.sqlite import SQLiteStorage

    storage = open_storage(url)

    assert isinstance(storage, SQLiteStorage)
    assert storage.path == expected and storage.synchronous == synchronous
    assert open_storage(storage.url).path == expected  # its url opens the same file


def test_a_path_object_means_sqlite(tmp_path: Path) -> None:
    storage = open_storage(tmp_path / "x.db")
    assert storage.path == tmp_path / "x.db"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://art.db", "use sqlite:///relative"),
        ("sqlite:///", "no database file"),
        ("sqlite:///a.db?synchronous=off", "must be 'normal' or 'full'"),
        ("sqlite:///a.db?journal=delete", "unknown option"),
        ("mysql://localhost/art", "memory://"),
        ("redis://localhost", "postgresql://"),
        ("art.db", "sqlite:///"),
    ],
)
def test_bad_urls_raise_configuration_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_storage(url)


def test_a_non_url_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="StorageAdapter or a URL"):
        open_storage(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_urls(scheme: str) -> None:
    from art.adapters.postgres import PostgresStorage

    storage = open_storage(f"{scheme}://art:secret@db.example:5432/art")

    assert isinstance(storage, PostgresStorage)
    assert "secret" not in repr(storage)


def test_postgres_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("psycopg") else real_find_spec(name, *a),
    )
    with pytest.raises(ConfigurationError, match=r'pip install "art-pes\[postgres\]"'):
        open_storage("postgresql://localhost/art")


def test_none_reads_art_storage(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ART_STORAGE", f"sqlite:///{tmp_path}/env.db")
    assert open_storage(None).path == tmp_path / "env.db"  # type: ignore[attr-defined]


def test_none_without_env_is_sqlite_in_the_user_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import platformdirs

    monkeypatch.delenv("ART_STORAGE", raising=False)
    monkeypatch.setattr(platformdirs, "user_data_dir", lambda app: str(tmp_path / app))

    storage = open_storage(None)

    assert storage.path == tmp_path / "art" / "art.db"  # type: ignore[attr-defined]
    assert default_sqlite_path() == tmp_path / "art" / "art.db"


def test_core_imports_no_adapter() -> None:
    code = (
        "import sys, art, art.storage.opening, art.storage.contract\n"
        "loaded = [m for m in sys.modules if m.startswith('art.adapters.')"
        " or m.split('.')[0] in ('psycopg', 'psycopg_pool', 'sqlite3', 'filelock')]\n"
        "print(loaded)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# -- storage that cannot be opened ------------------------------------------------------------


@pytest.mark.parametrize(
    ("make_url", "says"),
    [
        (lambda tmp: "sqlite:////proc/art.db", "unable to open database file"),
        (lambda tmp: f"sqlite:///{_garbage(tmp)}", "not an art database or is damaged"),
        (lambda tmp: f"sqlite:///{_a_file(tmp)}/inside/art.db", "directory exists"),
    ],
)
async def test_sqlite_that_cannot_be_opened_is_a_storage_error_naming_the_file(
    tmp_path: Path, make_url, says: str
) -> None:
    import art
    from art.errors import StorageError

    url = make_url(tmp_path)
    storage = open_storage(url)
    with pytest.raises(StorageError) as info:
        await storage.open()
    assert info.value.code == "STORAGE_ERROR"
    assert str(storage.path) in info.value.message  # type: ignore[attr-defined]
    assert says in info.value.message
    # The same error reaches a caller of process(), not sqlite3's.
    with pytest.raises(StorageError, match="SQLite storage"):
        await art.create_art_instance(model="openai/x", storage=url).aprocess("q", "t")


def _garbage(tmp: Path) -> Path:
    (tmp / "corrupt.db").write_bytes(b"not a database " * 100)
    return tmp / "corrupt.db"


def _a_file(tmp: Path) -> Path:
    (tmp / "plain").write_text("a file where a directory should be")
    return tmp / "plain"


def test_postgres_connect_timeout_is_short_and_configurable() -> None:
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed")
    from art.adapters.postgres import DEFAULT_CONNECT_TIMEOUT_S, PostgresStorage

    assert DEFAULT_CONNECT_TIMEOUT_S == 5
    assert PostgresStorage("postgresql://h/db").connect_timeout_s == 5
    assert PostgresStorage("postgresql://h/db?connect_timeout=12").connect_timeout_s == 12
    assert PostgresStorage("host=h dbname=db connect_timeout=3").connect_timeout_s == 3
    assert PostgresStorage("postgresql://h/db", connect_timeout_s=9).connect_timeout_s == 9
    with pytest.raises(ConfigurationError, match="at least 2"):
        PostgresStorage("postgresql://h/db", connect_timeout_s=0)
    with pytest.raises(ConfigurationError, match="whole seconds"):
        PostgresStorage("postgresql://h/db?connect_timeout=soon")


@pytest.mark.slow
async def test_a_postgres_server_that_never_answers_is_a_storage_error_after_the_timeout() -> None:
    import socket
    import time

    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed")
    from art.adapters.postgres import PostgresStorage
    from art.errors import StorageError

    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        url = f"postgresql://art:hunter2-secret@127.0.0.1:{port}/art?connect_timeout=2"
        started = time.monotonic()
        with pytest.raises(StorageError) as info:
            await PostgresStorage(url).open()
        elapsed = time.monotonic() - started
    assert elapsed < 6, elapsed
    message = info.value.message
    assert f"postgresql://art:***@127.0.0.1:{port}/art" in message
    assert "hunter2-secret" not in message and "hunter2-secret" not in repr(info.value.details)
    assert "timeout" in message and "connect_timeout=N" in message


async def test_a_refused_postgres_connection_is_a_storage_error_at_once() -> None:
    import socket

    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed")
    from art.adapters.postgres import PostgresStorage
    from art.errors import StorageError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    url = f"postgresql://art:hunter2-secret@127.0.0.1:{port}/art"
    with pytest.raises(StorageError, match="Connection refused") as info:
        await PostgresStorage(url).open()
    assert "hunter2-secret" not in info.value.message
    assert "check that the server is running" in info.value.message
