"""The synthesis prompt: outputs cut, failures explained, display kept out, window fitted."""

from __future__ import annotations

import art

# private: the prompt's step lines and the window's split of lengths, each checked alone
from art.engine.synthesis import (
    SynthesisInput,
    _step_text,
    _water_fill,
    fit_to_context,
    gather_sources,
    synthesis_messages,
)
from art.planning.plans import Plan
from art.responses import ConversationMessage, StepRecord


def done(step_id: str, output, tool: str = "search", **metadata) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        tool=tool,
        status="completed",
        attempts=1,
        result=art.ToolResult(
            call_id=step_id, tool_name=tool, status="success", output=output, metadata=metadata
        ),
    )


PLAN = Plan.model_validate(
    {
        "title": "Weather report",
        "steps": [
            {"id": "s1", "description": "look up Paris", "tool": "search"},
            {"id": "s2", "description": "look up Rome", "tool": "search"},
            {"id": "s3", "description": "chart both", "tool": "chart", "dependsOn": ["s1"]},
        ],
    }
)


def prompt_of(data: SynthesisInput) -> str:
    return synthesis_messages(data)[-1]["content"]


def test_the_prompt_holds_the_query_the_plan_and_every_output():
    data = SynthesisInput(
        query="weather in Paris and Rome?",
        plan=PLAN,
        records=[done("s1", {"temp": 21}), done("s2", "sunny, 25 C")],
    )
    text = prompt_of(data)
    assert "weather in Paris and Rome?" in text
    assert "Weather report" in text
    assert '[s1] look up Paris (tool search): completed. Output:\n{"temp": 21}' in text
    assert "sunny, 25 C" in text


def test_every_kind_of_step_is_written_as_the_general_step_text_writes_it():
    # Completed tool steps without metadata take a shorter path; it writes the same text.
    records = [
        done("s1", {"temp": 21}),
        done("s2", "x" * 500),  # cut by its limit below
        done("s9", 7),  # not in the plan: no description
        done("s3", "chart", tool="chart"),  # a display tool
        done("s4", "paid", tool="pay", decision="approved"),
        done("s5", "cited", sources=["https://example.com"]),
        done("s6", "thought").model_copy(update={"tool": None}),  # a reasoning step
        done("s7", None, tool="odd name "),
        StepRecord(step_id="s8", tool="search", status="failed", reason="HTTP 500"),
        StepRecord(step_id="s10", tool="search", status="waiting"),
    ]
    data = SynthesisInput(
        query="q",
        plan=PLAN,
        records=records,
        display_tools=frozenset({"chart"}),
        max_length=1000,
        limits={"s2": 100},
    )
    descriptions = {step.id: step.description for step in PLAN.steps}
    results = prompt_of(data).split("\n\nResults of the steps:\n\n")[1]
    expected = [_step_text(record, descriptions, data) for record in records]
    assert results.split("\n\n")[: len(records)] == expected
    assert expected[0] == '[s1] look up Paris (tool search): completed. Output:\n{"temp": 21}'
    assert expected[2] == "[s9]  (tool search): completed. Output:\n7"  # no description
    assert "truncated" in expected[1] and len(expected[1].split("\n")[1]) == 100


def test_each_output_is_cut_to_tool_result_max_length():
    data = SynthesisInput(query="q", records=[done("s1", "a" * 5000)], max_length=300)
    text = prompt_of(data)
    assert "a" * 300 not in text
    assert "truncated 4" in text  # the marker counts what was cut


def test_failures_skips_and_rejections_are_explained():
    failed = StepRecord(step_id="s1", tool="search", status="failed", reason="HTTP 500")
    skipped = StepRecord(
        step_id="s3", tool="chart", status="skipped", reason="skipped because step s1 failed"
    )
    rejected = StepRecord(
        step_id="s2",
        tool="pay",
        status="failed",
        reason="rejected by a human reviewer: too expensive",
        result=art.ToolResult(
            call_id="c",
            tool_name="pay",
            status="error",
            error="rejected",
            metadata={"rejected": True, "decision": "rejected"},
        ),
    )
    text = prompt_of(SynthesisInput(query="q", plan=PLAN, records=[failed, rejected, skipped]))
    assert "[s1] look up Paris (tool search): FAILED: HTTP 500" in text
    assert "REJECTED by a human reviewer" in text and "too expensive" in text
    assert "NOT RUN (skipped because step s1 failed)" in text


