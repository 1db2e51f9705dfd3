"""Every ```python block in docs/*.md and README.md runs, in order, one namespace per page.

A block opts out only with `# docs: no-run: <reason>` on its first line (for real
provider calls and the like). A failure names the page, the block number and its line.
Blocks are plain scripts: no top-level `await` (a reader pastes them into a file).
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
NO_RUN = re.compile(r"^#\s*docs:\s*no-run\b[:\s-]*(?P<reason>.*)$")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")


@dataclass
class Block:
    number: int  # 1-based among the page's python blocks
    line: int  # line of the opening fence
    code: str

    @property
    def no_run_reason(self) -> str | None:
        first = self.code.lstrip("\n").splitlines()[0] if self.code.strip() else ""
        match = NO_RUN.match(first.strip())
        return match.group("reason").strip() if match else None


def python_blocks(text: str) -> list[Block]:
    """The page's fenced blocks whose info string is `python` (or `py`), in order."""
    blocks: list[Block] = []
    fence: str | None = None
    indent = 0
    language = ""
    body: list[str] = []
    opened_at = 0
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence, indent = match.group("fence"), len(match.group("indent"))
                language = (match.group("info").split() or [""])[0].lower()
                body, opened_at = [], number
            continue
        closes = (
            match is not None
            and match.group("fence")[0] == fence[0]
            and len(match.group("fence")) >= len(fence)
            and not match.group("info").strip()
        )
        if closes:
            if language in ("python", "py"):
                blocks.append(Block(len(blocks) + 1, opened_at, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line[indent:] if line[:indent].strip() == "" else line)
    return blocks


def test_block_parser_keeps_order_and_markers():
    page = (
        "text\n```python\nx = 1\n```\n\n```bash\nls\n```\n"
        "```python\n# docs: no-run: calls a hosted provider\ny = 2\n```\n"
    )
    blocks = python_blocks(page)
    assert [b.code for b in blocks] == [
        "x = 1\n",
        "# docs: no-run: calls a hosted provider\ny = 2\n",
    ]
    assert [b.number for b in blocks] == [1, 2]
    assert blocks[0].no_run_reason is None
    assert blocks[1].no_run_reason == "calls a hosted provider"


@pytest.fixture
def page_sandbox(tmp_path, monkeypatch):
    """Run a page in a scratch directory, with offline defaults, restoring global state."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ART_STORAGE", "memory://")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.delenv("ART_MODEL", raising=False)
    monkeypatch.delenv("ART_LOG_JSON", raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield tmp_path
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    api = sys.modules.get("art.api")
    reset = getattr(api, "_reset_default_instance", None)
    if reset is not None:
        reset()


def _run_block(block: Block, namespace: dict, page: str) -> None:
    try:
        exec(compile(block.code, f"{page}#block{block.number}", "exec"), namespace)
    except Exception as exc:
        detail = "".join(traceback.format_exception(exc)[-12:])
        pytest.fail(
            f"{page}: python block {block.number} (line {block.line}) failed:\n"
            f"{block.code}\n{detail}",
            pytrace=False,
        )


# Pages whose blocks start servers (MCP processes, uvicorn) or wait out real retries and
# timeouts (a second or more each): `pytest --slow` runs them.
SLOW_PAGES = {"docs/mcp.md", "docs/providers.md", "docs/server.md", "docs/testing.md"}
PAGE_PARAMS = [
    pytest.param(
        path,
        id=path.relative_to(ROOT).as_posix(),
        marks=[pytest.mark.slow] if path.relative_to(ROOT).as_posix() in SLOW_PAGES else [],
    )
    for path in PAGES
]


def test_the_slow_pages_exist():
    assert {path.relative_to(ROOT).as_posix() for path in PAGES} >= SLOW_PAGES


@pytest.mark.parametrize("path", PAGE_PARAMS)
def test_page_code_blocks_run(path: Path, page_sandbox):
    page = path.relative_to(ROOT).as_posix()
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    ran = 0
    for block in blocks:
        reason = block.no_run_reason
        if reason is not None:
            assert reason, f"{page}: block {block.number} opts out of running without a reason"
            continue
        _run_block(block, namespace, page)
        ran += 1
    if blocks and ran == 0:
        pytest.fail(f"{page}: every python block is marked no-run")


TEST_MODULE_BLOCKS = [
    pytest.param(path, block, id=f"{path.relative_to(ROOT).as_posix()}#block{block.number}")
    for path in PAGES
    for block in python_blocks(path.read_text(encoding="utf-8"))
    if re.search(r"^def test_", block.code, re.MULTILINE) and block.no_run_reason is None
]


@pytest.mark.slow  # a pytest run per block
@pytest.mark.parametrize(("path", "block"), TEST_MODULE_BLOCKS)
def test_a_test_module_block_passes_pasted_into_a_file_of_its_own(
    path, block, pytester, monkeypatch
):
    pytester.makepyfile(test_pasted=block.code)
    plugins = ("-p", "no:cacheprovider", "-p", "syrupy", "-p", "art.testing.plugin")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_inprocess(*plugins, "--snapshot-update")
    tests = len(re.findall(r"^def test_", block.code, re.MULTILINE))
    result.assert_outcomes(passed=tests)


def test_no_run_markers_are_rare():
    """Opting out is for real provider calls and the like, not for broken examples."""
    total = skipped = 0
    for path in PAGES:
        for block in python_blocks(path.read_text(encoding="utf-8")):
            total += 1
            skipped += block.no_run_reason is not None
    assert total > 0
    assert skipped <= max(3, total // 10), f"{skipped} of {total} blocks are marked no-run"


def test_every_docs_page_is_linked_from_the_index():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    missing = [
        p.name
        for p in sorted((ROOT / "docs").glob("*.md"))
        if p.name != "index.md" and f"({p.name})" not in index
    ]
    assert not missing, f"docs/index.md does not link: {missing}"


def test_relative_links_between_pages_resolve():
    broken = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_performance_page_is_a_reference_whose_results_name_command_and_commit():
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert len(text.encode()) < 20_000  # how to run, what each figure means, results, limits
    sections = {part.split("\n", 1)[0]: part for part in text.split("\n## ")[1:]}
    assert {"Running it", "Results", "Known limits"} <= set(sections)
    named = re.compile(r"`python -m benchmarks[^`]*`\s+at commit [0-9a-f]{7,40}\b")
    for title in ("Results", "Queued runs", "Eager execution"):
        assert named.search(sections[title]), title


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.name)
def test_no_page_has_a_top_level_await(page: Path) -> None:
    """Blocks are pasted into scripts and test files, where a top-level `await` is a
    SyntaxError."""
    for block in python_blocks(page.read_text(encoding="utf-8")):
        compile(block.code, f"{page.name} block {block.number} (line {block.line})", "exec")
