"""`python -m benchmarks.instructions`: CPU instructions per step, counted by valgrind.

The wall-clock figures of `python -m benchmarks` are medians measured in one process, and
still move by 10-40 % within an hour on a shared VM (docs/performance.md). An
instruction count does not: it tells two versions of the engine apart to within about
0.5 %, which is what a change worth a few µs per step needs.

Each stage adds one part of a run to the stage before it:

- `plan`: the planning reply read into a Plan and validated (`parse_plan`);
- `execute`: the executor running the plan (an instant async tool; no storage, no log);
- `records`: every step record saved to MemoryStorage when the step starts and ends;
- `event log`: the run's event log, built and stored as the instance stores it.

The LLM calls are left out, as the wall-clock figures leave them out. Each stage runs in
valgrind (cachegrind, no cache simulation) twice, with 1 and 3 runs of the plan; half the
difference is one run, so imports and first-run warm-ups cancel out. Hashing, ids and the
workers' time slice are made deterministic (`_make_deterministic`), so a count repeats to
within 0.02 %; `--no-gc` leaves the garbage collector's share out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

STAGES = ("plan", "execute", "records", "event log")
SHAPES = ("chain", "fan-out", "random-dag")
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "instructions.json"
_TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")


# -- the probe: runs inside valgrind ---------------------------------------------------------


def probe(stage: str, shape_name: str, steps: int, runs: int) -> int:
    """Run `stage` of a `steps`-step plan `runs` times; returns the steps completed."""
    from art.adapters.memory import MemoryStorage
    from art.engine.execute import PlanExecution
    from art.engine.execution_state import ExecutionDeps
    from art.observe.event_log import LOGGED_EVENTS, kept_in_log, stored_events
    from art.observe.events import EventBus, RunEvents
    from art.planning.planner import parse_plan
    from art.storage.contract import RunRecord
    from art.testing.runs import make_run_context
    from art.tooling.registry import ToolRegistry
    from benchmarks.art_side import step_tool
    from benchmarks.workloads import chain, fan_out, make_step_fn, plan_for, random_dag

    shape = {"chain": chain, "fan-out": fan_out, "random-dag": random_dag}[shape_name](steps)
    reply = json.dumps(plan_for(shape))
    registry = ToolRegistry([step_tool(make_step_fn(0))])  # the overhead figure's tool
    level = STAGES.index(stage)

    async def once(storage: MemoryStorage) -> int:
        plan, problems = parse_plan(reply, registry)
        if plan is None or problems:
            raise RuntimeError(f"the benchmark plan is invalid: {problems}")
        if level == 0:
            return 0
        logged = LOGGED_EVENTS if level >= 3 else frozenset()
        run = make_run_context(events=RunEvents(EventBus(), logged=logged, keep=kept_in_log))
        persist = None
        if level >= 2:
            record = RunRecord(
                run_id=run.run_id,
                thread_id=run.thread_id,
                trace_id=run.trace_id,
                query="benchmark",
                status="running",
                plan=plan,
            )
            await storage.create_run(record)

            def persist(snapshot: Any) -> Any:  # as the instance saves (Run.persist_step)
                return storage.save_step_snapshot(run.run_id, snapshot)

        deps = ExecutionDeps(run=run, registry=registry, persist=persist)
        outcome = await PlanExecution(deps, plan).run()
        if outcome.status != "completed":
            raise RuntimeError(f"the benchmark run ended {outcome.status}")
        if level >= 3:
            batch = run.events.drain()  # type: ignore[attr-defined]
            await storage.append_event_snapshots(
                stored_events(batch, run.thread_id, run.run_id, run.trace_id, lambda d: d)
            )
        return len(outcome.records)

    async def main() -> int:
        storage = MemoryStorage()
        return sum([await once(storage) for _ in range(runs)])

    return asyncio.run(main())


def _make_deterministic() -> None:
    """Take chance and the clock out of the count. Patches the process's modules: called
    only in the process valgrind runs, which does nothing else.

    Random ids change how often dict lookups collide, by about 0.5 % of a run; seeded,
    a count repeats to within 0.02 %. A worker yields to the event loop after running
    steps for `_SLICE_S` of wall time, which valgrind stretches fifty-fold: the count
    leaves those yields out (about 50 per 1,000-step run natively, some 0.2 %).
    """
    import random
    import secrets
    import uuid

    from art.engine import scheduler as execution

    ids = random.Random(7)
    random.seed(7)
    secrets.token_hex = lambda nbytes=32: f"{ids.getrandbits(8 * nbytes):0{2 * nbytes}x}"
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
    execution._SLICE_S = float("inf")


# -- the measurement ------------------------------------------------------------------------


def valgrind_missing() -> str | None:
    """Why instructions cannot be counted here, or None."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed (apt-get install valgrind)"
    return None