def test_display_outputs_stay_out_of_the_prompt():
    data = SynthesisInput(
        query="q",
        records=[done("s1", "SECRET-CHART-DATA", tool="chart")],
        display_tools=frozenset({"chart"}),
    )
    text = prompt_of(data)
    assert "SECRET-CHART-DATA" not in text
    assert "shown to the user" in text


def test_history_and_persona_are_part_of_the_messages():
    history = [
        ConversationMessage(thread_id="t", role="user", content="first question"),
        ConversationMessage(thread_id="t", role="assistant", content="first answer"),
    ]
    messages = synthesis_messages(
        SynthesisInput(query="follow-up", records=[], history=history, persona="Be terse.")
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"].endswith("Be terse.")
    assert messages[2]["content"] == "first answer"


def test_water_fill_cuts_only_the_largest_outputs_first():
    caps = _water_fill({"big": 10_000, "mid": 3_000, "small": 100}, 8_000)
    assert caps["small"] == 100
    assert caps["mid"] == 2_500 and caps["big"] == 2_500
    assert sum(10_000 + 3_000 + 100 - sum(caps.values()) for _ in [0]) >= 8_000


def test_fitting_cuts_the_largest_outputs_until_the_prompt_fits_the_window():
    def count(model, messages):  # one token per 4 characters
        return sum(len(m["content"]) for m in messages) // 4

    data = SynthesisInput(
        query="q",
        records=[done("s1", "x" * 40_000), done("s2", "y" * 2_000), done("s3", "small")],
    )
    messages = fit_to_context(data, "m", window=lambda model: 8_000, count=count)
    assert count("m", messages) <= 8_000 - 2_000  # the window minus the answer's reserve
    text = messages[-1]["content"]
    assert "x" * 20_000 not in text  # the largest was cut
    assert "y" * 2_000 in text and "small" in text  # the rest kept whole


def test_unknown_window_leaves_the_prompt_alone():
    data = SynthesisInput(query="q", records=[done("s1", "x" * 40_000)])
    messages = fit_to_context(data, "m", window=lambda model: None, count=lambda m, msgs: 10**9)
    assert "x" * 40_000 in messages[-1]["content"]


def test_sources_are_gathered_from_tool_metadata_without_duplicates():
    records = [
        done("s1", 1, sources=[{"source_name": "Wiki", "url": "https://w"}, "https://a"]),
        done("s2", 2, sources=[{"sourceName": "Wiki", "url": "https://w"}, {"title": "Doc"}]),
        StepRecord(step_id="s3", status="failed"),
    ]
    sources = gather_sources(records)
    assert [(s.source_name, s.url) for s in sources] == [
        ("Wiki", "https://w"),
        ("https://a", "https://a"),
        ("Doc", None),
    ]


TEXT = " ".join(f"word{i}" for i in range(6_000))  # ~40,000 characters


async def test_a_small_context_window_cuts_outputs_in_the_real_synthesis_call(scripted_model):
    class Big(art.IToolExecutor):
        schema = art.ToolSchema(name="big", description="returns a lot of text")

        async def execute(self, input, context):
            return art.ToolResult(
                call_id=context.call_id, tool_name="big", status="success", output=TEXT
            )

    plan = {"steps": [{"id": "s1", "tool": "big", "args": {}}]}
    model = scripted_model(planning=plan, synthesis="ok", context_window=4_000)
    inst = art.create_art_instance(model=model.model, tools=[Big()], storage="memory://")
    async with inst:
        response = await inst.aprocess("big one", "t")
    assert response.status == "success"
    prompt = model.calls_for("synthesis")[0].messages[-1]["content"]
    assert TEXT[:10_000] not in prompt
    assert "truncated" in prompt
