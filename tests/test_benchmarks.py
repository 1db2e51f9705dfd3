"""Smoke test of the benchmark suite: `python -m benchmarks --quick` runs and reports every
figure. Timings are not asserted here (they belong to docs/performance.md), only that
each figure was measured and the engine's counts are right."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # about 30 s on an idle 2-core machine
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "engine overhead per step" in done.stdout  # the table was printed
    return json.loads(out.read_text())


def by_group(report: dict) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for figure in report["figures"]:
        groups.setdefault(figure["group"], []).append(figure)
    return groups


@pytest.mark.slow
def test_every_figure_is_measured_without_error(report: dict) -> None:
    groups = by_group(report)
    assert set(groups) == {
        "overhead",
        "parallel",
        "llm_cost",
        "throughput",
        "memory",
        "startup",
        "queue",
        "eager",
    }
    for figure in report["figures"]:
        assert figure["error"] is None, figure
        assert isinstance(figure["art"], int | float), figure
        assert figure["art"] >= 0, figure


@pytest.mark.slow
def test_overhead_covers_three_shapes_in_memory_and_sqlite(report: dict) -> None:
    workloads = {f["workload"] for f in by_group(report)["overhead"]}
    shapes = Counter(w.split("-")[0] for w in workloads)
    assert shapes == {"chain": 2, "fan": 2, "random": 2}
    assert {w.rsplit(" / ", 1)[1] for w in workloads} == {"memory", "sqlite"}
    for figure in by_group(report)["overhead"]:
        assert figure["unit"] == "µs/step"
        assert figure["target"] == (100.0 if figure["workload"].endswith("memory") else 300.0)


@pytest.mark.slow
def test_overhead_reports_what_full_collections_add_beside_the_figure(report: dict) -> None:
    # Measured runs start after a full collection; how often the engine's own garbage
    # sets one off, and what one costs, are reported beside the figure.
    for figure in by_group(report)["overhead"]:
        details = figure["details"]
        assert details["full_collections_per_run"] >= 0
        assert details["full_collection_ms_median"] > 0
        amortized = details["full_collections_per_run"] * details["full_collection_ms_median"]
        assert details["full_collection_us_per_step_amortized"] == pytest.approx(
            amortized / details["steps"] * 1000
        )


@pytest.mark.slow
@pytest.mark.parametrize("group", ["overhead", "parallel"])
def test_the_figures_of_a_group_are_sampled_in_rounds(report: dict, group: str) -> None:
    # One run of every figure per round: a slow spell of the machine lands on a few
    # samples of each figure (the median leaves them out), not on all of one figure's.
    figures = by_group(report)[group]
    times = [figure["details"]["sampled_at_s"] for figure in figures]
    assert all(len(samples) == len(figures[0]["samples"]) for samples in times)
    for round_index in range(len(times[0]) - 1):
        this_round = [samples[round_index] for samples in times]
        next_round = [samples[round_index + 1] for samples in times]
        assert this_round == sorted(this_round)  # figures in a fixed order within a round
        assert max(this_round) < min(next_round)  # every figure once before the next round


@pytest.mark.slow
def test_parallel_figures_report_the_same_layers_without_the_engine(report: dict) -> None:
    # The floor: the layers gathered with bare asyncio. Each layer waits at least its
    # sleep, so the floor is never below the critical path.
    for figure in by_group(report)["parallel"]:
        floor = figure["details"]["bare_asyncio_ratio"]
        assert floor >= 0.99, figure


def test_the_llm_calls_are_timed_and_left_out_of_the_overhead() -> None:
    import asyncio

    from art.testing import ScriptedModel
    from benchmarks import art_side
    from benchmarks.workloads import chain, make_step_fn, plan_for

    original = ScriptedModel.request

    async def one_run() -> art_side.RunMeasure:
        bench = art_side.create_instance(
            plan_for(chain(3)), [art_side.step_tool(make_step_fn(0))], llm_latency_s=0.01
        )
        clock = art_side.LlmClock()
        try:
            with clock.installed():
                return await art_side.run_once(bench, clock, expected_steps=3)
        finally:
            await bench.close()

    measure = asyncio.run(one_run())

    # The planning and synthesis calls each wait the scripted latency: LLM time, not the
    # engine's. The scripted model has no litellm logging to leave out.
    assert measure.llm_s >= 0.02
    assert measure.llm_logging_s == 0
    assert measure.overhead_s() == pytest.approx(measure.wall_s - measure.llm_s)
    assert ScriptedModel.request is original  # the clock put the model back


@pytest.mark.slow
def test_langgraph_column_is_filled_or_explained(report: dict) -> None:
    dag_figures = by_group(report)["overhead"] + by_group(report)["parallel"]
    for figure in dag_figures:
        if report["langgraph_version"]:
            assert figure["other"] > 0 and figure["ratio"] > 0, figure
        else:
            assert figure["other"] is None and figure["note"] == "langgraph not installed"


@pytest.mark.slow
def test_a_tool_only_plan_costs_two_llm_calls_and_fewer_tokens_than_the_baseline(
    report: dict,
) -> None:
    cost = by_group(report)["llm_cost"]
    calls = [f for f in cost if f["name"] == "LLM calls per query"]
    tokens = {f["workload"]: f for f in cost if f["name"] == "prompt tokens per query"}
    assert {f["workload"] for f in calls} == {"1 tool step", "5 tool steps"}
    for figure in calls:
        assert figure["art"] == 2 and figure["passed"] is True
        steps = int(figure["workload"].split()[0])
        assert figure["other"] == steps + 2  # planning, one call per item, synthesis
    assert tokens["5 tool steps"]["art"] < tokens["5 tool steps"]["other"]


@pytest.mark.slow
def test_throughput_memory_and_startup_report_their_numbers(report: dict) -> None:
    groups = by_group(report)
    throughput = {f["name"]: f for f in groups["throughput"]}
    assert set(throughput) == {"throughput", "latency p50", "latency p99", "errors"}
    assert throughput["errors"]["art"] == 0
    assert throughput["latency p50"]["art"] <= throughput["latency p99"]["art"]
    assert groups["memory"][0]["details"]["art"]["peak_kb"] > 0
    assert {f["workload"] for f in groups["startup"]} == {"import art", "art --help"}


@pytest.mark.slow
def test_queue_reports_runs_per_second_by_workers_and_the_take_over_time(report: dict) -> None:
    figures = by_group(report)["queue"]
    rates = [f for f in figures if f["name"] == "runs per second"]
    assert [f["workload"].split(" worker")[0] for f in rates] == ["1", "2"]  # quick: SQLite
    for figure in rates:
        assert figure["art"] > 0 and figure["details"]["failed"] == 0
        assert figure["details"]["runs"] == 20
    cpu = [f for f in figures if f["name"] == "worker CPU per run"]
    assert len(cpu) == 2 and all(f["art"] > 0 for f in cpu)
    (take_over,) = [f for f in figures if f["name"] == "take-over after SIGKILL"]
    assert take_over["details"]["runs_taken_over"] >= 1
    assert take_over["art"] > 0
    assert take_over["target"] == pytest.approx(2.2)  # stalled 1 s + heartbeat 0.2 + 1 s


@pytest.mark.slow
def test_eager_compares_three_shapes_with_the_whole_plan_and_the_physical_limit(
    report: dict,
) -> None:
    figures = by_group(report)["eager"]
    shapes = {f["workload"].split(",")[0] for f in figures}
    assert shapes == {"independent", "long first", "chain"}
    for figure in figures:
        if figure["name"] == "wall ÷ physical limit":
            assert figure["art"] >= 0.95  # no run beats the limit (a 5 % margin for timers)
            assert figure["target"] == 1.05
        elif figure["name"] == "last byte -> tool start (median)":
            assert figure["details"]["steps_measured"] == 8
            assert figure["details"]["max_ms"] >= figure["art"]
    walls = {f["workload"]: f for f in figures if f["name"] == "wall, eager ÷ whole plan"}
    assert walls["long first, 400 tokens/s"]["art"] < 1.0  # the long step overlapped


@pytest.mark.slow
def test_the_report_times_a_fixed_workload_before_and_after_the_run(report: dict) -> None:
    from benchmarks.harness import calibrate

    calibration = report["calibration_ms"]
    assert set(calibration) == {"before", "after"}
    # The same workload timed here again lands in the same range (it takes tens of ms;
    # a machine busy with this test suite may take a few times longer, never 50 times).
    now = calibrate(3)
    for value in calibration.values():
        assert now / 50 < value < now * 50


# -- instructions per step (python -m benchmarks.instructions) -------------------------------


@pytest.mark.parametrize("stage", ["plan", "execute", "records", "event log"])
def test_the_instruction_probe_runs_each_stage_of_a_run(stage: str) -> None:
    import uuid

    from art.engine import scheduler as execution
    from benchmarks.instructions import probe

    slice_s, uuid4 = execution._SLICE_S, uuid.uuid4
    completed = probe(stage, "random-dag", 20, 2)

    assert completed == (0 if stage == "plan" else 40)  # two runs of every step, or none
    # Only the process valgrind runs is made deterministic; a caller's is left alone.
    assert (execution._SLICE_S, uuid.uuid4) == (slice_s, uuid4)


@pytest.mark.slow
def test_instructions_per_step_are_counted_in_valgrind() -> None:
    from benchmarks.instructions import per_step, valgrind_missing

    missing = valgrind_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"valgrind is required in CI: {missing}", pytrace=False)
        pytest.skip(missing)

    counted = per_step("execute", "chain", 10, gc=False)

    # Reading and running a plan costs a few hundred thousand instructions per step (about
    # 340,000 here when measured); an import counted in would be far outside the range.
    assert 50_000 < counted < 2_000_000


@pytest.mark.slow
def test_the_scaling_figure_compares_two_chain_lengths() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scaling", "--steps", "20", "60", "--repeats", "1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("chain-20: ") and lines[1].startswith("chain-60: ")
    assert lines[2].startswith("chain-60 / chain-20: ") and lines[2].endswith(" x per step")
