"""Random tool outputs through whole runs: lone surrogates, huge strings, deep nesting,
values JSON cannot carry, and a tool that changes the output it was handed. Every run
returns, and what the response holds is what storage holds."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import art
from art.responses import StepRecord
from art.storage.opening import dump_json

HUGE = "x" * 200_000

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    # Every code point below the private-use area, lone surrogates included.
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0xDFFF), max_size=12)
    | st.just(HUGE)
    | st.builds(object)  # not JSON
    | st.sets(st.integers(), max_size=3)
    | st.binary(max_size=8)
)
outputs = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=16,
)


class Produce(art.IToolExecutor):
    """Returns the value the current example drew."""

    schema = art.ToolSchema(name="produce", description="Returns a drawn value.")

    def __init__(self) -> None:
        self.value: Any = None

    def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="produce", status="success", output=self.value
        )


class Mutate(art.IToolExecutor):
    """Changes what it is handed, in place, and returns it."""

    schema = art.ToolSchema(
        name="mutate",
        description="Changes its input.",
        input_schema={"type": "object", "properties": {"data": {}}},
    )

    async def execute(self, input, context):
        data = input.get("data")
        if isinstance(data, list):
            data.append("added")
            for item in data:
                if isinstance(item, dict):
                    item["touched"] = True
        elif isinstance(data, dict):
            data["touched"] = True
            for item in data.values():
                if isinstance(item, list):
                    item.clear()
        return art.ToolResult(
            call_id=context.call_id, tool_name="mutate", status="success", output=data
        )


PLAN = {
    "steps": [
        {"id": "s1", "tool": "produce"},
        {"id": "s2", "tool": "mutate", "args": {"data": "{{s1.output}}"}},
        {"id": "s3", "tool": "mutate", "args": {"data": "{{s1.output}}"}, "depends_on": ["s2"]},
    ]
}


def as_stored(record: StepRecord) -> Any:
    """A record as storage writes it (JSON, surrogates escaped, odd values as text)."""
    return json.loads(dump_json(record))


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_random_tool_outputs_end_every_run_and_storage_agrees(scripted_model, tmp_path, storage):
    model = scripted_model(planning=PLAN, synthesis="done")
    produce = Produce()
    url = f"sqlite:///{tmp_path / 'fuzz.db'}" if storage == "sqlite" else "memory://"
    threads = itertools.count()
    with art.create_art_instance(
        model=model.model,
        tools=[produce, Mutate()],
        storage=url,
        execution_config={"step_max_retries": 0},
    ) as inst:

        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(value=outputs)
        def one_run(value: Any) -> None:
            produce.value = value
            n = next(threads)
            resp = inst.process("go", f"fuzz-{n}")
            assert resp.status in ("success", "partial"), resp.metadata.error
            (run,) = inst.get_state(f"fuzz-{n}").runs
            stored = run.steps
            returned = {record.step_id: record for record in resp.steps}
            assert set(returned) == {"s1", "s2", "s3"}
            for step_id, record in returned.items():
                # An output JSON cannot carry fails its step (CONTRACT_VIOLATION, the
                # value kept as text); its dependents are skipped.
                assert record.status in ("completed", "failed", "skipped"), step_id
                assert as_stored(record) == as_stored(stored[step_id]), step_id
            if returned["s1"].status == "completed":
                # s2 and s3 each changed their own copy of s1's output: they agree.
                assert returned["s3"].status == "completed"
                assert (
                    as_stored(returned["s3"])["result"]["output"]
                    == as_stored(returned["s2"])["result"]["output"]
                )
            else:
                assert returned["s1"].result.error_code == "CONTRACT_VIOLATION"

        one_run()
