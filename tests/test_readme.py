"""The README's first commands are what a new user runs; .ci/run must run the same test command."""

from pathlib import Path

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


def test_ci_runs_exactly_the_readme_test_command():
    test_suite = _readme_commands()[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_suite in ci_lines


def test_quickstart_exists():
    assert (ROOT / "examples" / "quickstart.py").is_file()
