"""Peak RSS growth of one big plan, measured in a fresh process.

Run as `python -m benchmarks.memory_probe --engine art|langgraph --steps N`; prints one
JSON line. The process imports everything and makes a warm-up run first, then resets
the kernel's peak-RSS mark (`/proc/self/clear_refs`), reads the resident size, runs the
big plan, and reports the peak minus that baseline. Only /proc is read (no psutil).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
from pathlib import Path

from benchmarks.workloads import fan_out, make_step_fn, plan_for, random_dag


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_kb() -> int:
    try:
        return _status_kb("VmHWM")
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


async def _art(steps: int) -> dict[str, float | int | bool]:
    from benchmarks.art_side import LlmClock, create_instance, quiet_logging, run_once, step_tool

    quiet_logging()

    tool = step_tool(make_step_fn(0))
    warm = create_instance(plan_for(fan_out(4)), [tool])
    clock = LlmClock()
    shape = random_dag(steps)
    big = create_instance(plan_for(shape), [tool])
    with clock.installed():
        await run_once(warm, clock, expected_steps=5)
        await warm.close()
        reset = _reset_peak()
        before = _status_kb("VmRSS")
        started = time.perf_counter()
        await run_once(big, clock, expected_steps=shape.size)
        wall = time.perf_counter() - started
        peak = _peak_kb()
    await big.close()
    return {"before_kb": before, "peak_kb": peak, "wall_s": wall, "peak_reset": reset}


async def _langgraph(steps: int) -> dict[str, float | int | bool]:
    from benchmarks.langgraph_side import build_graph, run_once

    fn = make_step_fn(0)
    warm_shape = fan_out(4)
    await run_once(build_graph(warm_shape, fn), warm_shape)
    reset = _reset_peak()
    before = _status_kb("VmRSS")
    started = time.perf_counter()
    shape = random_dag(steps)
    # Building the graph is part of running a new plan on LangGraph.
    await run_once(build_graph(shape, fn), shape)
    wall = time.perf_counter() - started
    return {"before_kb": before, "peak_kb": _peak_kb(), "wall_s": wall, "peak_reset": reset}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", choices=["art", "langgraph"], default="art")
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    probe = _art if args.engine == "art" else _langgraph
    result = asyncio.run(probe(args.steps))
    result["growth_mb"] = (int(result["peak_kb"]) - int(result["before_kb"])) / 1024
    print(json.dumps(result))


if __name__ == "__main__":
    main()
