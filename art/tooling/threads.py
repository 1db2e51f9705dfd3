"""ThreadCalls: one run's plain `def` tool calls, on a thread pool.

The loop holds the GIL for as long as it has work, and a thread woken for a new call
waits for it. Handed out with `run_in_executor`, the 50 `def` calls of a layer start only
once the loop has started the last of them, so all 50 end together, and
the loop then finishes them one after the other while nothing else runs. `ThreadCalls`
is a `concurrent.futures.Executor` (`submit` goes to the pool) whose `call` path does two
things differently:

- Threads start their calls while the loop is still handing out more. Once the loop
  has handed out calls for `handoff_after_s` without a break, the next call closes a
  gate: the engine's steps that would call a `def` tool wait at `wait_turn()` until a
  thread has taken that call, at most `handoff_wait_s`. The loop is not blocked: it
  waits in its selector, where the woken threads take the GIL and start their calls,
  and it runs whatever else is ready meanwhile. The calls' ends then come spread out as
  their starts were, and the loop finishes each as it comes.
- Results come back in batches: a thread appends its result to a list, and only the
  first of a batch wakes the loop. `run_in_executor` chains a concurrent Future to an
  asyncio one and wakes the loop once per call, all of it under the GIL the other
  threads are waiting for.

Not thread-safe on the loop side: one instance serves one event loop (one run).

`ToolThreads` is the pool itself: daemon threads (a tool blocked forever never keeps the
interpreter from exiting), and a call abandoned because it did not stop when cancelled
no longer counts against `max_workers`, so stuck calls never starve healthy ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar, TypeVarTuple

__all__ = ["StuckCall", "ThreadCalls", "ToolThreads"]

T = TypeVar("T")
P = ParamSpec("P")
Ts = TypeVarTuple("Ts")

# How long the loop hands out calls before it lets the threads woken so far start.
HANDOFF_AFTER_S = 0.00025
# The longest the gate stays closed (a saturated pool may not take the call for long).
HANDOFF_WAIT_S = 0.0005

_Result = tuple["asyncio.Future[Any]", Any, BaseException | None]
_WorkItem = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class StuckCall(asyncio.CancelledError):
    """A cancelled call still ran in its thread `stop_grace_s` later: it was abandoned.
    `stuck` is how many of the pool's calls are abandoned and still running."""

    def __init__(self, stuck: int) -> None:
        super().__init__(f"{stuck} abandoned call(s) still running in tool threads")
        self.stuck = stuck