def count_instructions(stage: str, shape: str, steps: int, runs: int, *, gc: bool) -> int:
    """Instructions the probe executes under valgrind, imports included."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    # Without address randomisation, objects hashed by address collide the same way.
    command = ["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []
    command += [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "benchmarks.instructions",
        "--probe",
        stage,
        "--shape",
        shape,
        "--steps",
        str(steps),
        "--runs",
        str(runs),
    ]
    if not gc:
        command.append("--no-gc")
    done = subprocess.run(
        command,
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = _TOTAL.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the probe failed in valgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_step(stage: str, shape: str, steps: int, *, gc: bool) -> float:
    """One run's instructions per step: (3 runs - 1 run) / 2 / steps."""
    one = count_instructions(stage, shape, steps, 1, gc=gc)
    three = count_instructions(stage, shape, steps, 3, gc=gc)
    return (three - one) / 2 / steps


def measure(shapes: list[str], steps: int, *, gc: bool) -> list[dict[str, Any]]:
    """Instructions per step of every stage of every shape; valgrind runs in parallel."""
    jobs = [(shape, stage) for shape in shapes for stage in STAGES]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counts = list(pool.map(lambda job: per_step(job[1], job[0], steps, gc=gc), jobs))
    rows: list[dict[str, Any]] = []
    for (shape, stage), count in zip(jobs, counts, strict=True):
        before = rows[-1]["per_step"] if rows and rows[-1]["shape"] == shape else 0.0
        rows.append({"shape": shape, "stage": stage, "per_step": count, "added": count - before})
    return rows


def print_rows(rows: list[dict[str, Any]], steps: int, gc: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"instructions per step ({steps}-step plans, gc {'on' if gc else 'off'})")
    for column in ("shape", "stage", "instructions/step", "added by the stage"):
        table.add_column(column, justify="left" if column in ("shape", "stage") else "right")
    for row in rows:
        table.add_row(row["shape"], row["stage"], f"{row['per_step']:,.0f}", f"{row['added']:,.0f}")
    Console().print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.instructions",
        description="Count the CPU instructions per step of each part of a run (valgrind).",
    )
    parser.add_argument("--steps", type=int, default=1000, help="steps per plan (default 1000)")
    parser.add_argument(
        "--shape",
        action="append",
        choices=SHAPES,
        help="plan shape (repeatable; default: random-dag)",
    )
    parser.add_argument("--no-gc", action="store_true", help="count with the collector off")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write JSON")
    parser.add_argument("--probe", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=1, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shapes = args.shape or ["random-dag"]
    if args.probe is not None:  # inside valgrind
        if args.no_gc:
            import gc

            gc.disable()
        _make_deterministic()
        probe(args.probe, shapes[0], args.steps, args.runs)
        return 0
    missing = valgrind_missing()
    if missing is not None:
        print(f"cannot count instructions: {missing}", file=sys.stderr)
        return 2
    gc_on = not args.no_gc
    rows = measure(shapes, args.steps, gc=gc_on)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"steps": args.steps, "gc": gc_on, "rows": rows}, indent=2) + "\n"
    )
    print_rows(rows, args.steps, gc_on)
    print(f"JSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
