"""Suite-wide settings. Area fixtures live beside their tests (tests/<area>/conftest.py)."""

import functools
import gc
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

# Hypothesis keeps its example database and caches outside the checkout (read when first used).
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "art-tests-hypothesis")
)

# litellm otherwise downloads its model price map at import and retries without network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Never let a test fall back to a real provider or the user's storage.
os.environ.pop("ART_MODEL", None)
os.environ.setdefault("ART_STORAGE", "memory://")


POSTGRES_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "postgres.sh"
# The server a whole-suite run starts while the tests are collected (see pytest_sessionstart).
EARLY_POSTGRES = pytest.StashKey["subprocess.Popen[str]"]()


def _postgres_binaries_present() -> bool:
    return any(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or bool(shutil.which("initdb"))


def _no_postgres(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _start_postgres() -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [str(POSTGRES_SCRIPT), "start"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ART_PG_OWNER": str(os.getpid())},  # reaped if we die
    )


def _exports(out: str) -> dict[str, str]:
    """The variables in the `export NAME=value` lines `.ci/postgres.sh start` prints."""
    return dict(
        line.removeprefix("export ").split("=", 1)
        for line in out.splitlines()
        if line.startswith("export ")
    )


def _started(process: "subprocess.Popen[str]") -> dict[str, str]:
    """What the server's start exported; skips (fails under CI) if it did not start."""
    out, err = process.communicate(timeout=180)
    if process.returncode != 0:
        _no_postgres(f".ci/postgres.sh start failed:\n{err}")
    return _exports(out)


def _stop_postgres(exported: dict[str, str]) -> None:
    subprocess.run(
        [str(POSTGRES_SCRIPT), "stop", exported["ART_TEST_POSTGRES_DIR"]],
        capture_output=True,
        timeout=300,
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run of the whole suite uses PostgreSQL: start its server while the tests are
    collected rather than when the first PostgreSQL test waits for it."""
    config = session.config
    if _distributing(config):  # the workers run the tests, each with its own server
        return
    whole_suite = config.args_source is pytest.Config.ArgsSource.TESTPATHS
    if whole_suite and not os.environ.get("ART_TEST_POSTGRES_URL") and _postgres_binaries_present():
        config.stash[EARLY_POSTGRES] = _start_postgres()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the early server if no test asked for it (a -k or -x run)."""
    unused = session.config.stash.get(EARLY_POSTGRES, None)
    if unused is not None:
        del session.config.stash[EARLY_POSTGRES]
        out, _ = unused.communicate(timeout=180)
        if unused.returncode == 0:
            _stop_postgres(_exports(out))


@pytest.fixture(scope="session")
def postgres_server(pytestconfig: pytest.Config) -> Iterator[str]:
    """The URL of a PostgreSQL database for tests, one server for the whole session.

    It comes from `ART_TEST_POSTGRES_URL` if set; otherwise, when the server binaries are
    installed, the session starts its own with `.ci/postgres.sh` and stops it at the end.
    Without either, PostgreSQL tests skip, except under `CI`, where they fail.
    """
    url = os.environ.get("ART_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    early = pytestconfig.stash.get(EARLY_POSTGRES, None)
    if early is not None:
        del pytestconfig.stash[EARLY_POSTGRES]  # this fixture stops it now
    elif not _postgres_binaries_present():
        _no_postgres("no ART_TEST_POSTGRES_URL and no PostgreSQL binaries (.ci/postgres.sh)")
    exported = _started(early or _start_postgres())
    try:
        yield exported["ART_TEST_POSTGRES_URL"]
    finally:
        _stop_postgres(exported)


@pytest.fixture
def restore_logging():
    """Put the root logger and structlog back as they were (for tests that configure them)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)
    structlog.reset_defaults()


@pytest.fixture(scope="session", autouse=True)
def _cli_commands_built_once() -> Iterator[None]:
    """typer's CliRunner builds the click command from the app's annotations on every invoke
    (30 ms); no test changes an app, so each app's command is built once per session."""
    typer_testing = sys.modules.get("typer.testing")
    if typer_testing is None:  # no collected test uses CliRunner
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer_testing, "_get_command", functools.cache(typer_testing._get_command))
        yield


def _distributing(config: pytest.Config) -> bool:
    """Whether this process hands the tests to pytest-xdist workers (`-n`)."""
    workers = getattr(config.option, "numprocesses", None)  # None without pytest-xdist
    return bool(workers) and not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A plain run spreads the tests over two workers (`-n auto --maxprocesses 2` in the
    pytest settings); `--slow` and `--pdb` run in one process, so the timed and
    subprocess-heavy tests have the machine to themselves. An explicit `-n N` is kept."""
    auto = getattr(config.option, "numprocesses", None) == "auto"
    if auto and (config.option.slow or config.option.usepdb):
        config.option.numprocesses = 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (subprocesses, valgrind, benchmarks, examples)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    """Collecting imports litellm and every test module: millions of objects that live until
    the end. The garbage collector skips them: it is off while they are made, and then they
    are frozen (`gc.freeze`), so no later collection, in a test or at exit, walks them again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the slow tests out of a plain run, so the edit-test loop stays short.

    `--slow` (the README's and CI's command), any `-m` expression, or a test named by its
    node id keeps them in.
    """
    named = any("::" in arg for arg in config.args)
    if config.getoption("--slow") or config.option.markexpr or named:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
