"""`python -m benchmarks`: measure every figure, print the table, write the JSON report."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

from benchmarks.harness import (
    GROUPS,
    Settings,
    calibrate,
    machine_info,
    print_table,
    write_json,
)

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure art's engine overhead, parallel efficiency, LLM cost, "
        "throughput, memory, start-up and queued runs, next to LangGraph on the same DAGs.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these groups (repeatable or comma separated): {', '.join(GROUPS)}",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write JSON")
    parser.add_argument("--repeats", type=int, default=None, help="measured runs per figure")
    parser.add_argument(
        "--llm-latency-ms",
        type=float,
        default=None,
        help="scripted LLM latency for the parallel and throughput figures (default 50)",
    )
    parser.add_argument(
        "--tool-sleep-ms",
        type=float,
        default=None,
        help="how long each tool sleeps in the parallel figure (default 50)",
    )
    parser.add_argument("--no-langgraph", action="store_true", help="skip the LangGraph column")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    settings = Settings.quick_settings(args.repeats) if args.quick else Settings()
    changes: dict[str, object] = {}
    if args.repeats is not None:
        changes["repeats"] = max(1, args.repeats)
    if args.llm_latency_ms is not None:
        changes["parallel_llm_latency_s"] = args.llm_latency_ms / 1000
        changes["throughput_llm_latency_s"] = args.llm_latency_ms / 1000
    if args.tool_sleep_ms is not None:
        changes["parallel_sleep_s"] = args.tool_sleep_ms / 1000
    if not changes:
        return settings
    from dataclasses import replace

    return replace(settings, **changes)


def selected_groups(only: list[str]) -> list[str]:
    names = [n.strip() for item in only for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        sys.exit(f"unknown group {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    return [g for g in GROUPS if g in names] if names else list(GROUPS)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    settings = settings_from(args)
    groups = selected_groups(args.only)

    from benchmarks.figures import run_groups
    from benchmarks.langgraph_side import langgraph_version

    lg_version = None if args.no_langgraph else langgraph_version()
    reason = "skipped (--no-langgraph)" if args.no_langgraph else "langgraph not installed"
    if lg_version is None:
        print(
            f"LangGraph column skipped ({reason}; pip install -e '.[bench]').",
            file=sys.stderr,
        )
    calibration_repeats = 1 if settings.quick else 5
    calibration_before = calibrate(calibration_repeats)
    started = time.perf_counter()
    figures = asyncio.run(
        run_groups(groups, settings, with_langgraph=lg_version is not None, skip_reason=reason)
    )
    elapsed = time.perf_counter() - started
    calibration_after = calibrate(calibration_repeats)

    import art

    meta = {
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        "quick": settings.quick,
        "repeats": settings.repeats,
        "groups": groups,
        "settings": settings.__dict__,
        "art_version": art.__version__,
        "langgraph_version": lg_version,
        "machine": machine_info(),
        # ms of benchmarks.harness.calibrate's fixed workload: compare runs by it.
        "calibration_ms": {
            "before": round(calibration_before, 2),
            "after": round(calibration_after, 2),
        },
        "elapsed_s": round(elapsed, 1),
    }
    write_json(args.json, figures, meta)
    title = f"art {art.__version__} benchmarks ({'quick' if settings.quick else 'full'}" + (
        f", LangGraph {lg_version})" if lg_version else ", no LangGraph)"
    )
    print_table(figures, title)
    floors = [f for f in figures if "bare_asyncio_ratio" in f.details]
    if floors:
        print(
            "Parallel floor, the same layers gathered with bare asyncio and no engine: "
            + "; ".join(f"{f.workload}: {f.details['bare_asyncio_ratio']:.2f} x" for f in floors)
            + "."
        )
    print(
        f"Machine speed: a fixed Python workload took {calibration_before:.1f} ms before "
        f"this run and {calibration_after:.1f} ms after it (lower is faster)."
    )
    print(f"JSON written to {args.json} ({elapsed:.0f} s)")
    return 1 if any(f.error for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
