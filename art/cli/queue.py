"""The queue's commands: `art submit`, `art worker`, `art workers` (registered by art/cli/app.py).

Like the rest of the `art` command they use the public API and import the engine inside
the command, so `art --help` stays fast.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Annotated

import typer

from art.cli.checks import non_negative_seconds, positive_seconds
from art.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_SUSPENDED,
    EXIT_USAGE,
    CliError,
    JsonOption,
    ModelOption,
    NewThreadOption,
    Output,
    StorageOption,
    ToolsOption,
    build_instance,
    exit_with,
    format_seconds,
    format_when,
    guard,
    load_instance,
    status_text,
)

if TYPE_CHECKING:
    from art.config import QueueConfig
    from art.instance import ArtInstance
    from art.queue.backend import QueueWorker
    from art.queue.contract import QueueBackend
    from art.queue.jobs import QueuedRun, QueueStats
    from art.storage.contract import RunRecord

__all__ = ["register_queue_commands"]

QueueOption = Annotated[
    str | None,
    typer.Option(
        "--queue", "-q", metavar="NAME", help="The queue's name (default: art).", show_default=False
    ),
]

_EXIT_BY_STATUS = {"completed": EXIT_OK, "partial": EXIT_OK, "suspended": EXIT_SUSPENDED}


def submit(
    query: Annotated[str, typer.Argument(help="What to ask.", show_default=False, metavar="QUERY")],
    thread: NewThreadOption = None,
    storage: StorageOption = None,
    queue: QueueOption = None,
    user_id: Annotated[
        str | None, typer.Option("--user-id", metavar="ID", help="Recorded on the run.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Wait for the run's end and print it.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="S",
            help="With --wait: give up after S seconds.",
            callback=positive_seconds,
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Queue QUERY for a worker and print the run's id (with --wait, its end)."""

    out = Output(json=json_output)
    thread_id = thread or f"cli-{uuid.uuid4().hex[:8]}"
    options = {"user_id": user_id} if user_id else None

    async def do_submit() -> int:
        from art.queue.runs import RunQueue

        async with RunQueue(storage, _queue_config(queue)) as run_queue:
            handle = await run_queue.submit(query, thread_id, options)
            stats = await run_queue.stats()
            if not wait:
                _print_submitted(out, handle.id, thread_id, stats)
                return EXIT_OK
            if not out.json:
                out.errors.print(f"[dim]queued run {handle.id} on thread {thread_id}; waiting[/]")
            import asyncio

            try:
                async with asyncio.timeout(timeout):
                    record = await handle.result()
            except TimeoutError:
                raise CliError(
                    "TIMEOUT", f"run {handle.id} has not ended after {timeout} s"
                ) from None
        if out.json:
            out.emit_json(record.model_dump(mode="json"))
        else:
            _print_ended(out, record)
        return _EXIT_BY_STATUS.get(record.status, EXIT_ERROR)

    exit_with(guard(out, do_submit))


def worker(
    instance: Annotated[
        str | None,
        typer.Option(
            "--instance",
            "-i",
            metavar="MODULE:ATTR",
            help="Your application's ArtInstance (or a function returning one): its model, "
            "tools and storage. Instead of --model/--tools/--storage.",
            show_default=False,
        ),
    ] = None,
    model: ModelOption = None,
    storage: StorageOption = None,
    tools: ToolsOption = None,
    queue: QueueOption = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", metavar="N", min=1, help="Runs at a time (default 8)."),
    ] = None,
    heartbeat: Annotated[
        float | None,
        typer.Option(
            "--heartbeat",
            metavar="S",
            help="Heartbeat interval (default 2 s).",
            callback=positive_seconds,
        ),
    ] = None,
    stalled_after: Annotated[
        float | None,
        typer.Option(
            "--stalled-after",
            metavar="S",
            callback=positive_seconds,
            help="A worker silent this long is dead; its runs are taken over (default 10 s).",
        ),
    ] = None,
    shutdown_timeout: Annotated[
        float | None,
        typer.Option(
            "--shutdown-timeout",
            metavar="S",
            callback=non_negative_seconds,
            help="On SIGTERM, let running runs end for S seconds, then hand them back "
            "(default 30 s).",
        ),
    ] = None,
    max_worker_deaths: Annotated[
        int | None,
        typer.Option(
            "--max-worker-deaths",
            metavar="N",
            min=1,
            help="A run whose worker died running it alone N times is dead-lettered (default 3).",
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", metavar="NAME", help="Shown by `art workers`.")
    ] = None,
    schedule: Annotated[
        list[str] | None,
        typer.Option(
            "--schedule",
            metavar="CRON|THREAD|QUERY",
            help="Queue QUERY on THREAD at each time CRON names (UTC; five fields, or six "
            "with seconds last). Repeatable; workers with the same schedule queue each run "
            "once.",
        ),
    ] = None,
) -> None:
    """Run queued runs until stopped (SIGTERM / Ctrl-C: running runs end or go back)."""

    out = Output(json=False)
    changes = {
        "name": queue,
        "concurrency": concurrency,
        "heartbeat_s": heartbeat,
        "stalled_after_s": stalled_after,
        "shutdown_timeout_s": shutdown_timeout,
        "max_worker_deaths": max_worker_deaths,
    }

    async def serve() -> int:
        from art.queue.schedule import Schedule
        from art.queue.worker import run_worker

        schedules = [Schedule.parse(text) for text in schedule or []]
        if instance is not None:
            if model or storage or tools:
                raise CliError(
                    "CONFIG_ERROR",
                    "--instance brings its own model, tools and storage: leave out "
                    "--model, --tools and --storage",
                    EXIT_USAGE,
                )
            inst = load_instance(instance)
        else:
            inst = build_instance(model, storage, tools)
        inst.config.queue = _queue_config(None, base=inst.config.queue, **changes)
        async with inst:
            await run_worker(
                inst,
                name=name,
                started=lambda w: _announce(out, inst, w),
                schedules=schedules,
            )
        out.errors.print("[dim]worker stopped[/]")
        return EXIT_OK

    exit_with(guard(out, serve))


