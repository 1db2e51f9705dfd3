"""art over HTTP: start a run, follow its events live, approve a step, read the result.

    python examples/http_api.py

It serves an agent on a free loopback port in this process (what `art serve` does in its
own), then talks to it as any client would: `POST /threads/{id}/runs` starts a run (202),
`GET .../events` streams its events as server-sent events, a blocking step is approved
with `POST .../suspensions/{id}/decision`, and `GET .../runs/{id}` reads the run with its
steps and display outputs. The scripted test model plays the LLM. Open the printed URL
while it runs (add `--keep` to keep serving) to see the same run in the inspector.
"""

from __future__ import annotations

import json
import sys

import httpx

from art.server import ServerSettings, create_app, serve_in_thread
from art.testing import ScriptedModel
from art.tools import AskHuman, Calculator, Show

PLAN = {
    "title": "Price a refund, show it, ask before paying",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "3 * 40"}},
        {
            "id": "s2",
            "tool": "show",
            "args": {
                "title": "Refund",
                "table": {"columns": ["item", "amount"], "rows": [["3 x $40", "{{s1.output}}"]]},
            },
        },
        {
            "id": "s3",
            "tool": "ask_human",
            "args": {"question": "Pay the refund of ${{s1.output}}?"},
            "dependsOn": ["s1"],
        },
    ],
}


def events(client: httpx.Client, path: str) -> object:
    """The (name, data) of each server-sent event at `path`, as they come."""
    with client.stream("GET", path) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                yield event["name"], event["data"]


def main() -> None:
    with ScriptedModel(planning=PLAN, synthesis="The $120 refund was approved and paid.") as model:
        app = create_app(
            model=model.model,
            tools=[Calculator(), Show(), AskHuman()],
            storage="memory://",
            settings=ServerSettings(poll_interval_s=0.1),
        )
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            print(f"serving on {url}/ (the inspector is there)")
            run = client.post("/threads/refund-1234/runs", json={"query": "Refund order 1234"})
            print(f"POST /threads/refund-1234/runs -> {run.status_code}, run {run.json()['runId']}")
            run_id = run.json()["runId"]

            for name, data in events(client, f"/threads/refund-1234/runs/{run_id}/events"):
                detail = data.get("stage") or data.get("status") or ""
                print(f"  event {name} {data.get('step_id', '')} {detail}".rstrip())
                if name == "suspended":
                    suspension = data["steps"][0]
                    print(f"  -> {suspension['prompt']['question']} approving")
                    client.post(
                        f"/threads/refund-1234/suspensions/{suspension['suspension_id']}/decision",
                        json={"approved": True, "reason": "within policy"},
                    )
            # The stream ended with the run: read it back.
            done = client.get(f"/threads/refund-1234/runs/{run_id}").json()
            print(f"status: {done['status']}; answer: {done['answer']}")
            print(f"display: {done['display'][0]['output']['rows']}")
            print(f"usage: {done['usage']['totalTokens']} tokens in {done['llmCalls']} LLM calls")
            if "--keep" in sys.argv:
                input("serving; press Enter to stop ")
    print("for a real server: art serve --model openai/gpt-4o-mini --storage sqlite:///art.db")


if __name__ == "__main__":
    main()
