"""OpenTelemetry metrics of an instance's runs: runs, LLM calls, tokens, cost, tool calls
and their durations, read back through the SDK's in-memory reader."""

from __future__ import annotations

from typing import Any

import pytest

import art
from art.observe.metrics import enable_metrics
from art.tools import Calculator

pytest.importorskip("opentelemetry.sdk.metrics")

PLAN = {
    "title": "Sums",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "6*7"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "1/0"}},
    ],
}


def points(reader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def by(found: dict[str, list[Any]], name: str, key: str) -> dict[str, Any]:
    """The metric's data points summed by one attribute's value (a counter's value, a
    histogram's count)."""
    summed: dict[str, Any] = {}
    for point in found[name]:
        value = point.value if hasattr(point, "value") else point.count
        summed[point.attributes[key]] = summed.get(point.attributes[key], 0) + value
    return summed


async def test_runs_llm_calls_tokens_cost_and_tool_calls_are_metrics(scripted_model):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    model = scripted_model(planning=PLAN, synthesis="42", cost_per_token=(1e-6, 2e-6))
    async with art.create_art_instance(
        model=model.model, tools=[Calculator()], storage="memory://"
    ) as inst:
        subscription = enable_metrics(inst, MeterProvider(metric_readers=[reader]))
        first = await inst.aprocess("sums", "t1")
        second = await inst.aprocess("sums", "t2")
        subscription.disable()
        await inst.aprocess("sums", "t3")  # not counted
    assert first.status == second.status == "partial"
    found = points(reader)
    assert by(found, "art.runs", "art.status") == {"partial": 2}
    assert by(found, "art.run.duration", "art.status") == {"partial": 2}
    assert by(found, "art.llm.calls", "art.phase") == {"planning": 2, "synthesis": 2}
    assert by(found, "art.llm.duration", "art.phase") == {"planning": 2, "synthesis": 2}
    usage = first.metadata.usage
    tokens = by(found, "art.llm.tokens", "art.token.type")
    assert tokens == {
        "prompt": 2 * usage.prompt_tokens,
        "completion": 2 * usage.completion_tokens,
    }
    total = sum(p.value for p in found["art.llm.cost"])
    assert total == pytest.approx(first.metadata.llm_cost + second.metadata.llm_cost)
    assert by(found, "art.tool.calls", "art.status") == {"success": 2, "error": 2}
    assert by(found, "art.tool.duration", "art.status") == {"success": 2, "error": 2}
    assert by(found, "art.errors", "art.source") == {"tool": 2}


def test_metrics_without_opentelemetry_say_how_to_install_it(monkeypatch, scripted_model):
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
    model = scripted_model()
    with (
        art.create_art_instance(model=model.model, storage="memory://") as inst,
        pytest.raises(art.errors.ConfigurationError, match=r"art-pes\[otel\]"),
    ):
        enable_metrics(inst)