def workers(
    storage: StorageOption = None,
    queue: QueueOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show the queue: runs waiting and by state, and every worker with its heartbeat."""

    out = Output(json=json_output)

    async def show() -> int:
        from art.queue.runs import RunQueue

        async with RunQueue(storage, _queue_config(queue)) as run_queue:
            stats = await run_queue.stats()
            where = repr(run_queue.storage)
        if out.json:
            document = stats.model_dump(mode="json")
            document.update(queued=stats.queued, running=stats.running)
            out.emit_json(document)
        else:
            _print_stats(out, stats, where)
        return EXIT_OK

    exit_with(guard(out, show))


RunIdArgument = Annotated[
    str, typer.Argument(help="The run's id (as `art submit` printed it).", metavar="RUN")
]


def runs(
    storage: StorageOption = None,
    queue: QueueOption = None,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "-s",
            metavar="STATE",
            help="Only runs in STATE: queued, running, stuck (on a worker presumed dead, not "
            "yet taken over), dead (dead-lettered) or ended; repeat for several.",
            show_default=False,
        ),
    ] = None,
    thread: Annotated[
        str | None, typer.Option("--thread", "-t", metavar="THREAD", help="Only this thread.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most N runs.")] = 50,
    json_output: JsonOption = False,
) -> None:
    """List the queue's runs, newest first, with their attempts (worker, start, end, how
    each ended)."""

    out = Output(json=json_output)

    async def show() -> int:
        from art.queue.runs import RunQueue

        async with RunQueue(storage, _queue_config(queue)) as run_queue:
            found = await run_queue.runs(state, thread_id=thread, limit=limit)
        if out.json:
            out.emit_json({"runs": [run.model_dump(mode="json") for run in found]})
        else:
            _print_runs(out, found)
        return EXIT_OK

    exit_with(guard(out, show))


def cancel(
    run_id: RunIdArgument,
    storage: StorageOption = None,
    queue: QueueOption = None,
    json_output: JsonOption = False,
) -> None:
    """Cancel a queued run: taken out of the queue if waiting, stopped at its next step if
    running (it ends failed, CANCELLED). Exits 1 if it had already ended."""
    _act_on_run(run_id, storage, queue, json_output, "cancel")


def retry(
    run_id: RunIdArgument,
    storage: StorageOption = None,
    queue: QueueOption = None,
    json_output: JsonOption = False,
) -> None:
    """Put a dead-lettered run back in the queue (it runs alone, from its stored steps).
    Exits 1 if the run is not dead-lettered."""
    _act_on_run(run_id, storage, queue, json_output, "retry")


def discard(
    run_id: RunIdArgument,
    storage: StorageOption = None,
    queue: QueueOption = None,
    json_output: JsonOption = False,
) -> None:
    """Delete a dead-lettered run's job (the run stays failed in storage). Exits 1 if the
    run is not dead-lettered."""
    _act_on_run(run_id, storage, queue, json_output, "discard")


def register_queue_commands(app: typer.Typer) -> None:
    app.command()(submit)
    app.command()(worker)
    app.command()(workers)
    app.command()(runs)
    app.command()(cancel)
    app.command()(retry)
    app.command()(discard)


# -- helpers ----------------------------------------------------------------------------
def _queue_config(
    queue: str | None, *, base: QueueConfig | None = None, **changes: object
) -> QueueConfig:
    from pydantic import ValidationError

    from art.config import QueueConfig

    if queue:
        changes["name"] = queue
    updates = {key: value for key, value in changes.items() if value is not None}
    try:
        data = {**(base.model_dump() if base is not None else {}), **updates}
        return QueueConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise CliError("CONFIG_ERROR", f"bad queue option: {problems}", EXIT_USAGE) from None


def _announce(out: Output, inst: ArtInstance, queue_worker: QueueWorker[QueueBackend]) -> None:
    config = inst.config.queue
    out.errors.print(
        f"[bold]art worker[/] on {inst.storage!r}, queue [bold]{config.name}[/]: "
        f"{config.concurrency} runs at a time; a worker silent {config.stalled_after_s:g} s "
        f"is presumed dead and its runs taken over. SIGTERM or Ctrl-C stops it (running "
        f"runs get {config.shutdown_timeout_s:g} s, then go back to the queue)."
    )


def _print_submitted(out: Output, run_id: str, thread_id: str, stats: QueueStats) -> None:
    if out.json:
        out.emit_json(
            {"run_id": run_id, "thread_id": thread_id, "queue": stats.queue, "status": "queued"}
        )
        return
    alive = sum(1 for w in stats.workers if not w.stalled)
    out.console.print(f"queued run [bold]{run_id}[/] on thread [bold]{thread_id}[/]")
    note = f"{stats.queued} waiting in queue {stats.queue}, {alive} worker(s) alive"
    if not alive:
        note += "; start one with: art worker"
    out.console.print(f"[dim]{note}[/]")


def _print_ended(out: Output, record: RunRecord) -> None:

    if record.error is not None:
        out.errors.print(f"[red bold]error[/] [red]{record.error.code}[/]: {record.error.message}")
    elif record.answer:
        from rich.markdown import Markdown

        out.console.print(Markdown(record.answer))
    line = status_text(record.status)
    line.append(f"  run {record.run_id} · thread {record.thread_id}", style="dim")
    out.console.print(line)


def _print_stats(out: Output, stats: QueueStats, where: str) -> None:
    from rich.table import Table

    jobs = ", ".join(f"{count} {state}" for state, count in sorted(stats.jobs.items()))
    out.console.print(
        f"queue [bold]{stats.queue}[/] on {where}: [bold]{stats.queued}[/] waiting, "
        f"[bold]{stats.running}[/] running" + (f" ({jobs})" if jobs else " (no runs yet)")
    )
    if not stats.workers:
        out.console.print("[dim]No workers. Start one with [bold]art worker[/].[/]")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("worker", "name", "host", "pid", "running", "heartbeat", "state", "since"):
        table.add_column(column)
    for w in stats.workers:
        state = "[red]stalled[/]" if w.stalled else "[green]alive[/]"
        table.add_row(
            str(w.worker_id),
            w.name or "-",
            w.host or "-",
            str(w.pid or "-"),
            str(w.running),
            f"{format_seconds(w.heartbeat_age_s)} ago",
            state,
            format_when(w.started_at),
        )
    out.console.print(table)


_DONE = {"cancel": "cancelled", "retry": "back in the queue", "discard": "discarded"}
_NOT_DONE = {
    "cancel": "it had already ended",
    "retry": "it is not dead-lettered",
    "discard": "it is not dead-lettered",
}


def _act_on_run(
    run_id: str, storage: str | None, queue: str | None, json_output: bool, action: str
) -> None:

    out = Output(json=json_output)

    async def act() -> int:
        from art.queue.runs import RunQueue

        async with RunQueue(storage, _queue_config(queue)) as run_queue:
            if action == "cancel":
                try:
                    done = await (await run_queue.get(run_id)).acancel()
                except KeyError:
                    raise CliError("NOT_FOUND", f"no queued run {run_id!r}") from None
            elif action == "retry":
                done = await run_queue.retry(run_id)
            else:
                done = await run_queue.discard(run_id)
        if out.json:
            out.emit_json({"run_id": run_id, "action": action, "done": done})
        elif done:
            out.console.print(f"run [bold]{run_id}[/]: {_DONE[action]}")
        else:
            out.errors.print(f"run {run_id}: not {_DONE[action]}: {_NOT_DONE[action]}")
        return EXIT_OK if done else EXIT_ERROR

    exit_with(guard(out, act))


def _print_runs(out: Output, found: list[QueuedRun]) -> None:
    from rich.table import Table

    if not found:
        out.console.print("[dim]No runs.[/]")
        return
    colours = {"queued": "cyan", "running": "green", "stuck": "yellow", "dead": "red"}
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("run", "thread", "state", "worker", "attempts", "last attempt", "query"):
        table.add_column(column)
    for run in found:
        colour = colours.get(run.state, "dim")
        last = run.attempts[-1] if run.attempts else None
        ended = "-"
        if last is not None:
            how = last.outcome or "running"
            ended = f"{how} on {last.worker or last.worker_id}, {format_when(last.started_at)}"
        table.add_row(
            run.run_id,
            run.thread_id,
            f"[{colour}]{run.state}[/]",
            str(run.worker_id or "-"),
            str(len(run.attempts)),
            ended,
            run.query if len(run.query) <= 40 else run.query[:39] + "…",
        )
    out.console.print(table)
