"""OpenTelemetry metrics of queued runs (when the `otel` extra is installed).

Every worker reports, through the meter provider the application configured
(`opentelemetry.metrics.set_meter_provider`, or `opentelemetry-instrument`), with the
attribute `art.queue` naming the queue:

- `art.queue.runs.started` (counter): runs this worker started, taken over ones included;
- `art.queue.runs.ended` (counter): runs this worker ended, by `art.outcome`
  (`completed`, `partial`, `failed`, `suspended`, `abandoned`, `handed_back`, `error`);
- `art.queue.runs.taken_over` (counter): runs of dead workers it put back in the queue;
- `art.queue.run.duration` (histogram, s): a run's time on this worker;
- `art.queue.run.wait` (histogram, s): from submission to a worker starting the run;
- `art.queue.depth` (gauge): runs waiting for a worker;
- `art.queue.jobs` (gauge): runs by `art.storage.contract` (`todo`, `doing`, `succeeded`, ...);
- `art.queue.workers` (gauge): registered workers, by `art.stalled` (true: presumed dead).

The gauges come from the queue's tables, read at a heartbeat once a reader has collected
them (a worker nobody collects from never runs those queries); every worker reports the
same figures, so aggregate them with max or last value, not sum.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from art.core.version import __version__

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

    from art.queue.jobs import JobSpec, QueueStats

__all__ = ["QueueMetrics", "queue_metrics"]

# A worker reads the queue's figures only while a reader collected them this recently.
_WANTED_FOR_S = 300.0


def queue_metrics(queue: str, provider: MeterProvider | None = None) -> QueueMetrics | None:
    """The instruments for `queue`, or None when OpenTelemetry is not installed."""
    try:
        import opentelemetry.metrics  # noqa: F401
    except ImportError:
        return None
    return QueueMetrics(queue, provider)


class QueueMetrics:
    """A worker's instruments; its gauges report the last `observe`d figures."""

    def __init__(self, queue: str, provider: MeterProvider | None = None) -> None:
        from opentelemetry import metrics

        meter = (provider or metrics.get_meter_provider()).get_meter("art.queue", __version__)
        self.attributes = {"art.queue": queue}
        self._stats: QueueStats | None = None
        self._collected_at = float("-inf")
        self._started = meter.create_counter(
            "art.queue.runs.started", unit="{run}", description="runs a worker started"
        )
        self._ended = meter.create_counter(
            "art.queue.runs.ended", unit="{run}", description="runs a worker ended, by outcome"
        )
        self._taken_over = meter.create_counter(
            "art.queue.runs.taken_over",
            unit="{run}",
            description="runs of dead workers put back in the queue",
        )
        self._duration = meter.create_histogram(
            "art.queue.run.duration", unit="s", description="a run's time on its worker"
        )
        self._wait = meter.create_histogram(
            "art.queue.run.wait", unit="s", description="from submission to a worker starting"
        )
        meter.create_observable_gauge(
            "art.queue.depth", [self._depth], unit="{run}", description="runs waiting"
        )
        meter.create_observable_gauge(
            "art.queue.jobs", [self._jobs], unit="{run}", description="runs by job state"
        )
        meter.create_observable_gauge(
            "art.queue.workers", [self._workers], unit="{worker}", description="workers"
        )

    # -- what workers report ------------------------------------------------------
    def run_started(self, spec: JobSpec) -> None:
        self._started.add(1, self.attributes)
        if spec.submitted_at:
            submitted = datetime.fromisoformat(spec.submitted_at.replace("Z", "+00:00"))
            waited = (datetime.now(UTC) - submitted).total_seconds()
            self._wait.record(max(waited, 0.0), self.attributes)

    def run_ended(self, outcome: str, duration_s: float) -> None:
        attributes = {**self.attributes, "art.outcome": outcome}
        self._ended.add(1, attributes)
        self._duration.record(duration_s, attributes)

    def taken_over(self, runs: int) -> None:
        if runs:
            self._taken_over.add(runs, self.attributes)

    def wants_stats(self) -> bool:
        """A reader collected the gauges recently: keep their figures fresh."""
        return time.monotonic() - self._collected_at < _WANTED_FOR_S

    def observe(self, stats: QueueStats) -> None:
        self._stats = stats

    # -- the gauges' callbacks ----------------------------------------------------
    def _observations(self) -> QueueStats | None:
        self._collected_at = time.monotonic()
        return self._stats

    def _depth(self, options: CallbackOptions) -> Iterator[Observation]:
        from opentelemetry.metrics import Observation

        stats = self._observations()
        if stats is not None:
            yield Observation(stats.queued, self.attributes)

    def _jobs(self, options: CallbackOptions) -> Iterator[Observation]:
        from opentelemetry.metrics import Observation

        stats = self._observations()
        if stats is not None:
            for state, count in sorted(stats.jobs.items()):
                yield Observation(count, {**self.attributes, "art.storage.contract": state})

    def _workers(self, options: CallbackOptions) -> Iterator[Observation]:
        from opentelemetry.metrics import Observation

        stats = self._observations()
        if stats is not None:
            for stalled in (False, True):
                count = sum(1 for w in stats.workers if w.stalled is stalled)
                attributes: dict[str, Any] = {**self.attributes, "art.stalled": stalled}
                yield Observation(count, attributes)
