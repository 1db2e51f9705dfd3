"""The inspector at `/`, in a real headless Chromium (Debian's, driven by Playwright): a
question asked through the page, the plan's DAG changing colour up to `completed`, a
blocking step approved with a reason and changed arguments, the answer and a display
table in the DOM. Each view is saved as a screenshot under the test's tmp_path."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from art.server import ServerSettings

from .conftest import APPROVAL_PLAN

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("ART_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEY = "inspector-key-0123456789"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        message = (
            f"Chromium not found at {CHROMIUM}: install the Debian package chromium "
            "(.ci/run does), or point ART_TEST_CHROMIUM at a Chromium binary"
        )
        if os.environ.get("CI"):
            pytest.fail(f"the inspector's browser tests need Chromium in CI. {message}")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page_errors() -> list[str]:
    """What the page reported as errors (a test may take out those it expects)."""
    return []


@pytest.fixture
def page(browser: Any, page_errors: list[str]) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    page.on("console", lambda m: page_errors.append(m.text) if m.type == "error" else None)
    page.set_default_timeout(20_000)
    yield page
    context.close()
    assert not page_errors, f"the page reported errors: {page_errors}"


def test_ask_watch_approve_and_read_the_answer_in_the_inspector(
    make_server: Any, page: Any, tmp_path: Path
) -> None:
    server = make_server(
        APPROVAL_PLAN, synthesis="17 x 23 = **391**; with the approved 12 added, **403**."
    )
    page.goto(f"{server.url}/")
    page.wait_for_selector("main[data-view=home] #query")
    page.screenshot(path=tmp_path / "1-home.png")

    page.fill("#thread-id", "t-browser")
    page.fill("#query", "What is 17 * 23, plus 12 if I approve?")
    page.click("#ask")

    # The run suspends at s3: the DAG shows what ran and what waits; the form appears.
    approval = page.wait_for_selector("form.approval[data-step-id=s3]")
    page.wait_for_selector("g.node[data-step-id=s1][data-status=completed]")
    page.wait_for_selector("g.node[data-step-id=s3][data-status=waiting]")
    assert page.get_attribute("g.node[data-step-id=s4]", "data-status") == "pending"
    assert "Add 12?" in approval.inner_text()
    assert page.inner_text("#run-status") == "suspended"
    table = page.inner_text("#display table")
    assert "17 x 23" in table and "391" in table  # the display step's table, already shown
    page.screenshot(path=tmp_path / "2-waiting-for-approval.png", full_page=True)

    page.click("g.node[data-step-id=s1]")
    details = page.wait_for_selector("#step h2:has-text('Step s1')")
    step = page.inner_text("#step")
    assert '"expression": "17 * 23"' in step and "391" in step  # arguments and output
    assert re.search(r"START.*\n.*END", step), step  # the tool call's stages
    assert details is not None
    page.screenshot(path=tmp_path / "3-step-details.png", full_page=True)

    page.fill("form.approval textarea[name=reason]", "12 is fine")
    page.fill("form.approval textarea[name=args]", '{"question": "Add 12, approved"}')
    page.click("form.approval button[data-action=approve]")

    page.wait_for_function(
        "() => [...document.querySelectorAll('g.node')].length === 4 && "
        "[...document.querySelectorAll('g.node')].every(n => n.dataset.status === 'completed')"
    )
    page.wait_for_selector("#answer-text[data-complete=true]")
    assert page.inner_text("#run-status") == "completed"
    assert page.inner_text("#answer-text") == "17 x 23 = 391; with the approved 12 added, 403."
    assert page.inner_text("#answer-text strong") == "391"  # rendered as markdown
    cells = page.eval_on_selector_all("#display table td", "tds => tds.map(td => td.textContent)")
    assert cells == ["17 x 23", "391"]
    assert page.query_selector("form.approval") is None
    cost = page.inner_text("[data-fact=cost] dd")
    assert cost.startswith("$") and float(cost[1:]) > 0
    page.click("g.node[data-step-id=s3]")
    page.wait_for_selector("#step h2:has-text('Step s3')")
    decided = page.inner_text("#step")
    assert "12 is fine" in decided and "Add 12, approved" in decided
    page.screenshot(path=tmp_path / "4-completed.png", full_page=True)

    # Stored exactly as the page said.
    [run] = server.client().get("/threads/t-browser/runs").json()
    assert run["status"] == "completed"
    assert run["steps"]["s3"]["result"]["output"]["modified_args"] == {
        "question": "Add 12, approved"
    }
    for name in ("1-home", "2-waiting-for-approval", "3-step-details", "4-completed"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


def test_the_inspector_answers_an_mcp_servers_question(
    scripted_model: Any, page: Any, tmp_path: Path
) -> None:
    """server-everything's elicitation suspends the run; the page shows the question and
    a box prefilled with the form's defaults, and the answer typed there reaches the server."""
    from mcp_fixtures import everything_server

    from art.server import create_app, serve_in_thread

    plan = {"steps": [{"id": "s1", "tool": "everything__trigger_elicitation_request"}]}
    model = scripted_model(planning=plan, synthesis="Thanks, Ada.")
    app = create_app(
        model=model.model,
        storage="memory://",
        mcp_servers={"everything": everything_server()},
        settings=ServerSettings(poll_interval_s=0.1),
    )
    with serve_in_thread(app) as url:
        page.goto(f"{url}/")
        page.fill("#thread-id", "t-elicit")
        page.fill("#query", "Ask me something")
        page.click("#ask")
        form = page.wait_for_selector("form.approval[data-step-id=s1]")
        text = form.inner_text()
        assert "Please provide inputs for the following fields:" in text
        assert "Answer (the form's fields, as JSON)" in text
        prefilled = page.input_value("form.approval textarea[name=args]")
        assert '"integer": 42' in prefilled  # the form's defaults
        page.screenshot(path=tmp_path / "elicitation.png", full_page=True)
        page.fill("form.approval textarea[name=args]", '{"name": "Ada", "integer": 7}')
        page.click("form.approval button[data-action=approve]")
        page.wait_for_selector("#answer-text[data-complete=true]")
        with httpx.Client(base_url=url) as client:
            [run] = client.get("/threads/t-elicit/runs").json()
        page.goto("about:blank")  # closes the page's event stream, so the server can stop
    assert run["status"] == "completed"
    output = run["steps"]["s1"]["result"]["output"]
    assert '"name": "Ada"' in output and '"integer": 7' in output