class ToolThreads(Executor):
    """A thread pool for plain `def` tools: daemon threads started on demand, up to
    `max_workers` plus one for each abandoned call still running (`abandon`)."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "art-tool") -> None:
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._stuck = 0
        self._shutdown = False

    @property
    def stuck(self) -> int:
        """Abandoned calls whose threads are still running them."""
        return self._stuck

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._queue.put((future, fn, args, kwargs))
            if self._idle:
                self._idle -= 1
            elif self._threads < self._max_workers + self._stuck:
                self._threads += 1
                threading.Thread(
                    target=self._work,
                    name=f"{self._prefix}_{self._threads}",
                    daemon=True,
                ).start()
        return future

    def abandon(self, handle: Future[T]) -> int:
        """Stop counting the thread running `handle` against `max_workers` until the call
        ends; the number of abandoned calls still running."""
        with self._lock:
            self._stuck += 1
            stuck = self._stuck
        handle.add_done_callback(self._unstick)
        return stuck

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = self._threads
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in range(threads):
            self._queue.put(None)  # one stop per thread; a busy one takes it when done

    def _unstick(self, _handle: Future[T]) -> None:
        with self._lock:
            self._stuck -= 1

    def _work(self) -> None:
        get = self._queue.get
        while (item := get()) is not None:
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future, fn, args, kwargs
            with self._lock:
                self._idle += 1
        with self._lock:
            self._threads -= 1


class ThreadCalls(Executor):
    """Calls on `pool`'s threads for the running event loop; see the module docstring."""

    def __init__(
        self,
        pool: Executor,
        *,
        handoff_after_s: float = HANDOFF_AFTER_S,
        handoff_wait_s: float = HANDOFF_WAIT_S,
    ) -> None:
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self._after = handoff_after_s
        self.handoff_wait_s = handoff_wait_s  # the longest the gate stays closed
        self._lock = threading.Lock()  # guards _results, which worker threads append to
        self._results: list[_Result] = []
        self._stretch_started = 0.0  # when the loop began handing out calls without a break
        self._last_handed = float("-inf")
        self._gate: object | None = None  # the token of the call that closed the gate
        self._gate_timer: asyncio.TimerHandle | None = None
        self._waiting: list[asyncio.Future[None]] = []  # steps at the closed gate

    # -- the Executor interface: plain submissions go to the pool -----------------------
    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return self._pool.submit(fn, *args, **kwargs)

    # -- the engine's path ----------------------------------------------------------------
    async def call(
        self,
        fn: Callable[[], T],
        *,
        stop_grace_s: float = 0.0,
        tell_to_stop: Callable[[], None] | None = None,
    ) -> T:
        """`fn()`, run on a pool thread. Cancelled before a thread takes it, it never runs;
        cancelled later, it is told to stop (`tell_to_stop`) and gets `stop_grace_s` to
        end (its result is dropped) before it is abandoned (StuckCall). A pool shut down
        with `cancel_futures` cancels the calls it drops."""
        loop = self._loop
        future: asyncio.Future[T] = loop.create_future()
        gate = self._pace()
        try:
            handle = self._pool.submit(self._run, future, fn, gate)
        except BaseException:  # e.g. the pool was shut down: no thread will open the gate
            if gate is not None:
                self._open(gate)
            raise
        handle.add_done_callback(functools.partial(self._dropped, future))
        try:
            return await future
        except asyncio.CancelledError:
            if handle.cancel() or handle.done():  # still queued: it never starts
                raise
            if tell_to_stop is not None:
                tell_to_stop()
            if not await self._stopped(handle, stop_grace_s):
                abandon = getattr(self._pool, "abandon", None)
                raise StuckCall(abandon(handle) if abandon is not None else 1) from None
            raise

    @property
    def gate_closed(self) -> bool:
        """True while the loop waits for a thread to take the call that closed the gate."""
        return self._gate is not None

    @property
    def handing_out(self) -> bool:
        """True when a call was handed out within `handoff_after_s`: its thread may still
        be waiting for the GIL to start it."""
        return time.perf_counter() - self._last_handed <= self._after

    async def wait_turn(self) -> None:
        """Return once the gate is open (at once when it is)."""
        while self._gate is not None:
            # A future of its own: a cancelled waiter cancels nobody else's wait.
            turn = self._loop.create_future()
            self._waiting.append(turn)
            await turn

    def close(self) -> None:
        """Open the gate and drop its timer (at the end of the run)."""
        if self._gate is not None:
            self._open(self._gate)

    # -- internals ------------------------------------------------------------------------
    async def _stopped(self, handle: Future[None], grace_s: float) -> bool:
        """True once the thread is done with `handle`, False when not within `grace_s`."""
        stopped: asyncio.Future[None] = self._loop.create_future()
        handle.add_done_callback(lambda _handle: self._to_loop(_resolve, stopped))
        await asyncio.wait((stopped,), timeout=grace_s)
        return stopped.done()

    def _pace(self) -> object | None:
        """The gate this call closes (opened when a thread takes the call), or None."""
        now = time.perf_counter()
        if now - self._last_handed > self._after:
            # A break since the last call: the loop did other work (or waited in its
            # selector, where the threads got the GIL). A new stretch starts.
            self._stretch_started = now
        self._last_handed = now
        if self._gate is not None or now - self._stretch_started < self._after:
            return None
        gate = self._gate = object()
        self._gate_timer = self._loop.call_later(self.handoff_wait_s, self._open, gate)
        return gate

    def _open(self, gate: object) -> None:
        if self._gate is gate:
            self._gate = None
            self._last_handed = float("-inf")  # the threads had their turn
            if self._gate_timer is not None:
                self._gate_timer.cancel()
                self._gate_timer = None
            waiting, self._waiting = self._waiting, []
            for turn in waiting:
                if not turn.done():
                    turn.set_result(None)

    def _run(self, future: asyncio.Future[T], fn: Callable[[], T], gate: object) -> None:
        """In a worker thread: open the gate this call closed, run it, post the result."""
        if gate is not None:
            self._to_loop(self._open, gate)
        try:
            result, error = fn(), None
        except BaseException as exc:  # the awaiting task gets it, as run_in_executor does
            result, error = None, exc
        with self._lock:
            results = self._results
            results.append((future, result, error))
            first = len(results) == 1
        if first:  # the later results of the batch ride on this one's hand-over
            self._to_loop(self._hand_over)

    def _hand_over(self) -> None:
        with self._lock:
            results, self._results = self._results, []
        for future, result, error in results:
            if future.done():  # its caller was cancelled
                continue
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

    def _dropped(self, future: asyncio.Future[T], handle: Future[None]) -> None:
        """The pool cancelled a queued call (shut down with `cancel_futures`)."""
        if handle.cancelled():
            self._to_loop(_cancel, future)

    def _to_loop(self, callback: Callable[[*Ts], object], *args: *Ts) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(callback, *args)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _cancel(future: asyncio.Future[T]) -> None:
    if not future.done():
        future.cancel()
