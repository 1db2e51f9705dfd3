"""`python -m benchmarks.scaling`: does a step cost more when the plan is longer?

Runs chains of 1,000 and 10,000 steps (instant async tool, scripted LLM, memory storage)
through `aprocess`, as the overhead figure does, and prints each size's engine overhead
per step (wall time minus the LLM's), the share of it spent in the garbage collector,
and the ratio of the long plan's figure to the short one's. Collections a run sets off
itself stay in its figure; each run starts after a full collection, as in the suite.
Sizes and shapes alternate in rounds, so a slow spell of the machine lands on both.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

from benchmarks.art_side import (
    LlmClock,
    create_instance,
    quiet_logging,
    run_once,
    step_tool,
)
from benchmarks.workloads import chain, make_step_fn, plan_for

US = 1e6


async def measure(sizes: list[int], repeats: int) -> dict[int, dict[str, float]]:
    """Median overhead and GC time per step of each chain size."""
    quiet_logging()
    clock = LlmClock()
    per_step: dict[int, list[float]] = {n: [] for n in sizes}
    gc_per_step: dict[int, list[float]] = {n: [] for n in sizes}
    with clock.installed():
        benches = {
            n: create_instance(plan_for(chain(n)), [step_tool(make_step_fn(0))]) for n in sizes
        }
        try:
            for n, bench in benches.items():  # warm-up
                await run_once(bench, clock, expected_steps=n)
            for _ in range(repeats):
                for n, bench in benches.items():
                    run = await run_once(bench, clock, expected_steps=n)
                    per_step[n].append(run.overhead_s() / n * US)
                    gc_per_step[n].append(run.gc_cpu_s / n * US)
        finally:
            for bench in benches.values():
                await bench.close()
    return {
        n: {
            "overhead_us": statistics.median(per_step[n]),
            "gc_us": statistics.median(gc_per_step[n]),
        }
        for n in sizes
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scaling",
        description="Engine overhead per step of a 1,000- and a 10,000-step chain.",
    )
    parser.add_argument("--steps", type=int, nargs=2, default=[1000, 10_000])
    parser.add_argument("--repeats", type=int, default=5, help="measured runs per size")
    args = parser.parse_args(argv)
    short, long = args.steps
    figures = asyncio.run(measure([short, long], args.repeats))
    for n, figure in figures.items():
        print(
            f"chain-{n}: {figure['overhead_us']:.1f} us/step overhead, "
            f"of which {figure['gc_us']:.1f} us in the garbage collector"
        )
    ratio = figures[long]["overhead_us"] / figures[short]["overhead_us"]
    print(f"chain-{long} / chain-{short}: {ratio:.2f} x per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
