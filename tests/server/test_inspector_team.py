"""The inspector for a team, in Chromium: a user's key shows only their threads; search;
plan preview; cancel a run; fork a run from a step's panel; delete a thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from art.server import ServerSettings

from .conftest import GATE_PLAN, SUM_PLAN, PageErrors, Server

pytestmark = pytest.mark.slow

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"


def use_key(page: Any, server: Server, key: str) -> None:
    page.goto(f"{server.url}/")
    page.wait_for_selector("#auth:not([hidden])")
    page.fill("#api-key", key)
    page.click("#auth button")
    page.wait_for_selector("#auth", state="hidden")


def thread_ids(page: Any) -> list[str]:
    return page.eval_on_selector_all("#threads a", "links => links.map(a => a.dataset.threadId)")


def test_a_user_sees_their_threads_searches_previews_and_deletes(
    make_server: Any, page: Any, page_errors: PageErrors, tmp_path: Path
) -> None:
    # The browser logs the refusals this test causes: a key asked for, Bob's thread.
    page_errors.expect("status of 401", "status of 404")
    server = make_server(SUM_PLAN, settings=ServerSettings(user_keys={ALICE: "alice", BOB: "bob"}))
    for key, thread, metadata in (
        (ALICE, "alice-apollo", {"project": "apollo"}),
        (ALICE, "alice-gemini", {"project": "gemini"}),
        (BOB, "bob-secret", {"project": "apollo"}),
    ):
        client = server.client(Authorization=f"Bearer {key}")
        client.post("/threads", json={"threadId": thread, "metadata": metadata})
        client.post(f"/threads/{thread}/runs", params={"wait": "true"}, json={"query": thread})

    use_key(page, server, ALICE)
    page.wait_for_function("() => document.querySelectorAll('#threads a').length === 2")
    assert sorted(thread_ids(page)) == ["alice-apollo", "alice-gemini"]
    page.goto(f"{server.url}/#/t/bob-secret")
    page.wait_for_selector("#notice:not([hidden])")
    assert "no thread 'bob-secret'" in page.inner_text("#notice")

    page.fill("#search-text", "project=apollo")
    page.wait_for_function("() => document.querySelectorAll('#threads a').length === 1")
    assert thread_ids(page) == ["alice-apollo"]
    page.fill("#search-text", "gem")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#threads a')].map(a => a.dataset.threadId)"
        ".join() === 'alice-gemini'"
    )
    page.fill("#search-text", "")
    page.select_option("#search-status", "failed")
    page.wait_for_function("() => document.querySelectorAll('#threads a').length === 0")
    page.select_option("#search-status", "")
    page.screenshot(path=tmp_path / "1-search.png")

    planned = len(server.model.calls_for("planning"))
    page.goto(f"{server.url}/#/")
    page.fill("#query", "What is 17 * 23 + 12?")
    page.click("#preview-plan")
    page.wait_for_selector("#preview:not([hidden]) g.node[data-step-id=s2]")
    assert "s1 · calculator" in page.inner_text("#preview")
    assert len(server.model.calls_for("planning")) == planned + 1
    page.screenshot(path=tmp_path / "2-preview.png")

    page.goto(f"{server.url}/#/t/alice-gemini")
    page.wait_for_selector("#delete-thread")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-thread")
    page.wait_for_selector("main[data-view=home]")
    page.wait_for_function("() => document.querySelectorAll('#threads a').length === 1")
    admin_view = server.client(Authorization=f"Bearer {BOB}").get("/threads").json()
    assert [t["threadId"] for t in admin_view["threads"]] == ["bob-secret"]
    assert (
        server.client(Authorization=f"Bearer {ALICE}").get("/threads/alice-gemini").status_code
        == 404
    )


def test_cancel_a_run_and_fork_another_from_a_step(
    make_server: Any, page: Any, tmp_path: Path
) -> None:
    server = make_server(GATE_PLAN)
    page.goto(f"{server.url}/")
    page.wait_for_selector("main[data-view=home] #query")
    page.fill("#thread-id", "t-ops")
    page.fill("#query", "through the gate")
    page.click("#ask")
    page.wait_for_selector("g.node[data-step-id=s2][data-status=in_progress]")
    page.click("#cancel-run")
    page.wait_for_selector("#run-status:has-text('failed')")
    assert "CANCELLED" in page.inner_text("#run-head")
    page.screenshot(path=tmp_path / "1-cancelled.png")

    server.gate.opened.set()  # the fork's gate step passes at once
    page.click("g.node[data-step-id=s3]")
    page.wait_for_selector("form.fork[data-step-id=s3]")
    page.fill("form.fork textarea[name=fork-args]", '{"expression": "{{s1.output}} * 100"}')
    page.click("form.fork button#fork")
    page.wait_for_selector(".run-tab.current .fork-of")
    assert "fork of #1 at s3" in page.inner_text(".run-tab.current")
    page.wait_for_selector("#run-status:has-text('completed')")
    page.click("g.node[data-step-id=s3]")
    page.wait_for_selector("#step h2:has-text('Step s3')")
    assert "400" in page.inner_text("#step")  # (2 + 2) * 100
    runs = server.client().get("/threads/t-ops/runs").json()
    assert [r["status"] for r in runs] == ["failed", "completed"]
    assert runs[1]["forkedFrom"]["stepId"] == "s3"
    page.screenshot(path=tmp_path / "2-fork.png", full_page=True)
