"""Following a thread's stored events: what every live stream of the server reads.

A stream never reads events from memory: it reads the thread's event log after a cursor
(the last `seq` it sent, which is also the SSE event id), then waits until this process's
journal writes more or a poll interval passes (another process may have written). So a
live stream and a replay after `Last-Event-ID` are the same code, on any process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

from art.server.journal import EventJournal
from art.server.runs import ActiveRun
from art.storage.contract import StorageAdapter, StoredEvent

__all__ = ["EventFeed"]

# A stream reads this many stored events at a time: small enough that a replay (or one
# dropped after its first events) never holds the event loop for long.
_BATCH = 100


class EventFeed:
    """Reads threads' event logs after a cursor, waiting for more."""

    def __init__(
        self, storage: StorageAdapter, journal: EventJournal, poll_interval_s: float
    ) -> None:
        self.storage = storage
        self.journal = journal
        self.poll_interval_s = poll_interval_s

    async def follow(
        self, thread_id: str, after: int | None = None, *, since: datetime | None = None
    ) -> AsyncIterator[StoredEvent | None]:
        """The thread's events after `after` (a seq), or from `since` (a time), as they are
        stored, forever. Yields None after each poll interval that brought nothing, so the
        caller can decide to stop."""
        cursor = after
        while True:
            written = self.journal.waiter(thread_id)
            batch = await self.storage.query_events(
                thread_id,
                after_seq=cursor,
                since=since if cursor is None else None,
                limit=_BATCH,
            )
            for event in batch:
                cursor = event.seq
                yield event
            if len(batch) == _BATCH:
                continue
            try:
                await asyncio.wait_for(written.wait(), self.poll_interval_s)
            except TimeoutError:
                if not batch:
                    yield None

    async def session(self, active: ActiveRun) -> AsyncIterator[StoredEvent]:
        """The stored events of the session `active` runs (a run, or a resume), until its
        task has ended and everything it wrote was read."""
        async for event in self.follow(active.thread_id, since=active.since):
            if event is None:
                if active.task.done():
                    return
                continue
            if event.run_id == active.run_id:
                yield event
