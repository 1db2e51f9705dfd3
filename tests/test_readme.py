"""The README's first commands are what a new user runs; .ci/run must run the same test command."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    head = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    blocks = head.split("```bash\n")[1:]
    return [block.split("\n```", 1)[0].strip() for block in blocks]


def test_readme_opens_with_the_install_and_run_commands():
    main_job, test_suite = _readme_commands()[:2]
    assert "pip install" in main_job and "examples/quickstart.py" in main_job
    assert "pip install" in test_suite and "pytest" in test_suite
    assert "-c constraints.txt" in main_job and "-c constraints.txt" in test_suite
    assert test_suite.endswith("python -m pytest --slow")  # the whole suite, slow tests too


def test_ci_runs_exactly_the_readme_test_command():
    test_suite = _readme_commands()[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_suite in ci_lines


def test_the_quickstart_page_installs_with_the_readmes_command():
    install = _readme_commands()[0].split(" && ")[0]
    page = (ROOT / "docs" / "quickstart.md").read_text()
    first_block = page.split("```bash\n", 1)[1].split("\n```", 1)[0]
    assert install in first_block.splitlines()


def test_the_readme_names_the_programs_the_suite_uses_and_what_happens_without_them():
    head = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text()
    for program, installed_by in (
        ("PostgreSQL", "postgres.sh"),
        ("npm", "mcp-servers.sh"),
        ("Chromium", "chromium"),
        ("valgrind", "valgrind"),
    ):
        assert program in head, program
        assert installed_by in ci, installed_by
    assert "skipped" in head and "CI=true" in head and "bash .ci/run" in head


def test_quickstart_exists():
    assert (ROOT / "examples" / "quickstart.py").is_file()


SUITE = """
import pytest

def test_quick():
    pass

@pytest.mark.slow
def test_subprocess():
    pass
"""


def _copy_suite_conftest(pytester: pytest.Pytester) -> None:
    """The suite's conftest.py and the module of ours it imports, in pytester's directory."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(postgres_databases=(ROOT / "tests" / "postgres_databases.py").read_text())


@pytest.mark.parametrize(
    ("args", "ran"),
    [
        ((), {"test_quick"}),
        (("--slow",), {"test_quick", "test_subprocess"}),
        (("-m", "slow"), {"test_subprocess"}),
        (("test_suite.py::test_subprocess",), {"test_subprocess"}),
    ],
)
def test_plain_pytest_leaves_out_slow_tests_and_slow_runs_them(
    pytester: pytest.Pytester, args: tuple[str, ...], ran: set[str]
) -> None:
    _copy_suite_conftest(pytester)
    pytester.makeini(
        "[pytest]\naddopts = --disable-plugin-autoload -p pytest_asyncio.plugin\n"
        "asyncio_default_fixture_loop_scope = function\nmarkers =\n    slow: slow"
    )
    pytester.makepyfile(test_suite=SUITE)
    passed, skipped, failed = pytester.inline_run("-p", "no:cacheprovider", *args).listoutcomes()
    assert {report.nodeid.split("::")[1] for report in passed} == ran
    assert not skipped and not failed


@pytest.mark.slow
@pytest.mark.parametrize(("args", "workers"), [((), True), (("--slow",), False)])
def test_a_plain_run_uses_two_workers_and_a_slow_run_one_process(
    pytester: pytest.Pytester, args: tuple[str, ...], workers: bool
) -> None:
    _copy_suite_conftest(pytester)
    pytester.makeini(
        "[pytest]\naddopts = --disable-plugin-autoload -p pytest_asyncio.plugin"
        " -p xdist -n auto --maxprocesses 2\n"
        "asyncio_default_fixture_loop_scope = function\nmarkers =\n    slow: slow"
    )
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=2 if args else 1)
    assert ("2 workers" in result.stdout.str()) is workers
