"""Runtime: the threads an instance's calls run on, beside the event loop that awaits them.

Two, each made on first use: the private event loop of the sync methods (a
`art.core.sync.Portal`: one per instance, so loop-bound resources one sync call opens
serve the next), and the threads of plain `def` tools (`ToolThreads`), which outlive a
run so the threads of one run serve the next.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from art.core.sync import Portal
from art.tooling.registry import ToolRegistry
from art.tooling.threads import ToolThreads

__all__ = ["TOOL_THREADS", "Runtime"]

T = TypeVar("T")

#: Plain `def` tool calls that run at once across all the runs of one instance.
TOOL_THREADS = 256


class Runtime:
    """The sync methods' private loop and the tool threads of one instance; safe to use
    from any thread."""

    def __init__(self, name: str = "art-instance") -> None:
        self._name = name
        self._portal_lock = threading.Lock()
        self._portal: Portal | None = None
        self._tools_lock = threading.Lock()  # runs may start from several threads
        self._tool_threads: ToolThreads | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the private loop (started now if needed) and return its result."""
        with self._portal_lock:
            if self._portal is None:
                self._portal = Portal(name=self._name)
            portal = self._portal
        return portal.run(coro)

    def tool_threads(self, registry: ToolRegistry) -> ToolThreads | None:
        """The threads every run calls its plain `def` tools on, or None while `registry`
        has none (tools registered later count too). A thread is started only when no
        idle one is left; up to TOOL_THREADS calls run at once across the runs, more wait
        for a thread (`max_concurrency` still bounds each run)."""
        if self._tool_threads is None and all(
            entry.is_async for entry in map(registry.entry, registry.names()) if entry is not None
        ):
            return None
        with self._tools_lock:
            if self._tool_threads is None:
                self._tool_threads = ToolThreads(TOOL_THREADS)
            return self._tool_threads

    @property
    def has_tool_threads(self) -> bool:
        """Whether the tool threads were made (and not stopped since)."""
        return self._tool_threads is not None

    def stop_tool_threads(self) -> None:
        """Stop the tool threads; threads of tools that ignored cancellation finish on
        their own. A later `tool_threads` makes new ones."""
        with self._tools_lock:
            pool, self._tool_threads = self._tool_threads, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def close_loop(self) -> None:
        """Stop the private loop and join its thread (blocks: from async code, call it in a
        worker thread). A later `run` starts a new one."""
        with self._portal_lock:
            portal, self._portal = self._portal, None
        if portal is not None:
            portal.close()
