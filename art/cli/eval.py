"""`art eval`: run a dataset of questions on a model, print a table per case and in
total, compare two models or prompts side by side, write JSON and HTML reports, and
fail when a score drops below a stored report's (docs/evaluation.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from art.cli.checks import positive_seconds
from art.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    ModelOption,
    Output,
    ToolsOption,
    exit_with,
    guard,
    key_values,
    load_model,
    load_tools,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from art.core.json import JsonValue
    from art.evaluation import CaseResult, Dataset, EvalReport
    from art.instance import ArtInstance

__all__ = ["register_eval_command"]


def eval_command(
    dataset: Annotated[
        Path,
        typer.Argument(help="The dataset: a YAML or JSON file of cases.", metavar="DATASET"),
    ],
    model: ModelOption = None,
    tools: ToolsOption = None,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare", metavar="MODEL", help="Run the cases on this model too, side by side."
        ),
    ] = None,
    compare_prompt: Annotated[
        Path | None,
        typer.Option(
            "--compare-prompt",
            metavar="FILE",
            help="Run the cases again with this file's text as the planner's guidance "
            "(Persona.planning), side by side.",
        ),
    ] = None,
    plan_only: Annotated[
        bool, typer.Option("--plan-only", help="Only plan each case: no tools, no answer.")
    ] = False,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, metavar="N", help="Cases at a time.")
    ] = 1,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="A case taking longer is counted as timed out.",
            callback=positive_seconds,
            show_default=False,
        ),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            metavar="KEY=VALUE",
            help="An LLM parameter (llm_params), e.g. temperature=0 (repeatable).",
            show_default=False,
        ),
    ] = None,
    judge: Annotated[
        bool, typer.Option("--judge", help="Run the cases' LLM judges (off by default).")
    ] = False,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json", metavar="FILE", help="Write the report as JSON.", show_default=False
        ),
    ] = None,
    html_path: Annotated[
        Path | None,
        typer.Option(
            "--html", metavar="FILE", help="Write the report as one HTML page.", show_default=False
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            metavar="REPORT",
            help="A report --json wrote: exit 1 when a score is lower than in it.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run every case of DATASET and report how well the agent plans and answers."""
    if compare and compare_prompt:
        raise typer.BadParameter("choose one of --compare and --compare-prompt")
    out = Output(json=False)

    async def body() -> int:
        from art.evaluation import (
            DatasetError,
            baseline_drops,
            comparison_table,
            load_dataset,
            load_reports,
            report_html,
            report_table,
            write_reports,
        )

        try:
            cases = load_dataset(dataset)
        except DatasetError as exc:
            raise CliError("CONFIG_ERROR", str(exc), EXIT_USAGE) from None
        previous = None
        if baseline is not None:
            try:
                previous = load_reports(baseline)[0]
            except (OSError, ValueError, KeyError, IndexError) as exc:
                raise CliError(
                    "CONFIG_ERROR", f"--baseline {str(baseline)!r}: {exc}", EXIT_USAGE
                ) from None
        llm_params = key_values(param, "--param") if param else {}
        sides: list[tuple[str | None, str | None, str]] = [(model, None, "")]
        if compare:
            sides.append((compare, None, ""))
        elif compare_prompt is not None:
            try:
                guidance = compare_prompt.read_text(encoding="utf-8")
            except OSError as exc:
                raise CliError(
                    "CONFIG_ERROR", f"--compare-prompt: {exc.strerror or exc}", EXIT_USAGE
                ) from None
            sides.append((model, guidance, f" + {compare_prompt.name}"))
        reports: list[EvalReport] = []
        for side_model, side_guidance, suffix in sides:
            async with _instance(cases, side_model, tools, side_guidance, llm_params) as inst:
                label = str(inst.config.model or "") + suffix
                reports.append(
                    await _evaluate(out, cases, inst, label, plan_only, concurrency, timeout, judge)
                )
        for report in reports:
            out.console.print(report_table(report))
        if len(reports) == 2:
            out.console.print(comparison_table(reports[0], reports[1]))
        if json_path is not None:
            write_reports(json_path, reports)
        if html_path is not None:
            html_path.write_text(report_html(reports), encoding="utf-8")
        if previous is not None:
            drops = baseline_drops(reports[0], previous)
            for drop in drops:
                out.errors.print(f"[red bold]score dropped[/] {drop}")
            if drops:
                return EXIT_ERROR
        return EXIT_OK

    exit_with(guard(out, body))


def _instance(
    cases: Dataset,
    model: str | None,
    tools: list[str] | None,
    guidance: str | None,
    llm_params: Mapping[str, JsonValue],
) -> ArtInstance:
    """The instance a side runs on: the dataset's tools (a file named relative to the
    dataset) unless --tools names others, memory storage (each case gets a thread of
    its own)."""
    import os

    import art
    from art.tools import builtin_tools

    specs = tools or cases.tool_specs()
    fields: dict[str, Any] = {
        "tools": load_tools(specs) if specs else list(builtin_tools()),
        "storage": "memory://",
    }
    chosen = model or os.environ.get("ART_MODEL")
    if chosen:
        fields["model"] = load_model(chosen)
    if guidance is not None:
        fields["persona"] = {"planning": guidance}
    if llm_params:
        fields["llm_params"] = llm_params
    return art.create_art_instance(**fields)


async def _evaluate(
    out: Output,
    cases: Dataset,
    inst: ArtInstance,
    label: str,
    plan_only: bool,
    concurrency: int,
    time_limit: float | None,
    judge: bool,
) -> EvalReport:
    from art.evaluation import aevaluate

    done = 0
    total = len(cases.cases)

    def progress(result: CaseResult) -> None:
        nonlocal done
        done += 1
        mark = "[green]✓[/]" if result.passed else "[red]✗[/]"
        detail = f" [dim]{result.error}[/]" if result.error else ""
        out.errors.print(
            f"[dim]{label}[/] [{done}/{total}] {mark} {result.case} "
            f"[dim]{result.latency_s:.2f} s[/]{detail}"
        )

    report: EvalReport = await aevaluate(
        cases,
        inst,
        plan_only=plan_only,
        concurrency=concurrency,
        timeout_s=time_limit,
        judge=judge,
        label=label,
        on_result=progress,
    )
    return report


def register_eval_command(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
