"""Figures, settings, timing helpers, the results table and the JSON report."""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

Comparison = Literal["<=", ">=", "=="]

T = TypeVar("T")

GROUPS = (
    "overhead", "parallel", "llm_cost", "throughput", "memory", "startup", "queue", "eager"
)  # fmt: skip


@dataclass
class Figure:
    """One measured figure: art's value, its target, and the same figure for a comparison."""

    group: str
    name: str
    workload: str
    unit: str
    art: float | None = None
    target: float | None = None
    op: Comparison = "<="
    other: float | None = None
    other_label: str | None = None
    samples: list[float] = field(default_factory=list)
    other_samples: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.group}:{self.workload}"

    @property
    def passed(self) -> bool | None:
        if self.art is None or self.target is None:
            return None
        if self.op == "<=":
            return self.art <= self.target
        if self.op == ">=":
            return self.art >= self.target
        return math.isclose(self.art, self.target)

    @property
    def ratio(self) -> float | None:
        """art's figure over the comparison's (below 1 means art is lower)."""
        if self.art is None or not self.other:
            return None
        return self.art / self.other

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(key=self.key, passed=self.passed, ratio=self.ratio)
        return data


@dataclass(frozen=True)
class Settings:
    """Sizes and timings for one run of the suite (`quick` shrinks everything)."""

    quick: bool = False
    repeats: int = 5
    # engine overhead
    overhead_steps: int = 1000
    # parallel efficiency
    parallel_depth: int = 4
    parallel_width: int = 50
    parallel_sleep_s: float = 0.050
    parallel_concurrency: int = 64
    parallel_llm_latency_s: float = 0.050
    # LLM calls and prompt tokens
    cost_plan_sizes: tuple[int, ...] = (1, 5, 20, 100)
    cost_output_chars: int = 400
    # throughput
    throughput_threads: int = 1000
    throughput_llm_latency_s: float = 0.050
    throughput_plan_width: int = 3
    # memory
    memory_steps: int = 10_000
    # start-up
    startup_repeats: int = 7
    # unmeasured runs back to back that count the full collections a workload sets off
    gc_probe_runs: int = 8
    # queued runs: `art worker` processes, runs per second and the take-over after a kill
    queue_backends: tuple[str, ...] = ("postgresql", "sqlite")
    queue_workers: tuple[int, ...] = (1, 2, 4)
    queue_runs: int = 400
    queue_concurrency: int = 16
    queue_llm_latency_s: float = 0.050
    queue_heartbeat_s: float = 2.0
    queue_stalled_after_s: float = 10.0
    queue_hold_s: float = 3.0
    # eager execution: the plan's writing rate (word-sized tokens a second), measured runs
    # per shape and mode, and a factor on every tool's sleep
    eager_tokens_per_s: tuple[float, ...] = (50.0,)
    eager_repeats: int = 3
    eager_time_scale: float = 1.0

    @classmethod
    def quick_settings(cls, repeats: int | None = None) -> Settings:
        return cls(
            quick=True,
            repeats=repeats or 1,
            overhead_steps=40,
            parallel_depth=2,
            parallel_width=5,
            parallel_sleep_s=0.010,
            parallel_concurrency=8,
            parallel_llm_latency_s=0.005,
            cost_plan_sizes=(1, 5),
            cost_output_chars=100,
            throughput_threads=20,
            throughput_llm_latency_s=0.005,
            memory_steps=200,
            startup_repeats=1,
            gc_probe_runs=2,
            queue_backends=("sqlite",),
            queue_workers=(1, 2),
            queue_runs=20,
            queue_concurrency=4,
            queue_llm_latency_s=0.005,
            queue_heartbeat_s=0.2,
            queue_stalled_after_s=1.0,
            queue_hold_s=1.0,
            eager_tokens_per_s=(400.0,),
            eager_repeats=1,
            eager_time_scale=0.1,
        )


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def in_rounds(items: Sequence[T], repeats: int) -> Iterator[tuple[bool, T, float]]:
    """Each of `items` once per round, for `repeats` measured rounds after a warm-up one:
    (warm-up?, item, seconds since the first round started, read just before its run).

    A figure's runs spread over the whole group this way: a slow spell of a shared
    machine, seconds to minutes long, lands on a few samples of every figure, which the
    median leaves out, instead of on all the samples of one figure."""
    started = time.perf_counter()
    for round_index in range(repeats + 1):
        for item in items:
            yield round_index == 0, item, time.perf_counter() - started


def collect_garbage() -> float:
    """Run a full garbage collection now; return its CPU time in seconds.

    Called before every measured run of either engine, so that no run pays for a full
    collection that earlier runs' garbage (the other engine's included) set off. A full
    collection walks every tracked object of the process (litellm's import leaves about
    400,000), so it costs the same whoever triggered it; the overhead figure reports how
    often the engine's own runs trigger one, and what that adds per step, beside it.
    """
    started = time.process_time()
    gc.collect()
    return time.process_time() - started


# -- machine and report -------------------------------------------------------------------


def calibrate(repeats: int = 5) -> float:
    """Milliseconds a fixed pure-Python workload takes on this machine now (the median of
    `repeats`). Timed at the start and the end of a run, it tells a slow hour from a slow
    engine when two runs are compared: on a shared VM it varied by 40 % within an hour."""
    samples = []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        _calibration_workload()
        samples.append((time.perf_counter() - started) * 1000)
    return median(samples)


def _calibration_workload() -> int:
    # What an engine step does most: small dicts and strings, calls, attribute reads.
    total = 0
    for n in range(50_000):
        record = {"id": f"s{n}", "n": n, "status": "completed"}
        total += _calibration_step(record) + len(record["id"])
    return total


def _calibration_step(record: dict[str, Any]) -> int:
    return record["n"] * 2 if record.get("status") == "completed" else 0


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gb": memory_gb,
    }


def write_json(path: Path, figures: list[Figure], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        **meta,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "figures": [f.to_json() for f in figures],
    }
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if value == 0:
        text = "0"
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def fmt_target(figure: Figure) -> str:
    if figure.target is None:
        return "report"
    op = "=" if figure.op == "==" else figure.op
    return f"{op} {fmt(figure.target, figure.unit)}"


def fmt_pass(figure: Figure) -> str:
    if figure.error:
        return "ERROR"
    passed = figure.passed
    return "-" if passed is None else ("pass" if passed else "FAIL")


def table_rows(figures: list[Figure]) -> list[list[str]]:
    rows = []
    for f in figures:
        other = fmt(f.other, f.unit) if f.other is not None else (f.note or "-")
        label = f.other_label or ""
        ratio = f"{f.ratio:.2f}" if f.ratio is not None else "-"
        art_value = fmt(f.art, f.unit) if not f.error else f"error: {f.error[:60]}"
        rows.append(
            [f.name, f.workload, art_value, fmt_target(f), fmt_pass(f), label, other, ratio]
        )
    return rows


HEADERS = ["figure", "workload", "art", "target", "pass", "vs", "LangGraph / baseline", "ratio"]


def print_table(figures: list[Figure], title: str) -> None:
    rows = table_rows(figures)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is a dependency of art, but keep the plain fallback honest
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
        print(title)
        print("  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)))
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        return
    table = Table(title=title)
    for header in HEADERS:
        justify = "left" if header in ("figure", "workload", "vs") else "right"
        table.add_column(header, justify=justify)
    for row in rows:
        style = {"FAIL": "red", "ERROR": "red", "pass": "green"}.get(row[4])
        table.add_row(*row, style=style)
    Console(file=sys.stdout, width=160).print(table)