def test_a_server_with_keys_asks_the_page_for_one(
    make_server: Any, page: Any, page_errors: list[str], tmp_path: Path
) -> None:
    server = make_server(settings=ServerSettings(api_keys=[KEY], poll_interval_s=0.1))
    server.client(Authorization=f"Bearer {KEY}").post(
        "/threads/t-keyed/runs?wait=true", json={"query": "sum?"}
    )

    page.goto(f"{server.url}/")
    page.wait_for_selector("#auth:not([hidden])")
    page.screenshot(path=tmp_path / "5-key-needed.png")
    assert page_errors and all("401" in error for error in page_errors)  # refused, rightly
    page_errors.clear()
    page.fill("#api-key", KEY)
    page.click("#auth button")

    page.wait_for_selector("a[data-thread-id=t-keyed]").click()
    page.wait_for_selector("#answer-text[data-complete=true]")
    assert page.inner_text("#answer-text") == "The answer is 403."
    page.screenshot(path=tmp_path / "6-with-key.png", full_page=True)


def test_without_chromium_ci_fails_saying_what_to_install(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CI": "true", "ART_TEST_CHROMIUM": str(tmp_path / "no-chromium")}
    named = f"{Path(__file__).relative_to(root)}::test_a_server_with_keys_asks_the_page_for_one"

    done = subprocess.run(
        [sys.executable, "-m", "pytest", named, "-p", "no:cacheprovider", "-q"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1, done.stdout
    assert "the inspector's browser tests need Chromium in CI" in done.stdout
    assert "install the Debian package chromium (.ci/run does)" in done.stdout
