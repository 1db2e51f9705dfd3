"""Hostile clients at the server's doors: data storage could not read back, options that
would lift the operator's limits, and secrets in answers."""

from __future__ import annotations

import json
from typing import Any

from .conftest import APPROVAL_PLAN


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def test_a_decision_nested_too_deep_is_refused_and_the_thread_stays_readable(
    make_server: Any,
) -> None:
    server = make_server(APPROVAL_PLAN, storage="memory://")
    client = server.client()
    suspended = client.post("/threads/t-deep/runs?wait=true", json={"query": "go"}).json()
    sid = suspended["metadata"]["suspensionId"]
    path = f"/threads/t-deep/suspensions/{sid}/decision"
    body = json.dumps({"approved": True, "modifiedArgs": {"question": _nested(200)}})

    refused = client.post(path, content=body, headers={"content-type": "application/json"})

    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "INVALID_DECISION"
    assert "nested more than 100 levels" in refused.json()["detail"]
    thread = client.get("/threads/t-deep")
    assert thread.status_code == 200
    assert [s["suspensionId"] for s in thread.json()["suspensions"]] == [sid]
    done = client.post(path, params={"wait": "true"}, json={"approved": True}).json()
    assert done["metadata"]["status"] == "success"
    assert client.get("/threads/t-deep").status_code == 200
