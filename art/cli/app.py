"""The `art` command: run, plan, resume and inspect threads from a terminal (typer + rich).

It uses the public API only, and imports the engine (and litellm) inside the commands, so
`art --help` starts in a fraction of a second. Exit codes: 0 success (a `partial` run
included), 1 error, 2 usage or configuration mistake, 3 suspended waiting for a human.
`--json` on every command prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import typer

from art.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SUSPENDED,
    EXIT_USAGE,
    PIPED_WIDTH,
    RUN_STATUS_STYLE,
    ApiBaseOption,
    ApiKeyEnvOption,
    CliError,
    FullOption,
    InstanceFields,
    JsonOption,
    McpConfigOption,
    ModelOption,
    NewThreadOption,
    Output,
    StorageOption,
    ThreadArgument,
    TimeoutOption,
    ToolsOption,
    build_instance,
    compact,
    escape,
    exit_with,
    format_duration,
    format_seconds,
    format_when,
    guard,
    key_values,
    load_instance,
    load_model,
    load_tools,
    make_console,
    one_line,
    status_text,
)
from art.cli.eval import register_eval_command
from art.cli.mcp import list_tools, serve_command
from art.cli.queue import register_queue_commands
from art.cli.serve import serve_command as http_serve_command

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text
    from rich.tree import Tree

    from art.core.json import JsonObject
    from art.instance import ArtInstance
    from art.observe.events import Event
    from art.planning.plans import Plan
    from art.responses import AgentFinalResponse, StepRecord
    from art.storage.contract import RunRecord, StorageAdapter, StoredEvent

# The names other modules and scripts import from the command's entry module.
__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_SUSPENDED",
    "EXIT_USAGE",
    "CliError",
    "Launch",
    "app",
    "display_panel",
    "load_instance",
    "load_model",
    "load_tools",
    "main",
    "make_console",
]

app = typer.Typer(
    name="art",
    epilog="Exit codes: 0 success (partial included), 1 error, 2 usage or configuration "
    "mistake, 3 suspended waiting for approval. Docs: docs/cli.md",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: typer's rich help imports markdown-it and takes ~0.3 s more.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _main_options(
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose",
            "-v",
            count=True,
            show_default=False,
            help="Show art's logs on stderr (-vv for debug).",
        ),
    ] = 0,
) -> None:
    """Run art agents from the terminal: one LLM call plans a DAG of tool steps, the
    engine runs independent steps at the same time, one LLM call writes the answer.

    The model comes from --model or $ART_MODEL (else the offline demo model local/smollm2
    when installed); threads live in --storage or $ART_STORAGE (else SQLite under the user
    data directory)."""
    level = {0: "WARNING", 1: "INFO"}.get(verbose, "DEBUG")
    from art.logging import configure_logging

    configure_logging(level=level)
    # The terminal's Markdown renderer logs every parsing rule at DEBUG: noise, not art's.
    logging.getLogger("markdown_it").setLevel(logging.INFO)


# -- commands ---------------------------------------------------------------------------
@app.command()
def run(
    query: Annotated[str, typer.Argument(help="What to ask.", show_default=False, metavar="QUERY")],
    thread: NewThreadOption = None,
    model: ModelOption = None,
    storage: StorageOption = None,
    tools: ToolsOption = None,
    mcp_config: McpConfigOption = None,
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    timeout: TimeoutOption = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="TOOL",
            help="Give this run only the named tools (repeatable).",
            show_default=False,
        ),
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option(
            "--context",
            metavar="KEY=VALUE",
            help="A system context variable every LLM call of the run sees (repeatable; "
            "a JSON value is read as JSON).",
            show_default=False,
        ),
    ] = None,
    metadata: Annotated[
        list[str] | None,
        typer.Option(
            "--metadata",
            metavar="KEY=VALUE",
            help="Run metadata for hooks and tools, never sent to an LLM (repeatable).",
            show_default=False,
        ),
    ] = None,
    eager: Annotated[
        bool | None,
        typer.Option(
            "--eager/--no-eager",
            help="Stream the plan and start each step as soon as it is written "
            "(ExecutionConfig.eager_execution; default: off).",
            show_default=False,
        ),
    ] = None,
    full: FullOption = False,
    json_output: JsonOption = False,
) -> None:
    """Plan and run QUERY, showing the plan as a live tree, then the answer."""
    out = Output(json=json_output)
    thread_id = thread or f"cli-{uuid.uuid4().hex[:8]}"
    options: dict[str, object] = {}
    if eager is not None:
        options["execution_config"] = {"eager_execution": eager}
    if only:
        options["tools"] = only
    if context:
        options["system_context"] = key_values(context, "--context")
    if metadata:
        options["metadata"] = key_values(metadata, "--metadata")
    launch = Launch(model, storage, tools, mcp_config, api_base, api_key_env, timeout)
    exit_with(guard(out, lambda: _run(out, query, thread_id, launch, options, full=full)))


@app.command()
def plan(
    query: Annotated[
        str, typer.Argument(help="What to plan.", show_default=False, metavar="QUERY")
    ],
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread", "-T", metavar="THREAD", help="Plan as a follow-up in this thread."
        ),
    ] = None,
    model: ModelOption = None,
    storage: StorageOption = None,
    tools: ToolsOption = None,
    mcp_config: McpConfigOption = None,
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    timeout: TimeoutOption = None,
    mermaid: Annotated[bool, typer.Option("--mermaid", help="Print a Mermaid graph.")] = False,
    full: FullOption = False,
    json_output: JsonOption = False,
) -> None:
    """Print the plan for QUERY without running anything."""
    if mermaid and json_output:
        raise typer.BadParameter("choose one of --mermaid and --json")
    out = Output(json=json_output)

    launch = Launch(model, storage, tools, mcp_config, api_base, api_key_env, timeout)

    async def make_plan() -> int:
        async with launch.instance() as inst:
            result = await inst.aplan(query, thread)
        if json_output:
            out.emit_json(_wire_with_dependencies(result))
        elif mermaid:
            sys.stdout.write(result.to_mermaid().rstrip("\n") + "\n")
        else:
            out.console.print(plan_tree(result.to_wire(), {}, show_status=False, full=full))
        return EXIT_OK

    exit_with(guard(out, make_plan))


@app.command()
def resume(
    thread_id: ThreadArgument,
    suspension_id: Annotated[
        str, typer.Argument(help="The suspension id.", show_default=False, metavar="SUSPENSION")
    ],
    approve: Annotated[
        bool | None,
        typer.Option("--approve/--reject", help="The decision (required).", show_default=False),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option("--reason", "-r", metavar="TEXT", help="Why (given to the agent)."),
    ] = None,
    modified_args: Annotated[
        str | None,
        typer.Option(
            "--modified-args",
            metavar="JSON",
            help="A JSON object: the arguments to run the step with instead, or, for a "
            "tool that asked for input (an MCP elicitation), the answer.",
        ),
    ] = None,
    model: ModelOption = None,
    storage: StorageOption = None,
    tools: ToolsOption = None,
    mcp_config: McpConfigOption = None,
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    timeout: TimeoutOption = None,
    full: FullOption = False,
    json_output: JsonOption = False,
) -> None:
    """Decide a suspended step (human in the loop) and finish the run."""
    if approve is None:
        raise typer.BadParameter("say --approve or --reject", param_hint="--approve/--reject")
    out = Output(json=json_output)
    decision: dict[str, Any] = {"approved": approve, "reason": reason}
    if modified_args is not None:
        try:
            decision["modified_args"] = json.loads(modified_args)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"not JSON: {exc.msg}", param_hint="--modified-args") from None
        if not isinstance(decision["modified_args"], dict):
            raise typer.BadParameter("must be a JSON object", param_hint="--modified-args")
    launch = Launch(model, storage, tools, mcp_config, api_base, api_key_env, timeout)

    async def do_resume() -> int:
        async with launch.instance() as inst:
            view = RunView(thread_id=thread_id, full=full)
            view.phase = "executing"  # a resume does not plan
            await _seed_view(inst, view, thread_id)
            if approve:
                view.approved |= {
                    s["step_id"]
                    for s in await _pending_suspensions(inst, thread_id)
                    if s["suspension_id"] == suspension_id
                }

            with _cancel_on_interrupt(out, inst, thread_id) as interrupted:
                response = await _live(
                    out, view, _resume_events(inst, thread_id, suspension_id, decision, view)
                )
            code = await _finish(out, inst, view, response, launch)
            return EXIT_INTERRUPTED if interrupted else code

    exit_with(guard(out, do_resume))


@app.command()
def fork(
    thread_id: ThreadArgument,
    run_id: Annotated[
        str, typer.Argument(help="The run to fork.", show_default=False, metavar="RUN")
    ],
    step_id: Annotated[
        str,
        typer.Argument(
            help="The step to run again, with every step downstream of it.",
            show_default=False,
            metavar="STEP",
        ),
    ],
    args: Annotated[
        str | None,
        typer.Option("--args", metavar="JSON", help="Arguments for STEP (a JSON object)."),
    ] = None,
    model: ModelOption = None,
    storage: StorageOption = None,
    tools: ToolsOption = None,
    mcp_config: McpConfigOption = None,
    api_base: ApiBaseOption = None,
    api_key_env: ApiKeyEnvOption = None,
    timeout: TimeoutOption = None,
    json_output: JsonOption = False,
) -> None:
    """Run a stored run again from one step, as a new run of the thread (a fork): the
    finished steps it cannot change keep their outputs."""
    step_args = _json_object(args, "--args") if args is not None else None
    out = Output(json=json_output)
    launch = Launch(model, storage, tools, mcp_config, api_base, api_key_env, timeout)

    async def do_fork() -> int:
        async with launch.instance() as inst:
            view = RunView(thread_id=thread_id)
            view.phase = "executing"  # a fork does not plan

            def start() -> Coroutine[object, None, AgentFinalResponse]:
                return inst.afork(thread_id, run_id, step_id, args=step_args)

            response = await _live(out, view, _subscribed_events(inst, start, view))
            return await _finish(out, inst, view, response, launch)

    exit_with(guard(out, do_fork))


def _json_object(text: str, option: str) -> JsonObject:
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint=option) from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object", param_hint=option)
    return value


@app.command()
def threads(
    storage: StorageOption = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", metavar="N", min=1, help="At most this many.")
    ] = 50,
    json_output: JsonOption = False,
) -> None:
    """List threads, most recently updated first."""
    out = Output(json=json_output)

    async def list_them() -> int:
        async with _storage(storage) as store:
            summaries = await store.list_threads(limit=limit)
        if json_output:
            out.emit_json([s.model_dump(mode="json") for s in summaries])
            return EXIT_OK
        if not summaries:
            out.console.print('[dim]No threads yet.[/] Start one with [bold]art run "..."[/].')
            return EXIT_OK
        from rich.table import Table

        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("thread", "runs", "status", "updated", "last query"):
            table.add_column(column, overflow="fold" if column == "last query" else "ellipsis")
        for s in summaries:
            table.add_row(
                s.thread_id,
                str(s.runs),
                status_text(_run_status(s.last_status) or "-"),
                format_when(s.updated_at),
                one_line(s.last_query or "", 60),
            )
        out.console.print(table)
        return EXIT_OK

    exit_with(guard(out, list_them))


@app.command()
def show(
    thread_id: ThreadArgument,
    storage: StorageOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show a thread's runs and a timeline of its stored events."""
    out = Output(json=json_output)

    async def show_it() -> int:
        async with _storage(storage) as store:
            runs = await store.list_runs(thread_id)
            events = await store.query_events(thread_id)
        if not runs and not events:
            raise CliError("THREAD_NOT_FOUND", f"no thread {thread_id!r} in this storage")
        if json_output:
            out.emit_json(
                {
                    "thread_id": thread_id,
                    "runs": [r.model_dump(mode="json", by_alias=True) for r in runs],
                    "events": [e.model_dump(mode="json", by_alias=True) for e in events],
                }
            )
            return EXIT_OK
        out.console.print(timeline(thread_id, runs, events))
        return EXIT_OK

    exit_with(guard(out, show_it))


