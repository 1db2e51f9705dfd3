"""Run art's coroutines from sync code, also from inside a running event loop (a notebook).

A `Portal` owns one private event loop in a daemon thread. Sync methods submit their
coroutine to it and block for the result, so they never need the caller's loop and
work the same whether or not one is running in the calling thread. One portal per
instance keeps every sync call on the same loop, so loop-bound resources (connection
pools, locks) opened by one call are usable by the next.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import TypeVar

__all__ = ["Portal"]

T = TypeVar("T")


class Portal:
    """A private event loop in a worker thread; `run(coro)` blocks until the coroutine ends."""

    def __init__(self, name: str = "art-sync") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None and self.running:
                return self._loop
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()
                # Stopped: finish what is left, then close.
                pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()

            thread = threading.Thread(target=serve, name=self._name, daemon=True)
            thread.start()
            ready.wait()
            self._loop, self._thread = loop, thread
            return loop

    @property
    def in_portal(self) -> bool:
        """Whether the calling thread is the portal's own (its loop is running here)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[object, None, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the portal's loop; cancelling the future cancels the coroutine.

        Await it from another loop with `asyncio.wrap_future`."""
        return asyncio.run_coroutine_threadsafe(coro, self._start())

    def run(self, coro: Coroutine[object, None, T]) -> T:
        """Run `coro` on the portal's loop and return its result (or raise its exception)."""
        if self.in_portal:
            coro.close()
            raise RuntimeError(
                "a sync art method was called from inside art's own event loop (for example "
                "from a hook); use the async method (aprocess, aresume_execution, ...) instead"
            )
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # KeyboardInterrupt in the caller: stop the work too
            raise

    def close(self) -> None:
        """Stop the loop and join its thread. Idempotent; `run` starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            loop.call_soon(loop.stop)
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
