"""The inspector draws every step whatever its id: ids that are also names every
JavaScript object has (`constructor`, `__proto__`, `toString`) must not hide a step
from the person approving the plan. In a real headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

NAMES = ["constructor", "__proto__", "toString", "hasOwnProperty"]
PLAN = {
    "title": "Steps with awkward names",
    "steps": [
        {"id": "constructor", "tool": "calculator", "args": {"expression": "1 + 1"}},
        {
            "id": "__proto__",
            "tool": "calculator",
            "args": {"expression": "{{constructor.output}} * 2"},
        },
        {"id": "toString", "tool": "ask_human", "args": {"question": "Go on?"}},
        {
            "id": "hasOwnProperty",
            "tool": "calculator",
            "args": {"expression": "3"},
            "dependsOn": ["toString"],
        },
    ],
}


def test_steps_named_like_object_properties_are_all_drawn(
    make_server: Any,
    page: Any,
    tmp_path: Path,
) -> None:
    server = make_server(PLAN, synthesis="done")
    client = server.client()
    run = client.post("/threads/t-names/runs?wait=true", json={"query": "go"}).json()
    assert run["metadata"]["status"] == "suspended"

    page.goto(f"{server.url}/#/t/t-names")
    page.wait_for_selector("form.approval[data-step-id=toString]")
    page.wait_for_selector("g.node[data-step-id=__proto__][data-status=completed]")
    drawn = page.eval_on_selector_all(
        "g.node", "nodes => nodes.map(n => [n.dataset.stepId, n.dataset.status])"
    )
    page.screenshot(path=tmp_path / "awkward-names.png", full_page=True)
    assert sorted(drawn) == sorted(
        [
            ["constructor", "completed"],
            ["__proto__", "completed"],
            ["toString", "waiting"],
            ["hasOwnProperty", "pending"],
        ]
    )