@app.command("tools")
def tools_command(
    tools: ToolsOption = None,
    mcp_config: McpConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the tools an agent gets (built-in or --tools, and --mcp-config's servers' tools,
    which are started to list them). Exits 1 when an MCP server does not start."""
    out = Output(json=json_output)
    exit_with(guard(out, lambda: list_tools(out, tools, mcp_config)))


@app.command("mcp")
def mcp_command(
    model: ModelOption = None,
    storage: StorageOption = None,
    tools: ToolsOption = None,
    mcp_config: McpConfigOption = None,
    instance: Annotated[
        str | None,
        typer.Option(
            "--instance",
            metavar="MODULE:ATTR",
            help="Serve this ArtInstance (or a function returning one) instead of building "
            "one from --model, --storage, --tools and --mcp-config.",
            show_default=False,
        ),
    ] = None,
    http: Annotated[
        bool, typer.Option("--http", help="Serve Streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (--http).")] = (
        "127.0.0.1"
    ),
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port (--http; 0: any free one).")
    ] = 8000,
    path: Annotated[str, typer.Option("--path", help="URL path (--http).")] = "/mcp",
    api_keys: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            metavar="KEY",
            help="A key clients send as 'Authorization: Bearer KEY' (--http; 16+ characters). "
            "Repeatable. Default: $ART_API_KEYS (comma-separated).",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Listen beyond loopback without keys (--http; only behind a proxy that "
            "authenticates every request).",
        ),
    ] = False,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            help="A Host name the server answers to besides the loopback names and --host "
            "(--http). Repeatable.",
        ),
    ] = None,
) -> None:
    """Serve this agent as an MCP server: its query, plan and suspension tools, over stdio
    (for Claude Desktop and IDEs) or Streamable HTTP. See docs/mcp.md."""
    out = Output(json=False)
    exit_with(
        guard(
            out,
            lambda: serve_command(
                instance=instance,
                model=model,
                storage=storage,
                tools=tools,
                mcp_config=mcp_config,
                http=http,
                host=host,
                port=port,
                path=path,
                api_keys=api_keys,
                no_auth=no_auth,
                allowed_hosts=allowed_hosts,
            ),
        )
    )


app.command("serve")(http_serve_command)
register_queue_commands(app)
register_eval_command(app)


def main() -> None:
    """Console-script entry point (`art = "art.cli.app:main"`)."""
    app()


# -- running and resuming ---------------------------------------------------------------
async def _run(
    out: Output,
    query: str,
    thread_id: str,
    launch: Launch,
    options: Mapping[str, object],
    *,
    full: bool = False,
) -> int:
    async with launch.instance() as inst:
        view = RunView(thread_id=thread_id, query=query, full=full)
        with _cancel_on_interrupt(out, inst, thread_id) as interrupted:
            response = await _live(out, view, inst.stream(query, thread_id, options))
        code = await _finish(out, inst, view, response, launch)
        return EXIT_INTERRUPTED if interrupted else code


@contextlib.contextmanager
def _cancel_on_interrupt(out: Output, inst: ArtInstance, thread_id: str) -> Iterator[list[bool]]:
    """Ctrl-C cancels the run (`art run`, `art resume`), which ends CANCELLED with what
    finished stored (the list yielded becomes non-empty); a second Ctrl-C quits at once."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()
    interrupted: list[bool] = []

    def cancel() -> None:
        interrupted.append(True)
        loop.remove_signal_handler(signal.SIGINT)  # the next Ctrl-C is KeyboardInterrupt
        out.errors.print("[yellow]cancelling the run (Ctrl-C again to quit at once)[/]")
        inst.cancel(thread_id, "interrupted (Ctrl-C)")

    try:
        loop.add_signal_handler(signal.SIGINT, cancel)
    except (NotImplementedError, RuntimeError, ValueError):  # no signals here (a thread)
        yield interrupted
        return
    try:
        yield interrupted
    finally:
        if not interrupted:
            loop.remove_signal_handler(signal.SIGINT)


def _resume_events(
    inst: ArtInstance,
    thread_id: str,
    suspension_id: str,
    decision: Mapping[str, object],
    view: RunView,
) -> AsyncIterator[Event]:
    """The events of a resumed run."""

    def start() -> Coroutine[object, None, AgentFinalResponse]:
        return inst.aresume_execution(thread_id, suspension_id, decision)

    return _subscribed_events(inst, start, view)


async def _subscribed_events(
    inst: ArtInstance,
    start: Callable[[], Coroutine[object, None, AgentFinalResponse]],
    view: RunView,
) -> AsyncIterator[Event]:
    """The events of the run `start()` makes, through a subscription (a resume or a fork
    has no stream of its own)."""
    import asyncio

    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    unsubscribe = inst.events.subscribe(queue.put_nowait)

    async def resume_then_stop() -> AgentFinalResponse:
        try:
            return await start()
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(resume_then_stop())
    try:
        while (event := await queue.get()) is not None:
            yield event
        view.response = await task
    finally:
        unsubscribe()
        if not task.done():
            task.cancel()


async def _live(out: Output, view: RunView, events: AsyncIterator[Event]) -> AgentFinalResponse:
    """Feed events to the view, rendering it live (unless --json); return the response."""
    if out.json:
        async for event in events:
            view.handle(event)
    else:
        from rich.live import Live

        with Live(view, console=out.console, refresh_per_second=12, transient=False) as live:
            async for event in events:
                view.handle(event)
            view.finished = True
            live.refresh()
    if view.response is None:
        raise CliError("INTERNAL_ERROR", "the run ended without a response")
    return view.response


async def _finish(
    out: Output,
    inst: ArtInstance,
    view: RunView,
    response: AgentFinalResponse,
    launch: Launch,
) -> int:
    """Print the outcome; in a terminal, ask about suspensions and resume until done."""
    while response.status == "suspended" and not out.json and _interactive():
        pending = await _pending_suspensions(inst, view.thread_id)
        if not pending:
            break
        suspension = pending[0]
        decision = _ask_decision(out, suspension)
        if decision["approved"]:
            view.approved.add(suspension["step_id"])
        view.reset_for_resume()
        response = await _live(
            out,
            view,
            _resume_events(inst, view.thread_id, suspension["suspension_id"], decision, view),
        )

    if out.json:
        document = response.model_dump(mode="json", by_alias=True)
        if response.status == "suspended":
            document["resume"] = [
                launch.resume_command(view.thread_id, s["suspension_id"])
                for s in await _pending_suspensions(inst, view.thread_id)
            ]
        out.emit_json(document)
        return _exit_code(response, view)

    console = out.console
    if response.status == "suspended":
        pending = await _pending_suspensions(inst, view.thread_id)
        console.print()
        for s in pending:
            console.print(
                f"[magenta]⏸ waiting for approval[/] step [bold]{s['step_id']}[/] "
                f"([cyan]{s['tool']}[/]): {one_line(_prompt_text(s), 200)}"
            )
            command = launch.resume_command(view.thread_id, s["suspension_id"])
            console.print("  resume with: [bold]" + escape(command) + "[/]", soft_wrap=True)
        from art.adapters.memory import MemoryStorage

        if isinstance(inst.storage, MemoryStorage):  # $ART_STORAGE may have chosen it
            console.print(
                "[dim]  (resuming from another process needs persistent storage: "
                "SQLite by default, or --storage)[/]"
            )
        console.print(summary_line(response, view.thread_id))
        return EXIT_SUSPENDED

    if response.status == "error" and response.metadata.error is not None:
        # The response's content only restates the error: print the error once.
        err = response.metadata.error
        out.errors.print(f"[red bold]error[/] [red]{err.code}[/]: {escape(err.message)}")
        for problem in err.problems:
            if problem not in err.message:
                out.errors.print(f"  • {escape(problem)}")
    elif response.content:
        from rich.markdown import Markdown

        console.print()
        console.print(Markdown(response.content), width=_answer_width(console, response.content))
        console.print()
    for item in response.display:
        console.print(display_panel(item.tool_name, item.step_id, item.output))
    for line in binary_lines(response.steps):
        console.print(f"[dim]📎 {escape(line)}[/]")
    for warning in response.metadata.warnings:
        console.print(f"[yellow]note:[/] {escape(warning)}")
    for step in _failed_approved(response, view):
        out.errors.print(
            f"[red bold]error[/] approved step [bold]{step.step_id}[/] failed: "
            f"{escape(step.reason or 'no reason given')}"
        )
    console.print(summary_line(response, view.thread_id))
    return _exit_code(response, view)


def _answer_width(console: Console, content: str) -> int:
    """The terminal's width; piped, the answer's longest line (headings are centred in it)."""
    if console.width < PIPED_WIDTH:
        return console.width
    return max(80, *(len(line) for line in content.splitlines() or [""]))


def _exit_code(response: AgentFinalResponse, view: RunView) -> int:
    """1 for an error or an approved step that failed, 3 for a suspension, else 0."""
    if _failed_approved(response, view):
        return EXIT_ERROR
    return {"error": EXIT_ERROR, "suspended": EXIT_SUSPENDED}.get(response.status, EXIT_OK)


def _failed_approved(response: AgentFinalResponse, view: RunView) -> list[StepRecord]:
    """The steps a person approved in this command that then failed."""
    return [s for s in response.steps if s.step_id in view.approved and s.status == "failed"]


def _interactive() -> bool:
    """A human can answer prompts: stdin and stdout are both terminals."""
    return sys.stdin.isatty() and sys.stdout.isatty()


class _Pending(TypedDict):
    """A pending suspension, as the commands show and answer it."""

    suspension_id: str
    step_id: str
    tool: str
    args: dict[str, object] | None
    prompt: object


class _Decision(TypedDict):
    approved: bool
    reason: str | None


def _ask_decision(out: Output, suspension: _Pending) -> _Decision:
    from rich.panel import Panel
    from rich.prompt import Confirm, Prompt

    body = _prompt_text(suspension)
    if suspension.get("args"):
        body += "\n\n[dim]arguments:[/] " + escape(compact(suspension["args"], 300))
    out.console.print(
        Panel(
            body,
            title=f"[magenta]approval needed[/] · {suspension['step_id']} · {suspension['tool']}",
            expand=False,
        )
    )
    approved = Confirm.ask("Approve?", console=out.console, default=True)
    reason = Prompt.ask("Reason (optional)", console=out.console, default="", show_default=False)
    return {"approved": approved, "reason": reason or None}


async def _pending_suspensions(inst: ArtInstance, thread_id: str) -> list[_Pending]:
    """The run's pending suspensions as dicts (suspension_id, step_id, tool, args, prompt)."""
    state = await inst.acheck_for_suspended_state(thread_id)
    if state is None:
        return []
    return [
        {
            "suspension_id": s.suspension_id,
            "step_id": s.step_id,
            "tool": s.tool_name,
            "args": s.args,
            "prompt": s.prompt,
        }
        for s in state.suspensions
    ]


async def _seed_view(inst: ArtInstance, view: RunView, thread_id: str) -> None:
    """Show the suspended run's plan and finished steps before resuming it."""
    run = (await inst.aget_state(thread_id)).active_run
    if run is None or run.plan is None:
        return
    view.query = run.query
    view.set_plan(run.plan.to_wire())
    for record in run.steps.values():
        view.steps[record.step_id] = StepView(
            status=record.status,
            tool=record.tool,
            started_at=record.started_at,
            ended_at=record.ended_at,
            reason=record.reason,
        )


# -- building the instance --------------------------------------------------------------
@dataclass(frozen=True)
class Launch:
    """The options a command built its instance from; a resume needs the same ones."""

    model: str | None
    storage: str | None
    tools: list[str] | None
    mcp_config: Path | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float | None = None

    def instance(self) -> ArtInstance:
        return build_instance(
            self.model, self.storage, self.tools, self.mcp_config, self._provider_fields()
        )

    def _provider_fields(self) -> InstanceFields:
        """The ArtInstanceConfig fields of --api-base, --api-key-env and --timeout."""
        fields: InstanceFields = {}
        if self.api_base:
            fields["api_base"] = self.api_base
        if self.api_key_env:
            fields["api_key_env"] = self.api_key_env
        if self.timeout is not None:
            fields["execution_config"] = {"llm_timeout_s": self.timeout}
        return fields

    def resume_command(self, thread_id: str, suspension_id: str) -> str:
        """The `art resume` command line that decides `suspension_id` with these options."""
        import shlex

        words = ["art", "resume", thread_id, suspension_id, "--approve"]
        if self.model:
            words += ["--model", self.model]
        if self.storage and not self.storage.startswith("memory:"):
            words += ["--storage", self.storage]
        for spec in self.tools or ():
            words += ["--tools", spec]
        if self.mcp_config is not None:
            words += ["--mcp-config", str(self.mcp_config)]
        if self.api_base:
            words += ["--api-base", self.api_base]
        if self.api_key_env:
            words += ["--api-key-env", self.api_key_env]
        if self.timeout is not None:
            words += ["--timeout", f"{self.timeout:g}"]
        return shlex.join(words)


class _storage:
    """`async with _storage(url) as store`: the storage adapter alone (no model needed)."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self.store: StorageAdapter | None = None

    async def __aenter__(self) -> StorageAdapter:
        from art.storage.opening import open_storage

        store = self.store = open_storage(self.url)
        await store.open()
        return store

    async def __aexit__(self, *exc: object) -> None:
        if self.store is not None:
            await self.store.close()


# -- rendering --------------------------------------------------------------------------
_STATUS_STYLE = {
    "pending": ("○", "dim"),
    "in_progress": ("◐", "yellow"),
    "completed": ("✓", "green"),
    "failed": ("✗", "red"),
    "skipped": ("↷", "dim"),
    "waiting": ("⏸", "magenta"),
    "cancelled": ("⊘", "dim"),
}


@dataclass
class StepView:
    status: str = "pending"
    tool: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attempt: int = 1
    reason: str | None = None
    note: str | None = None  # the latest progress title a tool reported
    spinner: Any = None


class RunView:
    """A run's state built from its events, rendered as a rich tree (a live renderable)."""

    def __init__(self, *, thread_id: str, query: str | None = None, full: bool = False) -> None:
        self.thread_id = thread_id
        self.query = query
        self.full = full  # arguments and descriptions whole, not cut to one line
        self.plan: dict[str, Any] | None = None
        self.steps: dict[str, StepView] = {}
        self.phase = "planning"
        self.answer_chunks: list[str] = []
        self.llm_calls = 0
        self.replans = 0
        self.response: AgentFinalResponse | None = None
        self.finished = False
        self.approved: set[str] = set()  # steps a person approved in this command
        self._spinner: Any = None

    # -- events -------------------------------------------------------------------
    def handle(self, event: Event) -> None:
        data = event.data or {}
        name = event.name
        if name in ("plan:created", "plan:updated") and isinstance(data.get("plan"), dict):
            if name == "plan:updated":
                self.replans += 1
            self.set_plan(data["plan"])
            self.phase = "executing"
        elif name == "step:status":
            self._step_status(data, event.timestamp)
        elif name == "tool:update":
            step = self.steps.get(str(data.get("step_id")))
            if step is not None and data.get("title"):
                step.note = str(data["title"])
        elif name == "message:before":
            phase = data.get("phase")
            if phase == "synthesis":
                self.phase = "synthesizing"
            elif phase in ("planning", "replan") and self.phase != "executing":
                self.phase = "planning"
        elif name == "message:after":
            self.llm_calls += 1
        elif (
            name == "chunk:after"
            and data.get("phase") == "synthesis"
            and isinstance(data.get("chunk"), str)
        ):
            self.answer_chunks.append(data["chunk"])
        elif name == "resumed":
            self._resumed(data, event.timestamp)
        elif name == "session:end":
            self._take_response(data)

    def set_plan(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        for step in plan.get("steps") or []:
            view = self.steps.setdefault(str(step.get("id")), StepView())
            view.tool = step.get("tool")

    def reset_for_resume(self) -> None:
        self.response = None
        self.finished = False
        self.answer_chunks = []
        self.phase = "executing"

    def _step_status(self, data: dict[str, Any], at: datetime) -> None:
        step_id = str(data.get("step_id"))
        step = self.steps.setdefault(step_id, StepView())
        status = str(data.get("status") or step.status)
        if data.get("tool"):
            step.tool = data["tool"]
        if data.get("attempt"):
            step.attempt = int(data["attempt"])
        if status == "in_progress" and step.status != "in_progress":
            step.started_at = at
            step.ended_at = None
        elif status in _STATUS_STYLE and status not in ("pending", "in_progress"):
            step.ended_at = at
        step.status = status
        step.reason = data.get("reason") or step.reason

    def _resumed(self, data: Mapping[str, object], at: datetime) -> None:
        """A decision completes (approved) or fails (rejected) the waiting step."""
        step = self.steps.get(str(data.get("step_id")))
        decision = data.get("decision") or {}
        if step is None or not isinstance(decision, dict):
            return
        step.status = "completed" if decision.get("approved") else "failed"
        step.ended_at = at
        step.started_at = None  # the wait for a human is not the step's run time
        verdict = "approved" if decision.get("approved") else "rejected"
        reason = decision.get("reason")
        step.note = None
        step.reason = f"{verdict}: {reason}" if reason else verdict

    def _take_response(self, data: Mapping[str, object]) -> None:
        from art.responses import AgentFinalResponse

        payload = data.get("response")
        if isinstance(payload, AgentFinalResponse):
            self.response = payload
        elif isinstance(payload, dict):
            self.response = AgentFinalResponse.model_validate(payload)

    # -- rendering ----------------------------------------------------------------
    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.spinner import Spinner
        from rich.text import Text

        parts: list[RenderableType] = []
        if self.plan is None:
            if not self.finished and self.phase == "planning":
                if self._spinner is None:
                    self._spinner = Spinner("dots", text=Text("Planning…", style="bold"))
                parts.append(self._spinner)
        else:
            parts.append(plan_tree(self.plan, self.steps, live=not self.finished, full=self.full))
        if not self.finished and self.phase == "synthesizing":
            preview = "".join(self.answer_chunks).strip().splitlines()[-3:]
            text = Text("Writing the answer…", style="bold")
            if preview:
                text.append("\n" + "\n".join(preview), style="dim")
            parts.append(Spinner("dots", text=text))
        return Group(*parts)


def plan_tree(
    plan: Mapping[str, object],
    steps: dict[str, StepView],
    *,
    live: bool = False,
    show_status: bool = True,
    full: bool = False,
) -> Tree:
    """The plan as a rich Tree: one node per step with its tool, arguments and dependencies
    (references included), and, with `show_status`, its status and duration. Arguments
    and descriptions are cut to one short line unless `full`."""
    from rich.spinner import Spinner
    from rich.text import Text
    from rich.tree import Tree

    from art.planning.plans import Plan

    parsed = Plan.model_validate(plan)
    title = parsed.title or parsed.intent
    heading = (
        Text.assemble(("Plan: ", "bold"), (title, "bold cyan")) if title else Text("Plan", "bold")
    )
    root = Tree(heading, guide_style="dim")
    if not parsed.steps:
        root.add(Text("no steps: the answer comes straight from the model", style="dim"))
    for step in parsed.steps:
        state = steps.get(step.id) or StepView(tool=step.tool)
        label = Text()
        label.append(f"{step.id} ", style="bold")
        label.append(step.tool or "reasoning", style="cyan" if step.tool else "blue italic")
        if step.args:
            label.append("  " + (compact(step.args, None) if full else compact(step.args, 60)))
        depends = sorted(step.all_dependencies)
        if depends:
            label.append("  ← " + ", ".join(depends), style="dim")
        if show_status:
            label.append("  ")
            label.append_text(_status_label(state))
        if show_status and state.status == "in_progress" and live:
            if state.spinner is None:
                state.spinner = Spinner("dots", style="yellow")
            state.spinner.update(text=label)
            node = root.add(state.spinner)
        elif show_status:
            glyph, style = _STATUS_STYLE.get(state.status, ("?", "default"))
            node = root.add(Text.assemble((glyph + " ", style), label))
        else:
            node = root.add(label)
        if step.description:
            description = step.description if full else one_line(step.description, 100)
            node.add(Text(description, style="dim"))
        if show_status and state.note and state.status == "in_progress":
            node.add(Text(one_line(state.note, 100), style="yellow"))
    return root


def _status_label(state: StepView) -> Text:
    from rich.text import Text

    _, style = _STATUS_STYLE.get(state.status, ("?", "default"))
    text = Text("running" if state.status == "in_progress" else state.status, style=style)
    if state.status == "waiting":
        text.append(" for approval", style=style)
    elif state.status == "in_progress":
        if state.started_at is not None:
            text.append(f" {format_duration(datetime.now(UTC) - state.started_at)}", style="dim")
    elif state.started_at is not None and state.ended_at is not None:
        text.append(f" {format_duration(state.ended_at - state.started_at)}", style="dim")
    if state.attempt > 1:
        text.append(f" (attempt {state.attempt})", style="dim")
    if state.reason and state.status in ("completed", "failed", "skipped", "cancelled"):
        separator = " · " if state.status == "completed" else ": "
        text.append(separator + one_line(state.reason, 80), style=style)
    return text


def summary_line(response: AgentFinalResponse, thread_id: str) -> Text:
    """One line: status, LLM calls, tool calls, tokens, cost, time and the thread."""
    from rich.text import Text

    meta = response.metadata
    status_style = RUN_STATUS_STYLE.get(meta.status, "default")
    cost = f"${meta.llm_cost:.4f}" if meta.llm_cost is not None else "cost n/a"
    parts = [
        f"{meta.llm_calls} LLM call{'s' if meta.llm_calls != 1 else ''}",
        f"{meta.tool_calls} tool call{'s' if meta.tool_calls != 1 else ''}",
        f"{meta.usage.total_tokens:,} tokens",
        cost,
        format_seconds(meta.total_duration_ms / 1000.0),
        f"thread {thread_id}",
    ]
    return Text.assemble((meta.status, f"bold {status_style}"), ("  " + " · ".join(parts), "dim"))


def display_panel(tool_name: str, step_id: str, output: object) -> RenderableType:
    """A display tool's output: markdown, a table (rows of dicts or lists), or JSON."""
    from rich.panel import Panel

    title = output.get("title") if isinstance(output, dict) else None
    heading = f"{title} · {tool_name} {step_id}" if title else f"{tool_name} · {step_id}"
    return Panel(_display_body(output), title=escape(heading), expand=False, border_style="cyan")


def _display_body(output: object) -> RenderableType:
    from rich.json import JSON
    from rich.table import Table
    from rich.text import Text

    if isinstance(output, dict):
        kind = output.get("kind") or output.get("type")
        if kind == "markdown" or ("markdown" in output and isinstance(output["markdown"], str)):
            from rich.markdown import Markdown

            return Markdown(str(output.get("markdown") or output.get("content") or ""))
        rows = output.get("rows")
        if kind == "table" or isinstance(rows, list):
            columns = output.get("columns") or (
                list(rows[0]) if rows and isinstance(rows[0], dict) else []
            )
            table = Table(header_style="bold")
            for column in columns:
                table.add_column(str(column))
            for row in rows or []:
                cells = [row.get(c) for c in columns] if isinstance(row, dict) else list(row)
                table.add_row(*("" if c is None else str(c) for c in cells))
            return table
    if isinstance(output, str):
        return Text(output)
    if isinstance(output, bytes):
        return Text(_shown(output))
    return JSON(json.dumps(output, default=_shown))


def _shown(value: object) -> str:
    """How a value JSON has no form for is shown: bytes described, the rest as text."""
    from art.core.binary import describe_bytes

    return describe_bytes(value) if isinstance(value, bytes) else str(value)


def binary_lines(steps: Iterable[StepRecord]) -> list[str]:
    """A line per completed step's binary output and per attachment (what `art run` lists
    under the answer)."""
    from art.core.binary import describe_attachments, describe_bytes, has_bytes
    from art.core.serialization import safe_stringify

    lines = []
    for record in steps:
        result = record.result
        if record.status != "completed" or result is None:
            continue
        where = f"{record.step_id} ({record.tool or 'reasoning'})"
        if isinstance(result.output, bytes):
            lines.append(f"{where} output: {describe_bytes(result.output)}")
        elif has_bytes(result.output):
            lines.append(f"{where} output: {safe_stringify(result.output, max_length=200)}")
        lines.extend(f"{where} {line}" for line in describe_attachments(result.metadata))
    return lines


def timeline(thread_id: str, runs: list[RunRecord], events: list[StoredEvent]) -> RenderableType:
    """A thread's runs and stored events as a table, indented by span depth."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    header = Table(box=None, header_style="bold", title=f"thread {thread_id}", title_justify="left")
    for column in ("run", "status", "started", "query"):
        header.add_column(column)
    for run in runs:
        header.add_row(
            run.run_id[:12],
            status_text(_run_status(run.status) or "-"),
            format_when(run.created_at),
            one_line(run.query, 70),
        )

    depth: dict[str, int] = {}
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("time", justify="right", style="dim")
    table.add_column("event")
    table.add_column("details", overflow="fold")
    start = events[0].timestamp if events else None
    for event in events:
        if event.span_id:
            depth[event.span_id] = depth.get(event.parent_span_id or "", -1) + 1
        indent = "  " * depth.get(event.span_id or "", 0)
        offset = format_seconds((event.timestamp - start).total_seconds()) if start else ""
        name_style = "red" if event.name == "error" else "cyan"
        table.add_row(
            "+" + offset, Text(indent + event.name, style=name_style), _event_details(event)
        )
    return Group(header, Text(""), table)


def _event_details(event: StoredEvent) -> Text:
    from rich.text import Text

    data = event.data or {}
    name = event.name
    if name == "step:status":
        text = f"{data.get('step_id')} {data.get('tool') or 'reasoning'} → {data.get('status')}"
        if data.get("reason"):
            text += f": {data['reason']}"
    elif name == "tool:update":
        text = f"{data.get('step_id')} {data.get('tool')} {data.get('stage')}"
        if data.get("title"):
            text += f": {data['title']}"
    elif name in ("message:before", "message:after"):
        text = f"{data.get('phase')} {data.get('model') or ''}".strip()
        usage = data.get("usage") or {}
        if name == "message:after" and usage:
            text += f" · {usage.get('total_tokens', usage.get('totalTokens', 0))} tokens"
    elif name in ("plan:created", "plan:updated"):
        plan = data.get("plan") or {}
        text = f"{plan.get('title') or ''} ({len(plan.get('steps') or [])} steps)"
    elif name == "session:start":
        text = one_line(str(data.get("query") or ""), 80)
    elif name == "session:end":
        text = str(data.get("status") or (data.get("metadata") or {}).get("status") or "")
    elif name == "suspended":
        text = ", ".join(
            f"{s.get('step_id')} {s.get('tool')} ({s.get('suspension_id')})"
            for s in data.get("steps") or []
            if isinstance(s, dict)
        )
    elif name == "resumed":
        decision = data.get("decision") or {}
        verdict = "approved" if decision.get("approved") else "rejected"
        text = f"{data.get('step_id')} {data.get('tool') or ''} {verdict}"
        if decision.get("reason"):
            text += f": {decision['reason']}"
    elif name == "error":
        text = f"{data.get('code') or data.get('error_type') or ''} {data.get('message') or ''}"
    else:
        text = compact({k: v for k, v in data.items() if k != "messages"}, 100)
    return Text(one_line(text, 160))


# -- small helpers ----------------------------------------------------------------------
def _wire_with_dependencies(plan: Plan) -> JsonObject:
    """The plan's wire form with each step's `dependsOn` listing the steps its references
    imply too, as the tree, Mermaid and snapshots show them (it reads back the same DAG)."""
    wire = plan.to_wire()
    for step, shown in zip(plan.steps, wire["steps"], strict=True):
        shown["dependsOn"] = step.all_dependencies
    return wire


# A stored run's status in the words a response uses (`success`, `error`).
_RUN_STATUS_WORDS = {"completed": "success", "failed": "error"}


def _run_status(status: str | None) -> str | None:
    return _RUN_STATUS_WORDS.get(status or "", status)


def _prompt_text(suspension: _Pending) -> str:
    prompt = suspension.get("prompt")
    if isinstance(prompt, dict):
        prompt = prompt.get("question") or prompt.get("prompt") or prompt.get("message") or prompt
    if prompt is None:
        return "(no question given)"
    return escape(prompt if isinstance(prompt, str) else compact(prompt, 300))
