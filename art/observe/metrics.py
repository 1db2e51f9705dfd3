"""OpenTelemetry metrics of an instance's runs (optional extra `art-pes[otel]`).

`enable_metrics` subscribes to an instance's events and reports, through the meter
provider given or the global one (`opentelemetry.metrics.set_meter_provider`):

- `art.runs` (counter): runs (each `process` or resume) that ended, by `art.status`
  (`success`, `partial`, `suspended`, `error`) and `art.error_code`;
- `art.run.duration` (histogram, s): a run's time, by `art.status`;
- `art.llm.calls` (counter): LLM calls answered, by `art.phase` and `art.model`;
- `art.llm.duration` (histogram, s): an LLM call's time (retries included), likewise;
- `art.llm.tokens` (counter): tokens, by `art.phase`, `art.model` and `art.token.type`
  (`prompt`, `completion`);
- `art.llm.cost` (counter, USD): litellm's cost of the calls, where it knows the price;
- `art.tool.calls` (counter): tool calls that ended, by `art.tool` and `art.status`
  (`success`, `error`, `suspended`);
- `art.tool.duration` (histogram, s): a tool call's time, likewise;
- `art.errors` (counter): `error` events, by `art.source` and `art.error_code`.

The same style as the queue's metrics (`art.queue.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from art.core.version import __version__
from art.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from art.observe.events import Event
    from art.observe.tracing import Traceable

__all__ = ["MetricsSubscription", "RunMetrics", "enable_metrics"]

INSTALL_HINT = "pip install 'art-pes[otel]'"


def enable_metrics(
    instance: Traceable, meter_provider: MeterProvider | None = None
) -> MetricsSubscription:
    """Report the instance's runs, LLM calls, tokens, cost and tool calls as OpenTelemetry
    metrics; returns a handle to stop. Raises ConfigurationError when OpenTelemetry is
    not installed."""
    try:
        import opentelemetry.metrics  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            f"metrics need OpenTelemetry, which is not installed: {INSTALL_HINT}"
        ) from exc
    metrics = RunMetrics(meter_provider)
    return MetricsSubscription(instance.events.subscribe(metrics.handle))


class MetricsSubscription:
    """What `enable_metrics` returns: `disable()` stops reporting."""

    def __init__(self, unsubscribe: Callable[[], None]) -> None:
        self._unsubscribe = unsubscribe

    def disable(self) -> None:
        self._unsubscribe()


class RunMetrics:
    """The instruments, fed one event at a time (`handle`)."""

    def __init__(self, provider: MeterProvider | None = None) -> None:
        from opentelemetry import metrics

        meter = (provider or metrics.get_meter_provider()).get_meter("art", __version__)
        self._runs = meter.create_counter("art.runs", unit="{run}", description="runs ended")
        self._run_duration = meter.create_histogram(
            "art.run.duration", unit="s", description="a run's time"
        )
        self._llm_calls = meter.create_counter(
            "art.llm.calls", unit="{call}", description="LLM calls answered"
        )
        self._llm_duration = meter.create_histogram(
            "art.llm.duration", unit="s", description="an LLM call's time, retries included"
        )
        self._tokens = meter.create_counter(
            "art.llm.tokens", unit="{token}", description="tokens sent and received"
        )
        self._cost = meter.create_counter(
            "art.llm.cost", unit="USD", description="the LLM calls' cost, where known"
        )
        self._tool_calls = meter.create_counter(
            "art.tool.calls", unit="{call}", description="tool calls ended"
        )
        self._tool_duration = meter.create_histogram(
            "art.tool.duration", unit="s", description="a tool call's time"
        )
        self._errors = meter.create_counter(
            "art.errors", unit="{error}", description="failures reported (error events)"
        )
        self._handlers: dict[str, Callable[[dict[str, object]], None]] = {
            "session:end": self._run_ended,
            "message:after": self._llm_answered,
            "tool:after": self._tool_ended,
            "error": self._error,
        }

    def handle(self, event: Event) -> None:
        handler = self._handlers.get(event.name)
        if handler is not None:
            handler(event.data)

    def _run_ended(self, data: dict[str, object]) -> None:
        error = _mapping(data.get("error"))
        status = str(data.get("status"))
        attributes = {"art.status": status, "art.error_code": str(error.get("code") or "")}
        self._runs.add(1, attributes)
        duration_ms = _number(data.get("duration_ms"))
        if duration_ms is not None:
            self._run_duration.record(duration_ms / 1000.0, {"art.status": status})

    def _llm_answered(self, data: dict[str, object]) -> None:
        attributes = {"art.phase": str(data.get("phase")), "art.model": str(data.get("model"))}
        self._llm_calls.add(1, attributes)
        if (duration_ms := _number(data.get("duration_ms"))) is not None:
            self._llm_duration.record(duration_ms / 1000.0, attributes)
        usage = _mapping(data.get("usage"))
        for kind in ("prompt", "completion"):
            if tokens := _number(usage.get(f"{kind}_tokens")):
                self._tokens.add(tokens, {**attributes, "art.token.type": kind})
        if cost := _number(data.get("cost")):
            self._cost.add(cost, attributes)

    def _tool_ended(self, data: dict[str, object]) -> None:
        result = data.get("result")
        status = str(getattr(result, "status", None) or "error")
        attributes = {"art.tool": str(data.get("tool")), "art.status": status}
        self._tool_calls.add(1, attributes)
        if (duration_ms := _number(data.get("duration_ms"))) is not None:
            self._tool_duration.record(duration_ms / 1000.0, attributes)

    def _error(self, data: dict[str, object]) -> None:
        attributes = {
            "art.source": str(data.get("source")),
            "art.error_code": str(data.get("code") or ""),
        }
        self._errors.add(1, attributes)


def _mapping(value: object) -> Mapping[str, object]:
    """An event's nested record (its error, its usage), or an empty one when absent."""
    return value if isinstance(value, Mapping) else {}


def _number(value: object) -> int | float | None:
    """An event's count, duration or cost; None when absent."""
    return value if isinstance(value, int | float) else None
