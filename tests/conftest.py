"""Suite-wide settings. Area fixtures live beside their tests (tests/<area>/conftest.py)."""

import functools
import gc
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from postgres_databases import fresh_database

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
EARLY_POSTGRES = pytest.StashKey["_ServerStart"]()
# The pytest-xdist workers' input naming the file that reports the controller's server start.
SHARED_POSTGRES = "art_postgres_start"


def _postgres_binaries_present() -> bool:
    return any(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or bool(shutil.which("initdb"))


def _no_postgres(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _exports(out: str) -> dict[str, str]:
    """The variables in the `export NAME=value` lines `.ci/postgres.sh start` prints."""
    return dict(
        line.removeprefix("export ").split("=", 1)
        for line in out.splitlines()
        if line.startswith("export ")
    )


def _stop_postgres(exported: dict[str, str]) -> None:
    subprocess.run(
        [str(POSTGRES_SCRIPT), "stop", exported["ART_TEST_POSTGRES_DIR"]],
        capture_output=True,
        timeout=300,
    )


class _ServerStart:
    """`.ci/postgres.sh start` under way; how it ended is written to `report` (JSON), which
    pytest-xdist workers, other processes, read to share the server."""

    def __init__(self) -> None:
        self.report = Path(tempfile.mkdtemp(prefix="art-pg-start-")) / "outcome.json"
        process = subprocess.Popen(
            [str(POSTGRES_SCRIPT), "start"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "ART_PG_OWNER": str(os.getpid())},  # reaped if we die
        )
        self._waiter = threading.Thread(
            target=self._report, args=(process,), name="art-postgres-start", daemon=True
        )
        self._waiter.start()

    def _report(self, process: "subprocess.Popen[str]") -> None:
        try:
            out, err = process.communicate(timeout=180)
            outcome = {"returncode": process.returncode, "out": out, "err": err}
        except Exception as exc:  # reported, so that no worker waits for nothing
            outcome = {"returncode": -1, "out": "", "err": repr(exc)}
        staged = self.report.with_suffix(".tmp")
        staged.write_text(json.dumps(outcome))
        staged.replace(self.report)  # readers find all of it or nothing

    def exported(self) -> dict[str, str]:
        """What the start exported; skips (fails under CI) if the server did not start."""
        self._waiter.join()
        return _reported(self.report)

    def close(self) -> None:
        """Stop the server if it started, and remove the report."""
        self._waiter.join()
        outcome = json.loads(self.report.read_text())
        if outcome["returncode"] == 0:
            _stop_postgres(_exports(outcome["out"]))
        shutil.rmtree(self.report.parent, ignore_errors=True)


def _reported(report: Path) -> dict[str, str]:
    """What the server start reported in `report` exported, once it has ended; skips (fails
    under CI) if the server did not start."""
    deadline = time.monotonic() + 200
    while not report.exists():
        if time.monotonic() > deadline:
            _no_postgres(f"no report of the PostgreSQL server's start in {report}")
        time.sleep(0.02)
    outcome = json.loads(report.read_text())
    if outcome["returncode"] != 0:
        _no_postgres(f".ci/postgres.sh start failed:\n{outcome['err']}")
    return _exports(outcome["out"])


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run of the whole suite uses PostgreSQL: start its server while the tests are
    collected rather than when the first PostgreSQL test waits for it. Under pytest-xdist
    the controller starts it and the workers share it."""
    config = session.config
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        return
    whole_suite = config.args_source is pytest.Config.ArgsSource.TESTPATHS
    if whole_suite and not os.environ.get("ART_TEST_POSTGRES_URL") and _postgres_binaries_present():
        config.stash[EARLY_POSTGRES] = _ServerStart()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each pytest-xdist worker where the controller reports its server's start."""
    start = node.config.stash.get(EARLY_POSTGRES, None)
    if start is not None:
        node.workerinput[SHARED_POSTGRES] = str(start.report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the early server if no test asked for it (a -k or -x run), or once the
    pytest-xdist workers sharing it are done."""
    start = session.config.stash.get(EARLY_POSTGRES, None)
    if start is not None:
        del session.config.stash[EARLY_POSTGRES]
        start.close()


@contextmanager
def _server(config: pytest.Config) -> Iterator[str]:
    """The URL of the server's database; a server this process started is stopped after."""
    url = os.environ.get("ART_TEST_POSTGRES_URL")
    shared = getattr(config, "workerinput", {}).get(SHARED_POSTGRES)
    if url:
        yield url
        return
    if shared:  # the pytest-xdist controller's, which stops it
        yield _reported(Path(shared))["ART_TEST_POSTGRES_URL"]
        return
    start = config.stash.get(EARLY_POSTGRES, None)
    if start is not None:
        del config.stash[EARLY_POSTGRES]  # stopped here now
    elif not _postgres_binaries_present():
        _no_postgres("no ART_TEST_POSTGRES_URL and no PostgreSQL binaries (.ci/postgres.sh)")
    else:
        start = _ServerStart()
    try:
        yield start.exported()["ART_TEST_POSTGRES_URL"]
    finally:
        start.close()


@pytest.fixture(scope="session")
def postgres_server(pytestconfig: pytest.Config) -> Iterator[str]:
    """The URL of a PostgreSQL database for tests, one server for the whole session.

    It comes from `ART_TEST_POSTGRES_URL` if set; otherwise, when the server binaries are
    installed, the session starts its own with `.ci/postgres.sh` and stops it at the end
    (under pytest-xdist the controller starts one for all its workers). Each pytest-xdist
    worker gets a database of its own on the server. Without either, PostgreSQL tests skip,
    except under `CI`, where they fail.
    """
    with _server(pytestconfig) as url:
        if hasattr(pytestconfig, "workerinput"):
            with fresh_database(url) as own:
                yield own
        else:
            yield url


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


@pytest.fixture
def default_reset() -> Iterator[None]:
    """Start without art's default instance (`art.process`, `art.configure`, ...) and close
    and forget the one a test built: it is process-wide."""
    # private: art has no public way to forget its default instance; tests must not share one.
    from art.api import _reset_default_instance

    _reset_default_instance()
    yield
    _reset_default_instance()


@pytest.fixture(scope="session", autouse=True)
def _cli_commands_built_once() -> Iterator[None]:
    """typer's CliRunner builds the click command from the app's annotations on every invoke
    (30 ms); no test changes an app, so each app's command is built once per session."""
    typer_testing = sys.modules.get("typer.testing")
    if typer_testing is None:  # no collected test uses CliRunner
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        # private: typer's, not art's; it builds the command, the cost this fixture saves
        patch.setattr(typer_testing, "_get_command", functools.cache(typer_testing._get_command))
        yield


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
