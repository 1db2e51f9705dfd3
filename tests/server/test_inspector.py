"""The inspector at `/`, in a real headless Chromium (Debian's, driven by Playwright): a
question asked through the page, the plan's DAG changing colour up to `completed`, a
blocking step approved with a reason and changed arguments, the answer and a display
table in the DOM. Each view is saved as a screenshot under the test's tmp_path."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from art.server import ServerSettings, create_app, serve_in_thread
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools import AskHuman

from .conftest import APPROVAL_PLAN

pytestmark = pytest.mark.slow

KEY = "inspector-key-0123456789"


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


def _ms(text: str) -> float:
    value, unit = text.split()
    return float(value) * (1000 if unit == "s" else 1)


def test_a_resumed_run_took_its_total_not_the_sum_of_its_parts(make_server: Any, page: Any) -> None:
    server = make_server(APPROVAL_PLAN)
    client = server.client()
    client.post("/threads/t-took/runs?wait=true", json={"query": "go"})
    [waiting] = client.get("/threads/t-took/suspensions").json()["suspensions"]
    decision = f"/threads/t-took/suspensions/{waiting['suspensionId']}/decision?wait=true"
    client.post(decision, json={"approved": True})
    [run] = client.get("/threads/t-took/runs").json()

    page.goto(f"{server.url}/#/t/t-took")
    page.wait_for_selector("#answer-text[data-complete=true]")
    page.wait_for_function(
        "() => document.querySelector('[data-fact=took] dd')?.textContent.includes('s')"
    )
    took = _ms(page.inner_text("[data-fact=took] dd"))

    assert abs(took - run["durationMs"]) <= max(2.0, run["durationMs"] * 0.02), (took, run)


def test_a_failed_question_stays_in_its_box_with_its_error_and_the_key_box_covers_nothing(
    make_server: Any, page: Any, page_errors: list[str]
) -> None:
    server = make_server(settings=ServerSettings(max_query_chars=20, poll_interval_s=0.1))
    page.goto(f"{server.url}/")
    page.wait_for_selector("main[data-view=home] #query")
    question = "a question far longer than this server takes"

    page.fill("#query", question)
    page.click("#ask")
    page.wait_for_selector("#notice:not([hidden])")
    page.wait_for_timeout(3000)  # background refreshes come and go meanwhile

    assert page.input_value("#query") == question  # kept, to be fixed and sent again
    assert "20" in page.inner_text("#notice") and page.is_visible("#notice")
    page_errors.clear()  # the refused request, rightly

    for width in (1400, 390):  # a desktop and a phone
        page.set_viewport_size({"width": width, "height": 900})
        page.evaluate("() => { const f = document.querySelector('#auth'); f.hidden = false; }")
        box, ask = page.locator("#auth").bounding_box(), page.locator("#ask").bounding_box()
        apart = (
            box["x"] + box["width"] <= ask["x"]
            or ask["x"] + ask["width"] <= box["x"]
            or box["y"] + box["height"] <= ask["y"]
            or ask["y"] + ask["height"] <= box["y"]
        )
        assert apart, (width, box, ask)


class LongNamedTool(IToolExecutor):
    schema = ToolSchema(
        name="fetch_the_quarterly_revenue_report_for_every_region_and_currency",
        description="A tool with a long name.",
        input_schema={"type": "object", "properties": {}},
    )

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        return ToolResult(
            call_id=context.call_id, tool_name=self.schema.name, status="success", output=1
        )


def test_long_tool_names_stay_inside_their_boxes(
    scripted_model: Any, page: Any, tmp_path: Path
) -> None:
    name = LongNamedTool.schema.name
    plan = {
        "steps": [
            {"id": "s1", "tool": name, "args": {}},
            {"id": "s2", "tool": "ask_human", "args": {"question": "ok?"}, "dependsOn": ["s1"]},
        ]
    }
    model = scripted_model(planning=plan, synthesis="done")
    app = create_app(
        model=model.model,
        tools=[LongNamedTool(), AskHuman()],
        storage="memory://",
        settings=ServerSettings(poll_interval_s=0.1),
    )
    with serve_in_thread(app) as url:
        httpx.post(f"{url}/threads/t-long/runs?wait=true", json={"query": "go"}, timeout=30)
        for width in (1400, 390):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(f"{url}/#/t/t-long")
            page.reload()  # a fresh page at each width
            page.wait_for_selector("form.approval[data-step-id=s2]")
            page.click("g.node[data-step-id=s1]")
            page.wait_for_selector("#step h2:has-text('Step s1')")
            page.screenshot(path=tmp_path / f"long-names-{width}.png", full_page=True)

            outside = page.evaluate(
                """() => {
                const found = [];
                for (const node of document.querySelectorAll('g.node')) {
                  const box = node.querySelector('rect').getBBox();
                  for (const text of node.querySelectorAll('text')) {
                    const t = text.getBBox();
                    if (t.x + t.width > box.x + box.width) found.push(text.textContent);
                  }
                }
                for (const el of document.querySelectorAll('main *')) {
                  const style = getComputedStyle(el);
                  if (el.closest('#dag') || style.overflowX === 'auto') continue;
                  if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0)
                    found.push(`${el.tagName}.${el.className}: ${el.textContent.slice(0, 60)}`);
                }
                return found;
              }"""
            )
            assert not outside, (width, outside)
            assert name in page.inner_text("#step")  # whole where there is room
        page.goto("about:blank")  # the page lets go of the server before it stops
