"""open_storage: adapters chosen by URL, the default location, clear errors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from art.errors import ConfigurationError
from art.storage import default_sqlite_path, open_storage


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
        "import sys, art, art.storage, art.state\n"
        "loaded = [m for m in sys.modules if m.startswith('art.adapters.')"
        " or m.split('.')[0] in ('psycopg', 'psycopg_pool', 'sqlite3', 'filelock')]\n"
        "print(loaded)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
