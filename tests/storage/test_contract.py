"""The StorageAdapter contract, run on every adapter (memory, sqlite, sqlite with
synchronous=full, postgres)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from art.core.redaction import secrets_in_use
from art.core.usage import TokenUsage
from art.errors import RunErrorCode, SuspensionError, ThreadBusyError
from art.planning.plans import Plan
from art.responses import ConversationMessage, MessageMetadata, RunError, Source, StepRecord
from art.storage.contract import (
    EventSnapshot,
    RunRecord,
    StepSnapshot,
    StorageAdapter,
    StoredEvent,
    Suspension,
    ThreadQuery,
)
from art.tooling.contract import ToolResult

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def make_run(thread_id: str, query: str = "what is 17*23?", **fields: object) -> RunRecord:
    return RunRecord(
        run_id=new_id(),
        thread_id=thread_id,
        trace_id=uuid.uuid4().hex,
        query=query,
        **fields,
    )


def make_plan() -> Plan:
    return Plan.model_validate(
        {
            "intent": "multiply then add",
            "title": "Arithmetic",
            "steps": [
                {"id": "s1", "description": "multiply", "tool": "calculator",
                 "args": {"expression": "17*23"}},
                {"id": "s2", "description": "add", "tool": "calculator",
                 "args": {"expression": "{{s1.output}} + 12"}, "dependsOn": ["s1"]},
            ],
        }
    )  # fmt: skip


def completed_step(step_id: str, output: object) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        tool="calculator",
        status="completed",
        attempts=1,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=1),
        args={"expression": "17*23"},
        result=ToolResult(
            call_id=f"call-{step_id}",
            tool_name="calculator",
            status="success",
            output=output,
            metadata={"unit": "none"},
        ),
    )


# -- runs -------------------------------------------------------------------------------


async def test_run_round_trips_every_field(storage: StorageAdapter) -> None:
    run = make_run(
        "t-round",
        status="partial",
        user_id="u1",
        session_id="sess",
        plan=make_plan(),
        replans=1,
        steps={"s1": completed_step("s1", {"value": 391, "parts": [17, 23]})},
        llm_calls=2,
        tool_calls=1,
        usage=TokenUsage(prompt_tokens=10, completion_tokens=5, total_tokens=15),
        llm_cost=0.25,
        error=RunError(code="STEP_FAILED", message="s2 failed", problems=["boom"]),
        answer="391",
        version=3,
    )
    await storage.create_run(run)

    loaded = await storage.get_run(run.run_id)

    assert loaded is not None
    assert loaded.model_dump() == run.model_dump()
    assert loaded.steps["s1"].output == {"value": 391, "parts": [17, 23]}
    assert loaded.plan is not None and loaded.plan.steps[1].depends_on == ["s1"]


async def test_unknown_run_is_none_and_duplicate_run_is_refused(storage: StorageAdapter) -> None:
    run = make_run("t-dup")
    await storage.create_run(run)

    assert await storage.get_run("no-such-run") is None
    with pytest.raises(ValueError, match="already exists"):
        await storage.create_run(run)


async def test_active_run_is_the_newest_running_or_suspended(storage: StorageAdapter) -> None:
    assert await storage.get_active_run("t-active") is None
    older = make_run("t-active", "first", status="suspended")
    newer = make_run("t-active", "second", status="running")
    done = make_run("t-active", "third", status="completed")
    other_thread = make_run("t-other", "elsewhere", status="running")
    for run in (older, newer, done, other_thread):
        await storage.create_run(run)

    active = await storage.get_active_run("t-active")
    assert active is not None and active.run_id == newer.run_id

    newer.status = "abandoned"
    await storage.update_run(newer)
    active = await storage.get_active_run("t-active")
    assert active is not None and active.run_id == older.run_id

    older.status = "completed"
    await storage.update_run(older)
    assert await storage.get_active_run("t-active") is None


async def test_list_runs_oldest_first_and_per_thread(storage: StorageAdapter) -> None:
    runs = [make_run("t-list", f"query {i}") for i in range(5)]
    for run in runs:
        await storage.create_run(run)
    await storage.create_run(make_run("t-list-other"))

    listed = await storage.list_runs("t-list")

    assert [r.run_id for r in listed] == [r.run_id for r in runs]
    assert await storage.list_runs("t-nobody") == []


async def test_update_run_stores_fields_but_never_steps(storage: StorageAdapter) -> None:
    run = make_run("t-update")
    await storage.create_run(run)
    await storage.save_step(run.run_id, completed_step("s1", 391))

    # The caller's copy has no steps, or a stale one: update_run must not touch them.
    run.status = "completed"
    run.plan = make_plan()
    run.answer = "the answer is 403"
    run.llm_calls = 2
    run.steps = {"s1": StepRecord(step_id="s1", status="pending"), "zz": StepRecord(step_id="zz")}
    await storage.update_run(run)

    loaded = await storage.get_run(run.run_id)
    assert loaded is not None
    assert (loaded.status, loaded.answer, loaded.llm_calls) == ("completed", run.answer, 2)
    assert loaded.plan == make_plan()
    assert list(loaded.steps) == ["s1"]
    assert loaded.steps["s1"].status == "completed" and loaded.steps["s1"].output == 391


async def test_writes_to_an_unknown_run_raise_key_error(storage: StorageAdapter) -> None:
    with pytest.raises(KeyError):
        await storage.update_run(make_run("t-ghost"))
    with pytest.raises(KeyError):
        await storage.save_step("no-such-run", completed_step("s1", 1))


async def test_save_step_upserts_and_keeps_first_position(storage: StorageAdapter) -> None:
    run = make_run("t-steps")
    await storage.create_run(run)
    for step_id in ("s2", "s10", "s1"):
        await storage.save_step(
            run.run_id, StepRecord(step_id=step_id, status="in_progress", attempts=1)
        )
    await storage.save_step(run.run_id, completed_step("s2", "two"))
    retried = StepRecord(step_id="s10", status="in_progress", attempts=2)
    await storage.save_step(run.run_id, retried)

    loaded = await storage.get_run(run.run_id)

    assert loaded is not None
    assert list(loaded.steps) == ["s2", "s10", "s1"]
    assert loaded.steps["s2"].status == "completed" and loaded.steps["s2"].output == "two"
    assert loaded.steps["s10"].attempts == 2
    assert loaded.steps["s1"].status == "in_progress"


async def test_stored_records_are_copies(storage: StorageAdapter) -> None:
    run = make_run("t-copies")
    await storage.create_run(run)
    step = completed_step("s1", {"items": [1, 2]})
    await storage.save_step(run.run_id, step)

    step.result.output["items"].append(3)  # type: ignore[union-attr]
    run.query = "changed after create"
    loaded = await storage.get_run(run.run_id)
    assert loaded is not None
    loaded.steps["s1"].result.output["items"].append(4)  # type: ignore[union-attr]

    again = await storage.get_run(run.run_id)
    assert again is not None
    assert again.query == "what is 17*23?"
    assert again.steps["s1"].output == {"items": [1, 2]}


async def test_a_started_step_reads_back_as_it_was_saved(storage: StorageAdapter) -> None:
    run = make_run("t-started")
    await storage.create_run(run)
    started = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    step = StepRecord(
        step_id="s1",
        tool="calculator",
        status="in_progress",
        attempts=1,
        started_at=started,
        args={"expression": "17*23", "tags": {"x"}},
    )
    await storage.save_step(run.run_id, step)
    # The engine replaces a record's values after saving it (it never edits them).
    step.status, step.attempts, step.args = "completed", 2, {"expression": "1+1"}

    loaded = await storage.get_run(run.run_id)

    assert loaded is not None
    read = loaded.steps["s1"]
    assert (read.status, read.attempts, read.started_at) == ("in_progress", 1, started)
    assert read.args == {"expression": "17*23", "tags": ["x"]}  # as JSON carries a set
    assert read.result is None and read.tool == "calculator"


async def test_outputs_json_cannot_carry_are_stored_as_text_and_bytes_as_bytes(
    storage: StorageAdapter,
) -> None:
    run = make_run("t-odd")
    await storage.create_run(run)
    png = b"\x89PNG\r\n\x1a\n\x00\xff"
    step = completed_step("s1", {"tags": {"b"}, "raw": b"bytes", "png": png, "obj": object()})
    attachment = {"name": "a.png", "media_type": "image/png", "data": png}
    step.result.metadata["attachments"] = [attachment]
    step.args = {"blob": png}
    await storage.save_step(run.run_id, step)

    loaded = await storage.get_run(run.run_id)
    assert loaded is not None
    read = loaded.steps["s1"]
    output = read.output
    assert output["tags"] == ["b"] and output["obj"].startswith("<object object")
    assert output["raw"] == b"bytes" and output["png"] == png  # bytes stay bytes
    assert read.result.metadata["attachments"][0]["data"] == png and read.args == {"blob": png}


# Made afresh for each test: the test edits them.
OUTPUTS = {
    "scalar": lambda: 42,
    "nested": lambda: {"items": [1, 2.5, "x", None, True], "deep": [[1], {"k": "v"}]},
    "large": lambda: [{"i": i, "text": "lorem " * 3} for i in range(400)],
    "tuple-and-int-key": lambda: {"pair": (1, 2), 3: "int key"},
    "datetime-and-nan": lambda: {"when": T0, "nan": float("nan")},
}


@pytest.mark.parametrize("kind", OUTPUTS)
async def test_a_saved_step_reads_back_as_its_json_at_save_time(
    storage: StorageAdapter, kind: str
) -> None:
    output = OUTPUTS[kind]()
    run = make_run("t-json")
    await storage.create_run(run)
    step = completed_step("s1", output)
    step.args = {"expression": "17*23", "inputs": [[1, 2], {"a": [3]}]}
    expected = StepRecord.model_validate_json(step.model_dump_json())
    await storage.save_step(run.run_id, step)

    # Edited in place after saving (a later tool given these by reference could do it).
    step.args["inputs"][0].append(99)  # type: ignore[index]
    step.result.metadata["unit"] = "changed"  # type: ignore[union-attr]
    if isinstance(output, dict):
        output["added"] = "later"
    loaded = await storage.get_run(run.run_id)

    assert loaded is not None
    read = loaded.steps["s1"]
    assert read.model_dump_json() == expected.model_dump_json()


def snapshot_of(record: StepRecord) -> StepSnapshot:
    return StepSnapshot(*(getattr(record, name) for name in StepSnapshot._fields))


@pytest.mark.parametrize("kind", OUTPUTS)
async def test_a_step_snapshot_reads_back_as_its_record_at_save_time(
    storage: StorageAdapter, kind: str
) -> None:
    output = OUTPUTS[kind]()
    run = make_run("t-snapshot")
    await storage.create_run(run)
    step = completed_step("s1", output)
    step.args = {"expression": "17*23", "inputs": [[1, 2], {"a": [3]}]}
    snapshot = snapshot_of(step)
    expected = StepRecord.model_validate_json(snapshot.record().model_dump_json())
    await storage.save_step_snapshot(run.run_id, snapshot)

    # The engine's objects, edited in place after the save by whoever else holds them.
    step.args["inputs"][0].append(99)  # type: ignore[index]
    step.result.metadata["unit"] = "changed"  # type: ignore[union-attr]
    step.result.output = "replaced"  # type: ignore[union-attr]
    if isinstance(output, dict):
        output["added"] = "later"
    loaded = await storage.get_run(run.run_id)

    assert loaded is not None
    read = loaded.steps["s1"]
    assert read.model_dump_json() == expected.model_dump_json()
    again = await storage.get_run(run.run_id)
    assert again is not None and again.steps["s1"] == read


async def test_a_step_snapshot_replaces_the_record_saved_before_it(storage: StorageAdapter) -> None:
    run = make_run("t-snapshot-replaces")
    await storage.create_run(run)
    started = StepRecord(step_id="s1", tool="calculator", status="in_progress", attempts=1)
    await storage.save_step_snapshot(run.run_id, snapshot_of(started))
    await storage.save_step(run.run_id, completed_step("s1", 391))
    await storage.save_step_snapshot(run.run_id, snapshot_of(completed_step("s2", 403)))

    loaded = await storage.get_run(run.run_id)

    assert loaded is not None
    assert {sid: (r.status, r.output) for sid, r in loaded.steps.items()} == {
        "s1": ("completed", 391),
        "s2": ("completed", 403),
    }


async def test_snapshots_saved_while_secrets_are_in_use_read_back_masked_later(
    storage: StorageAdapter,
) -> None:
    secret = "sk-test-abcdefghijklmnopqrstuvwxyz"
    run = make_run("t-snapshot-secrets")
    await storage.create_run(run)
    step = completed_step("s1", f"the key is {secret}")
    event = EventSnapshot(
        "t-snapshot-secrets", run.run_id, "step:status", {"output": secret}, None, None, None, T0
    )
    with secrets_in_use([secret]):
        await storage.save_step_snapshot(run.run_id, snapshot_of(step))
        await storage.append_event_snapshots([event])

    loaded = await storage.get_run(run.run_id)  # read where no secret is in use
    [stored] = await storage.query_events("t-snapshot-secrets")

    assert loaded is not None
    assert secret not in loaded.steps["s1"].model_dump_json()
    assert secret not in stored.model_dump_json() and "***" in stored.data["output"]


async def test_event_snapshots_read_back_as_their_stored_events(storage: StorageAdapter) -> None:
    snapshots = [
        EventSnapshot(
            "t-event-snapshots",
            "r1",
            name,
            {"i": i, "nested": {"items": [1, 2]}},
            "a" * 32,
            f"{i:016x}",
            "0" * 16 if i else None,
            T0 + timedelta(seconds=i),
        )
        for i, name in enumerate(["session:start", "step:status", "session:end"])
    ]
    expected = [snapshot.stored().model_dump() for snapshot in snapshots]
    await storage.append_event_snapshots(snapshots[:2])
    await storage.append_events([StoredEvent(thread_id="t-event-snapshots", name="error")])
    await storage.append_event_snapshots(snapshots[2:])

    read = await storage.query_events("t-event-snapshots")

    assert [e.name for e in read] == ["session:start", "step:status", "error", "session:end"]
    assert [e.model_dump(exclude={"seq"}) for e in (*read[:2], read[3])] == [
        {k: v for k, v in e.items() if k != "seq"} for e in expected
    ]
    seqs = [e.seq for e in read]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert [e.name for e in await storage.query_events("t-event-snapshots", after_seq=seqs[1])] == [
        "error",
        "session:end",
    ]


# -- suspensions ------------------------------------------------------------------------


def make_suspension(thread_id: str, run_id: str, step_id: str = "s2") -> Suspension:
    return Suspension(
        suspension_id=new_id(),
        thread_id=thread_id,
        run_id=run_id,
        step_id=step_id,
        tool_name="ask_human",
        call_id=f"call-{step_id}",
        args={"question": "Send the email?"},
        prompt={"question": "Send the email?", "options": ["yes", "no"]},
        created_at=T0,
    )


async def test_suspension_round_trip_and_decision(storage: StorageAdapter) -> None:
    run = make_run("t-susp", status="suspended")
    await storage.create_run(run)
    first = make_suspension("t-susp", run.run_id, "s2")
    second = make_suspension("t-susp", run.run_id, "s3")
    await storage.add_suspension(first)
    await storage.add_suspension(second)

    pending = await storage.list_suspensions("t-susp")
    assert [s.model_dump() for s in pending] == [first.model_dump(), second.model_dump()]

    decided = await storage.decide_suspension(
        "t-susp", first.suspension_id, {"approved": True, "note": "go"}
    )
    assert decided.decision == {"approved": True, "note": "go"}
    assert decided.decided_at is not None and not decided.pending

    assert [s.suspension_id for s in await storage.list_suspensions("t-susp")] == [
        second.suspension_id
    ]
    everything = await storage.list_suspensions("t-susp", pending_only=False)
    assert [s.suspension_id for s in everything] == [first.suspension_id, second.suspension_id]
    assert everything[0].decision == {"approved": True, "note": "go"}
    assert everything[0].decided_at == decided.decided_at
    assert await storage.list_suspensions("t-nobody") == []


async def test_decide_unknown_or_twice_raises_with_codes(storage: StorageAdapter) -> None:
    run = make_run("t-decide")
    await storage.create_run(run)
    suspension = make_suspension("t-decide", run.run_id)
    await storage.add_suspension(suspension)

    with pytest.raises(SuspensionError) as unknown:
        await storage.decide_suspension("t-decide", "nope", {"approved": True})
    assert unknown.value.code == RunErrorCode.SUSPENSION_NOT_FOUND
    with pytest.raises(SuspensionError) as wrong_thread:
        await storage.decide_suspension("t-else", suspension.suspension_id, {})
    assert wrong_thread.value.code == RunErrorCode.SUSPENSION_NOT_FOUND

    await storage.decide_suspension("t-decide", suspension.suspension_id, {"approved": False})
    with pytest.raises(SuspensionError) as twice:
        await storage.decide_suspension("t-decide", suspension.suspension_id, {"approved": True})
    assert twice.value.code == RunErrorCode.SUSPENSION_ALREADY_DECIDED
    (stored,) = await storage.list_suspensions("t-decide", pending_only=False)
    assert stored.decision == {"approved": False}


async def test_concurrent_decisions_exactly_one_wins(storage: StorageAdapter) -> None:
    run = make_run("t-race")
    await storage.create_run(run)
    suspensions = [make_suspension("t-race", run.run_id, f"s{i}") for i in range(5)]
    for suspension in suspensions:
        await storage.add_suspension(suspension)

    for suspension in suspensions:
        outcomes = await asyncio.gather(
            storage.decide_suspension("t-race", suspension.suspension_id, {"by": "a"}),
            storage.decide_suspension("t-race", suspension.suspension_id, {"by": "b"}),
            return_exceptions=True,
        )
        winners = [o for o in outcomes if isinstance(o, Suspension)]
        losers = [o for o in outcomes if isinstance(o, SuspensionError)]
        assert len(winners) == 1 and len(losers) == 1, outcomes
        assert losers[0].code == RunErrorCode.SUSPENSION_ALREADY_DECIDED
        (stored,) = [
            s
            for s in await storage.list_suspensions("t-race", pending_only=False)
            if s.suspension_id == suspension.suspension_id
        ]
        assert stored.decision == winners[0].decision


async def test_concurrent_decisions_from_two_instances(durable_factory) -> None:
    first, second = await durable_factory(), await durable_factory()
    run = make_run("t-race2")
    await first.create_run(run)
    suspensions = [make_suspension("t-race2", run.run_id, f"s{i}") for i in range(10)]
    for suspension in suspensions:
        await first.add_suspension(suspension)

    outcomes = await asyncio.gather(
        *(
            storage.decide_suspension("t-race2", s.suspension_id, {"by": who})
            for s in suspensions
            for storage, who in ((first, "first"), (second, "second"))
        ),
        return_exceptions=True,
    )

    for pair in zip(outcomes[::2], outcomes[1::2], strict=True):
        kinds = sorted(type(o).__name__ for o in pair)
        assert kinds == ["Suspension", "SuspensionError"], pair


# -- conversation -----------------------------------------------------------------------


async def test_finish_run_stores_the_end_and_the_exchange_together(
    storage: StorageAdapter,
) -> None:
    run = make_run("t-finish")
    await storage.create_run(run)
    run.status, run.answer = "completed", "391"
    exchange = [
        ConversationMessage(thread_id="t-finish", role="user", content=run.query),
        ConversationMessage(thread_id="t-finish", role="assistant", content="391"),
    ]
    await storage.finish_run(run, exchange)

    stored = await storage.get_run(run.run_id)
    assert stored is not None and (stored.status, stored.answer) == ("completed", "391")
    assert await storage.get_active_run("t-finish") is None
    history = await storage.get_history("t-finish")
    assert [(m.role, m.content) for m in history] == [("user", run.query), ("assistant", "391")]


async def test_finish_run_of_an_unknown_run_writes_nothing(storage: StorageAdapter) -> None:
    ghost = make_run("t-ghost")
    message = ConversationMessage(thread_id="t-ghost", role="user", content="lost?")
    with pytest.raises(KeyError):
        await storage.finish_run(ghost, [message])
    assert await storage.get_history("t-ghost") == []


async def test_finish_run_is_one_transaction_on_durable_storage(
    durable_factory, monkeypatch
) -> None:
    from art.adapters import postgres, sqlite

    storage = await durable_factory()
    run = make_run("t-atomic")
    await storage.create_run(run)
    await storage.append_message(
        ConversationMessage(thread_id="t-atomic", role="user", content="earlier")
    )

    # The second message's insert fails, after the run's update ran in the transaction.
    class DiskFull(Exception):
        pass

    def failing_second(insert):
        calls = []

        def wrapped(*args):
            calls.append(args)
            if len(calls) == 2:
                raise DiskFull
            return insert(*args)

        return wrapped

    # private: the fault is injected between the two writes of one transaction.
    if isinstance(storage, sqlite.SQLiteStorage):
        # private: as above
        monkeypatch.setattr(sqlite, "_message_insert", failing_second(sqlite._message_insert))
    else:
        assert isinstance(storage, postgres.PostgresStorage)
        insert = failing_second(postgres.PostgresStorage._insert_message)
        # private: as above
        monkeypatch.setattr(postgres.PostgresStorage, "_insert_message", staticmethod(insert))

    run.status = "completed"
    exchange = [
        ConversationMessage(thread_id="t-atomic", role=role, content=role)
        for role in ("user", "assistant")
    ]
    with pytest.raises(DiskFull):
        await storage.finish_run(run, exchange)

    stored = await storage.get_run(run.run_id)
    assert stored is not None and stored.status == "running"  # the update was rolled back
    assert [m.content for m in await storage.get_history("t-atomic")] == ["earlier"]


async def test_history_keeps_the_last_messages_oldest_first(storage: StorageAdapter) -> None:
    messages = [
        ConversationMessage(
            thread_id="t-hist",
            role="user" if i % 2 == 0 else "assistant",
            content=f"message {i}",
            timestamp=T0 + timedelta(minutes=i),
            metadata=MessageMetadata(
                sources=[Source(source_name="calc", url=None)], ui_metadata={"i": i}
            ),
        )
        for i in range(6)
    ]
    for message in messages:
        await storage.append_message(message)
    await storage.append_message(
        ConversationMessage(thread_id="t-hist-other", role="user", content="elsewhere")
    )

    assert [m.content for m in await storage.get_history("t-hist", limit=3)] == [
        "message 3",
        "message 4",
        "message 5",
    ]
    full = await storage.get_history("t-hist")
    assert [m.model_dump() for m in full] == [m.model_dump() for m in messages]
    assert await storage.get_history("t-hist", limit=0) == []
    assert await storage.get_history("t-nobody") == []


async def test_replace_history_makes_the_messages_the_whole_history(
    storage: StorageAdapter,
) -> None:
    for i in range(3):
        await storage.append_message(
            ConversationMessage(thread_id="t-load", role="user", content=f"old {i}")
        )
    await storage.append_message(
        ConversationMessage(thread_id="t-load-other", role="user", content="elsewhere")
    )
    run = make_run("t-load")
    await storage.create_run(run)
    loaded = [
        ConversationMessage(thread_id="t-load", role="user", content="new question"),
        ConversationMessage(thread_id="t-load", role="assistant", content="new answer"),
    ]

    await storage.replace_history("t-load", loaded)
    assert [m.model_dump() for m in await storage.get_history("t-load")] == [
        m.model_dump() for m in loaded
    ]
    await storage.replace_history("t-load", [])
    assert await storage.get_history("t-load") == []
    # Only the history went: the thread's runs and the other thread's history stay.
    assert [r.run_id for r in await storage.list_runs("t-load")] == [run.run_id]
    assert [m.content for m in await storage.get_history("t-load-other")] == ["elsewhere"]


async def test_delete_run_removes_that_run_only(storage: StorageAdapter) -> None:
    runs = []
    for n in range(2):
        run = make_run("t-runs", f"question {n}", steps={"s1": completed_step("s1", n)})
        await storage.create_run(run)
        await storage.add_suspension(
            Suspension(
                suspension_id=new_id(),
                thread_id="t-runs",
                run_id=run.run_id,
                step_id="s3",
                tool_name="ask_human",
                call_id=f"c{n}",
            )
        )
        await storage.append_events(
            [StoredEvent(thread_id="t-runs", run_id=run.run_id, name="session:start")]
        )
        runs.append(run)
    await storage.append_message(ConversationMessage(thread_id="t-runs", role="user", content="hi"))

    assert await storage.delete_run(runs[1].run_id) is True
    assert await storage.delete_run(runs[1].run_id) is False

    assert [r.run_id for r in await storage.list_runs("t-runs")] == [runs[0].run_id]
    assert await storage.get_run(runs[1].run_id) is None
    kept = await storage.get_run(runs[0].run_id)
    assert kept is not None and set(kept.steps) == {"s1"}
    assert [s.run_id for s in await storage.list_suspensions("t-runs")] == [runs[0].run_id]
    assert [e.run_id for e in await storage.query_events("t-runs")] == [runs[0].run_id]
    assert len(await storage.get_history("t-runs")) == 1


async def test_delete_thread_removes_everything_of_that_thread_only(
    storage: StorageAdapter,
) -> None:
    for thread_id in ("t-gone", "t-kept"):
        run = make_run(thread_id, steps={"s1": completed_step("s1", 391)})
        await storage.create_run(run)
        await storage.save_step(run.run_id, completed_step("s2", 403))
        await storage.add_suspension(
            Suspension(
                suspension_id=new_id(),
                thread_id=thread_id,
                run_id=run.run_id,
                step_id="s3",
                tool_name="ask_human",
                call_id="c3",
            )
        )
        await storage.append_message(
            ConversationMessage(thread_id=thread_id, role="user", content="hi")
        )
        await storage.append_events(
            [StoredEvent(thread_id=thread_id, run_id=run.run_id, name="session:start")]
        )
    gone = (await storage.list_runs("t-gone"))[0]

    assert await storage.delete_thread("t-gone") is True

    assert await storage.list_runs("t-gone") == []
    assert await storage.get_run(gone.run_id) is None
    assert await storage.get_active_run("t-gone") is None
    assert await storage.list_suspensions("t-gone", pending_only=False) == []
    assert await storage.get_history("t-gone") == []
    assert await storage.query_events("t-gone") == []
    assert "t-gone" not in [t.thread_id for t in await storage.list_threads()]
    kept = (await storage.list_runs("t-kept"))[0]
    assert set(kept.steps) == {"s1", "s2"}
    assert len(await storage.list_suspensions("t-kept")) == 1
    assert len(await storage.get_history("t-kept")) == 1
    assert len(await storage.query_events("t-kept")) == 1
    assert await storage.delete_thread("t-gone") is False
    assert await storage.delete_thread("t-never") is False


# -- events -----------------------------------------------------------------------------


async def test_event_log_queries_by_name_time_and_limit(storage: StorageAdapter) -> None:
    names = ["session:start", "plan:created", "tool:before", "tool:after", "session:end"]
    events = [
        StoredEvent(
            thread_id="t-events",
            run_id="r1",
            name=name,
            data={"i": i, "nested": {"ok": True}},
            trace_id="a" * 32,
            span_id=f"{i:016x}",
            parent_span_id="0" * 16 if i else None,
            timestamp=T0 + timedelta(seconds=i),
        )
        for i, name in enumerate(names)
    ]
    await storage.append_events(events[:2])
    await storage.append_events([StoredEvent(thread_id="t-events-other", name="session:start")])
    await storage.append_events(events[2:])
    await storage.append_events([])

    everything = await storage.query_events("t-events")
    assert [e.name for e in everything] == names
    seqs = [e.seq for e in everything]
    assert all(isinstance(s, int) for s in seqs) and seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert everything[3].model_dump(exclude={"seq"}) == events[3].model_dump(exclude={"seq"})

    tools = await storage.query_events("t-events", names=["tool:before", "tool:after"])
    assert [e.data["i"] for e in tools] == [2, 3]
    window = await storage.query_events(
        "t-events", since=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=3)
    )
    assert [e.data["i"] for e in window] == [1, 2]  # since inclusive, until exclusive
    naive_since = (T0 + timedelta(seconds=4)).replace(tzinfo=None)  # naive means UTC
    assert [e.name for e in await storage.query_events("t-events", since=naive_since)] == [
        "session:end"
    ]
    assert [e.name for e in await storage.query_events("t-events", limit=2)] == names[:2]
    assert await storage.query_events("t-events", names=[]) == []
    assert await storage.query_events("t-nobody") == []

    # What a reader that has seen up to seqs[1] is missing (a reconnecting event stream).
    missed = await storage.query_events("t-events", after_seq=seqs[1])
    assert [e.name for e in missed] == names[2:]
    assert await storage.query_events("t-events", after_seq=seqs[-1]) == []
    assert [e.name for e in await storage.query_events("t-events", after_seq=seqs[1], limit=1)] == [
        names[2]
    ]


async def test_event_times_compare_as_instants_whatever_their_zone(
    storage: StorageAdapter,
) -> None:
    plus_two = timezone(timedelta(hours=2))
    moments = [
        T0,
        (T0 + timedelta(seconds=1)).astimezone(plus_two),  # 14:00:01+02:00
        (T0 + timedelta(seconds=2)).replace(tzinfo=None),  # naive means UTC
    ]
    await storage.append_events(
        [
            StoredEvent(thread_id="t-zones", name=name, timestamp=moment)
            for name, moment in zip("abc", moments, strict=True)
        ]
    )

    async def names(**window: datetime) -> list[str]:
        return [e.name for e in await storage.query_events("t-zones", **window)]

    assert await names(since=moments[1]) == ["b", "c"]
    assert await names(since=T0 + timedelta(seconds=1, microseconds=1)) == ["c"]
    assert await names(until=(T0 + timedelta(seconds=2)).replace(tzinfo=None)) == ["a", "b"]
    assert await names(since=T0.astimezone(plus_two), until=moments[1]) == ["a"]


# -- threads ----------------------------------------------------------------------------


async def test_list_threads_most_recently_updated_first(storage: StorageAdapter) -> None:
    first = make_run("t-a", "first question")
    await storage.create_run(first)
    await storage.create_run(make_run("t-b", "b question", status="completed"))
    await storage.append_message(ConversationMessage(thread_id="t-c", role="user", content="hi"))
    later = make_run("t-a", "second question")
    await storage.create_run(later)
    await storage.create_run(make_run("t-d", "d question"))
    first.status = "abandoned"
    await storage.update_run(first)  # t-a is now the most recently updated

    threads = await storage.list_threads()

    assert [t.thread_id for t in threads] == ["t-a", "t-d", "t-c", "t-b"]
    by_id = {t.thread_id: t for t in threads}
    assert (by_id["t-a"].runs, by_id["t-a"].last_query, by_id["t-a"].last_status) == (
        2,
        "second question",
        "running",
    )
    assert (by_id["t-c"].runs, by_id["t-c"].last_query, by_id["t-c"].last_status) == (
        0,
        None,
        None,
    )
    assert by_id["t-b"].last_status == "completed"
    assert all(t.updated_at is not None for t in threads)
    assert threads[0].updated_at >= threads[-1].updated_at  # type: ignore[operator]
    assert [t.thread_id for t in await storage.list_threads(limit=2)] == ["t-a", "t-d"]


async def test_a_claimed_thread_keeps_its_first_owner_and_metadata(
    storage: StorageAdapter,
) -> None:
    assert await storage.get_thread("t-owned") is None
    claimed = await storage.claim_thread("t-owned", "alice", {"project": "apollo", "n": 3})
    again = await storage.claim_thread("t-owned", "bob", {"project": "other"})
    await storage.create_run(make_run("t-owned", "a question"))

    stored = await storage.get_thread("t-owned")

    assert (claimed.owner, claimed.metadata, claimed.runs) == (
        "alice",
        {"project": "apollo", "n": 3},
        0,
    )
    assert (again.owner, again.metadata) == ("alice", {"project": "apollo", "n": 3})
    assert stored is not None
    assert (stored.owner, stored.metadata, stored.runs, stored.last_query) == (
        "alice",
        {"project": "apollo", "n": 3},
        1,
        "a question",
    )
    assert stored.created_at is not None
    # A thread that came to be through a run has no owner and no metadata.
    await storage.create_run(make_run("t-plain"))
    plain = await storage.get_thread("t-plain")
    assert plain is not None and (plain.owner, plain.metadata) == (None, {})


async def test_concurrent_claims_give_one_owner(storage: StorageAdapter) -> None:
    claims = await asyncio.gather(*(storage.claim_thread("t-race", f"user-{n}") for n in range(8)))
    assert len({claim.owner for claim in claims}) == 1


async def test_update_thread_merges_metadata_and_none_removes_a_key(
    storage: StorageAdapter,
) -> None:
    await storage.claim_thread("t-meta", None, {"a": 1, "b": "two", "nested": {"x": [1, 2]}})

    updated = await storage.update_thread("t-meta", {"b": None, "c": True})

    assert updated is not None
    assert updated.metadata == {"a": 1, "nested": {"x": [1, 2]}, "c": True}
    stored = await storage.get_thread("t-meta")
    assert stored is not None and stored.metadata == updated.metadata
    assert await storage.update_thread("t-nobody", {"a": 1}) is None


async def test_search_threads_filters_by_owner_metadata_and_status(
    storage: StorageAdapter,
) -> None:
    await storage.claim_thread("t-1", "alice", {"team": "red", "n": 1, "flag": True})
    await storage.claim_thread("t-2", "bob", {"team": "red", "n": 1.0, "flag": False})
    await storage.claim_thread("t-3", "alice", {"team": "blue", "n": "1", "gone": None})
    await storage.create_run(make_run("t-1", status="completed"))
    await storage.create_run(make_run("t-3", status="failed"))

    async def ids(**query: object) -> list[str]:
        page = await storage.search_threads(ThreadQuery.model_validate(query))
        return sorted(t.thread_id for t in page.threads)

    assert await ids(owner="alice") == ["t-1", "t-3"]
    assert await ids(metadata={"team": "red"}) == ["t-1", "t-2"]
    assert await ids(metadata={"team": "red"}, owner="bob") == ["t-2"]
    assert await ids(metadata={"n": 1}) == ["t-1", "t-2"]  # numbers equal by value
    assert await ids(metadata={"n": "1"}) == ["t-3"]  # a string is not a number
    assert await ids(metadata={"flag": True}) == ["t-1"]
    assert await ids(metadata={"flag": False}) == ["t-2"]
    assert await ids(metadata={"gone": None}) == ["t-3"]
    assert await ids(metadata={"missing": None}) == []
    assert await ids(status="failed") == ["t-3"]
    assert await ids(status="completed", owner="bob") == []


async def test_list_threads_is_not_bounded_by_a_search_page(storage: StorageAdapter) -> None:
    # A search page holds at most 500 threads; list_threads takes any limit.
    for n in range(502):
        await storage.claim_thread(f"t-many-{n}", None)

    assert len(await storage.list_threads(limit=600)) == 502
    assert await storage.list_threads(limit=0) == []


async def test_search_threads_pages_with_a_cursor(storage: StorageAdapter) -> None:
    for n in range(7):
        await storage.claim_thread(f"t-page-{n}", "carol")
    await storage.claim_thread("t-other", "dave")

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await storage.search_threads(ThreadQuery(owner="carol", limit=3, cursor=cursor))
        seen += [t.thread_id for t in page.threads]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor

    assert seen == [f"t-page-{n}" for n in reversed(range(7))]  # newest first, each once
    assert pages == 3
    with pytest.raises(ValueError, match="not a thread cursor"):
        await storage.search_threads(ThreadQuery(cursor="nope"))


# -- the lease --------------------------------------------------------------------------


async def test_lease_is_exclusive_per_thread_and_released(storage: StorageAdapter) -> None:
    async with storage.lease("t-lease"):
        with pytest.raises(ThreadBusyError) as busy:
            async with storage.lease("t-lease"):
                pytest.fail("a second holder entered the lease")
        assert busy.value.code == RunErrorCode.THREAD_BUSY
        assert busy.value.thread_id == "t-lease"
        async with storage.lease("t-lease-other"):  # other threads are independent
            pass

    async with storage.lease("t-lease"):  # released at the end of the block
        pass
    with pytest.raises(RuntimeError):
        async with storage.lease("t-lease"):
            raise RuntimeError("the run crashed")
    async with storage.lease("t-lease"):  # released when the block raised
        pass


async def test_lease_between_concurrent_coroutines(storage: StorageAdapter) -> None:
    entered: list[int] = []

    async def worker(i: int) -> str:
        try:
            async with storage.lease("t-contended"):
                entered.append(i)
                await asyncio.sleep(0.05)
                return "ran"
        except ThreadBusyError:
            return "busy"

    outcomes = await asyncio.gather(*(worker(i) for i in range(8)))

    assert sorted(outcomes) == ["busy"] * 7 + ["ran"]
    assert len(entered) == 1


async def test_lease_excludes_another_instance_on_the_same_database(durable_factory) -> None:
    first, second = await durable_factory(), await durable_factory()
    async with first.lease("t-two"):
        with pytest.raises(ThreadBusyError):
            async with second.lease("t-two"):
                pytest.fail("two instances held one thread")
    async with second.lease("t-two"):
        with pytest.raises(ThreadBusyError):
            async with first.lease("t-two"):
                pytest.fail("two instances held one thread")


# -- reopen -----------------------------------------------------------------------------


async def test_everything_survives_a_new_adapter_instance(durable_factory) -> None:
    writer = await durable_factory()
    run = make_run("t-reopen", plan=make_plan(), status="suspended")
    await writer.create_run(run)
    await writer.save_step(run.run_id, completed_step("s1", 391))
    suspension = make_suspension("t-reopen", run.run_id)
    await writer.add_suspension(suspension)
    await writer.append_message(
        ConversationMessage(thread_id="t-reopen", role="user", content="what is 17*23?")
    )
    await writer.append_events([StoredEvent(thread_id="t-reopen", name="suspended")])
    await writer.close()

    reader = await durable_factory()

    loaded = await reader.get_active_run("t-reopen")
    assert loaded is not None and loaded.run_id == run.run_id
    assert loaded.plan == run.plan and loaded.steps["s1"].output == 391
    (pending,) = await reader.list_suspensions("t-reopen")
    assert pending.suspension_id == suspension.suspension_id
    assert [m.content for m in await reader.get_history("t-reopen")] == ["what is 17*23?"]
    assert [e.name for e in await reader.query_events("t-reopen")] == ["suspended"]
    assert [t.thread_id for t in await reader.list_threads()] == ["t-reopen"]
    decided = await reader.decide_suspension("t-reopen", suspension.suspension_id, {"ok": 1})
    assert decided.decision == {"ok": 1}


async def test_open_and_close_are_idempotent(storage_factory) -> None:
    storage = await storage_factory()
    await storage.open()
    await storage.create_run(make_run("t-idem"))
    await storage.close()
    await storage.close()
