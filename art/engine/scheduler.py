"""The DAG scheduler: which steps may start, and running them up to a cap.

Two halves, kept apart (as CPython's `graphlib` and `asyncio.TaskGroup` are):

- `Readiness` is bookkeeping only: it counts each step's unfinished dependencies and
  says which steps a finished one unblocked. No I/O, no event loop; misuse raises.
- `Executor` owns the running: one `asyncio.TaskGroup` holds its worker tasks. A step
  is started the moment its last dependency finishes (no polling, no waves), up to
  `max_concurrency` at a time: the worker that finished a step takes the next ready
  one, and more workers start while ready steps outnumber them. A task per step would
  cost more than an instant tool call; a worker running steps back to back yields to
  the event loop every `_SLICE_S`, so a plan of instant tools cannot starve the loop.

The executor knows step ids and their dependencies, nothing else: what a step does is
the `run_step` coroutine function it is given (`art.engine.steps`), which catches every
failure at the step boundary, so only cancellation and engine faults reach the group.
A step that must stop the run tells the executor to `drain()` (start nothing new) or
`abort()` (also cancel the running steps). One executor makes one pass over a plan; a
replan gets a fresh one (`art.engine.execute`).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from graphlib import CycleError
from typing import Any

from art.planning.plans import Step, never_ready
from art.planning.references import find_references

__all__ = ["Executor", "Readiness", "RunStep", "step_dependencies"]

# How long a worker runs steps back to back before it lets the event loop run others.
_SLICE_S = 0.002

#: Runs one step to its end; True when it finished (its dependents may start), False
#: when it is held (a suspended step: its dependents wait with it) or was not started.
RunStep = Callable[[str], Awaitable[bool]]


# -- bookkeeping ----------------------------------------------------------------------------


class Readiness:
    """Which steps may start, by counting each step's unfinished dependencies.

    `start()` hands out the steps that wait for nothing; `finish(step)` marks a handed-out
    step finished and returns the steps that were waiting only for it. Steps in
    `finished` count as done from the start (a resumed run); dependencies on them are
    satisfied. Raises `graphlib.CycleError` for a cycle and ValueError for an unknown
    dependency, a second `start()`, or finishing a step twice or before it was handed out.
    `acyclic=True` skips the cycle search, for a graph already checked (`validate_plan`).
    """

    __slots__ = ("_dependents", "_done", "_handed_out", "_started", "_waiting")

    def __init__(
        self,
        dependencies: Mapping[str, Iterable[str]],
        *,
        finished: Iterable[str] = (),
        acyclic: bool = False,
    ) -> None:
        done = set(finished)
        waiting: dict[str, int] = {}
        dependents: defaultdict[str, list[str]] = defaultdict(list)
        # A plan of a few hundred steps can have tens of thousands of edges: count them
        # in a plain loop, then look for mistakes once per step that is depended on.
        for step, deps in dependencies.items():
            if step in done:
                continue
            if done:
                deps = [dep for dep in deps if dep not in done]
            elif not isinstance(deps, list | tuple):
                deps = list(deps)
            for dep in deps:
                dependents[dep].append(step)
            waiting[step] = len(deps)
        for dep, steps in dependents.items():
            if dep not in dependencies:
                raise ValueError(f"step {steps[0]!r} depends on unknown step {dep!r}")
            if dep in steps:
                raise CycleError(f"step {dep!r} depends on itself", [dep, dep])
        self._waiting = waiting
        self._dependents = dependents
        self._done = done
        self._handed_out: set[str] = set()
        self._started = False
        if not acyclic:
            self._check_acyclic()

    def _check_acyclic(self) -> None:
        stuck = sorted(never_ready(self._waiting, self._dependents))
        if stuck:
            raise CycleError(f"the steps {stuck} depend on each other in a cycle", stuck)

    def raise_for_cycle(self) -> None:
        """Raise CycleError when unfinished steps can never become ready (a cycle)."""
        if self._handed_out:
            return  # steps still out (or suspended) may yet unblock the rest
        self._check_acyclic()

    def start(self) -> list[str]:
        """The steps with no unfinished dependency, in the order they were given."""
        if self._started:
            raise ValueError("start() was already called")
        self._started = True
        ready = [step for step, count in self._waiting.items() if count == 0]
        self._handed_out.update(ready)
        return ready

    def finish(self, step: str) -> list[str]:
        """Mark `step` finished; return the steps that became ready because of it."""
        if step not in self._handed_out:
            state = "was already finished" if step in self._waiting else "is unknown"
            if step in self._waiting and self._waiting[step] > 0:
                state = "was never handed out"
            raise ValueError(f"cannot finish step {step!r}: it {state}")
        self._handed_out.discard(step)
        del self._waiting[step]
        return self._release(step)

    def add(self, step: str, dependencies: Iterable[str]) -> bool:
        """A step that arrived after the others (a streamed plan); its dependencies may
        not have arrived yet. True when it is ready now: handed out if `start()` was called.
        """
        if step in self._waiting or step in self._done:
            raise ValueError(f"step {step!r} was already added")
        pending = [dep for dep in dict.fromkeys(dependencies) if dep not in self._done]
        for dep in pending:
            self._dependents[dep].append(step)
        self._waiting[step] = len(pending)
        if pending or not self._started:
            return False
        self._handed_out.add(step)
        return True

    def add_finished(self, step: str) -> list[str]:
        """A step that arrived already finished (a resumed run's); returns the steps
        that became ready because of it."""
        if step in self._waiting or step in self._done:
            raise ValueError(f"step {step!r} was already added")
        ready = self._release(step)
        if not self._started:
            self._handed_out.difference_update(ready)  # start() hands them out
            return []
        return ready

    def _release(self, step: str) -> list[str]:
        """Mark `step` done; return (and hand out) the steps waiting only for it."""
        self._done.add(step)
        ready: list[str] = []
        for dependent in self._dependents.pop(step, ()):
            remaining = self._waiting[dependent] - 1
            self._waiting[dependent] = remaining
            if remaining == 0:
                ready.append(dependent)
        self._handed_out.update(ready)
        return ready

    @property
    def unfinished(self) -> int:
        """How many steps are not finished yet (waiting or handed out)."""
        return len(self._waiting)


def step_dependencies(step: Step) -> Sequence[str]:
    """Every step `step` waits for: `depends_on` plus the steps its references name."""
    deps: Sequence[str] | None = getattr(step, "all_dependencies", None)
    if deps is not None:
        return deps  # a fresh list each time: the caller may keep it
    return tuple(dict.fromkeys([*step.depends_on, *sorted(find_references(step.args))]))


# -- running --------------------------------------------------------------------------------


class Executor:
    """Runs the steps of one pass over a plan, each once its dependencies have finished.

    `dependencies` maps every step id to the ids it waits for; steps in `finished` count
    as done from the start (an earlier attempt's), steps in `held` are never started
    (suspended ones: their dependents wait with them). Use once: `await run(run_step)`.
    Plans are expected to have passed `validate_plan`; a cycle in one that did not is
    found once the steps outside it have run, and raised as `graphlib.CycleError`.

    With `streaming=True` steps also arrive while it runs (`add`, a streamed plan), and
    `run` returns only after `close()` (or `abort()`) once the running steps finish;
    steps still waiting then (for a step that never came) are left unstarted.
    """

    def __init__(
        self,
        dependencies: Mapping[str, Sequence[str]],
        *,
        max_concurrency: int,
        finished: Iterable[str] = (),
        held: Collection[str] = frozenset(),
        streaming: bool = False,
    ) -> None:
        # validate_plan found no cycle: searching every edge again costs milliseconds on
        # big plans, and a cycle in a plan that skipped it is reported at the end of run().
        self._readiness = Readiness(dependencies, finished=finished, acyclic=True)
        self._max_concurrency = max_concurrency
        self._held = held
        self._ready: deque[str] = deque()
        self._running = 0  # steps started and not finished
        # Steps started (counted in _running) that no worker runs yet: the next worker to
        # be free takes them, or each gets a task of its own once the loop gets control.
        self._claimed: deque[str] = deque()
        self._spawn: asyncio.Handle | None = None  # the call that gives them their tasks
        self._slicing = 0  # workers only letting the loop run between steps (see _worker)
        self._tasks: dict[str, asyncio.Task[None]] = {}  # running step -> its worker
        self._group: asyncio.TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._run_step: RunStep | None = None
        self._used = False
        self._stopping = False
        self._intake: asyncio.Event | None = asyncio.Event() if streaming else None

    # -- public -----------------------------------------------------------------------
    async def run(self, run_step: RunStep) -> None:
        """Run every step that becomes ready through `run_step`; return when none is
        running and none can start (all finished, or a stop was asked for)."""
        if self._used:
            raise RuntimeError("an Executor runs once; build a new one")
        self._used = True
        self._run_step = run_step
        self._loop = asyncio.get_running_loop()
        readiness = self._readiness
        self._ready.extend(readiness.start())
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                if (first := self._take_ready()) is not None:
                    group.create_task(self._worker(first))
                    self._start_workers()
                if self._intake is not None:
                    await self._intake.wait()  # steps go on arriving until close()
        finally:
            self._group = None
            self._run_step = None  # the step path refers back to this executor
            if self._spawn is not None:
                self._spawn.cancel()
                self._spawn = None
            self._ready.clear()
        if not self._stopping and readiness.unfinished and self._intake is None:
            readiness.raise_for_cycle()

    def add(self, step_id: str, dependencies: Sequence[str]) -> None:
        """A step that arrived while running (`streaming`); it starts once its
        dependencies have finished, those not arrived yet included."""
        if self._readiness.add(step_id, dependencies):
            self._ready.append(step_id)
            self._start_workers()

    def add_finished(self, step_id: str) -> None:
        """A step that arrived already finished (`streaming`): its dependents may start."""
        ready = self._readiness.add_finished(step_id)
        if ready:
            self._ready.extend(ready)
            self._start_workers()

    def close(self) -> None:
        """No more steps will arrive (`streaming`): `run` returns once none is running."""
        if self._intake is not None:
            self._intake.set()

    def drain(self) -> None:
        """Start no more steps; the running ones finish."""
        self._stopping = True

    def abort(self) -> None:
        """Start no more steps and cancel the running ones (except the caller's own)."""
        self._stopping = True
        self.close()
        current = asyncio.current_task()
        for task in list(self._tasks.values()):
            if task is not current and not task.done():
                task.cancel()

    def start_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task the executor's group owns (awaited before `run` returns)."""
        if self._group is None:
            return asyncio.ensure_future(coro)
        return self._group.create_task(coro)

    @property
    def stopping(self) -> bool:
        """True once `drain()` or `abort()` was called."""
        return self._stopping

    @property
    def running(self) -> int:
        """Steps started and not finished."""
        return self._running

    @property
    def has_ready(self) -> bool:
        """True when a step waits only for a free place under `max_concurrency`."""
        return bool(self._ready)

    # -- workers ------------------------------------------------------------------------
    def _start_workers(self) -> None:
        """Start the ready steps there is room for (and no stop was asked for).

        Each is claimed now, so that a step which suspends or fails the run does not keep
        its siblings from starting, and gets a task of its own once the loop gets control,
        unless a worker is free first: a worker whose steps never wait (instant tools)
        runs them one after another, as fast as one task can, instead of handing each to
        a task that would only run once this one yields.
        """
        if self._group is None:
            return
        claimed = self._claimed
        while (step_id := self._take_ready()) is not None:
            claimed.append(step_id)
        if claimed and self._spawn is None and self._loop is not None:
            self._spawn = self._loop.call_soon(self._spawn_claimed)

    def _spawn_claimed(self) -> None:
        """A task for each claimed step: a worker waits (its tool, a hook, storage)."""
        self._spawn = None
        claimed = self._claimed
        if not claimed:
            return
        if self._slicing and self._loop is not None:
            # A worker only lets the loop run other tasks between its steps, and comes
            # straight back to take these; look again the next time the loop gets control.
            self._spawn = self._loop.call_soon(self._spawn_claimed)
            return
        group = self._group
        if group is None:
            return
        while claimed:
            worker = self._worker(claimed[0])
            try:
                group.create_task(worker)
            except RuntimeError:  # the task group is shutting down: the run is ending
                worker.close()
                return
            claimed.popleft()

    def _take_ready(self) -> str | None:
        """The next ready step to start (now counted as running), or None."""
        ready, held = self._ready, self._held
        while ready and self._running < self._max_concurrency:
            if self._stopping:
                return None
            step_id = ready.popleft()
            if held and step_id in held:
                continue  # still suspended: its dependents wait with it
            self._running += 1
            return step_id
        return None

    async def _worker(self, step_id: str) -> None:
        """Run `step_id`, then the ready steps no other worker took, until none is left."""
        task = asyncio.current_task()
        run_step = self._run_step
        assert task is not None and run_step is not None
        sliced = time.perf_counter()
        while True:
            self._tasks[step_id] = task
            try:
                finished = await run_step(step_id)
            finally:
                self._running -= 1
                del self._tasks[step_id]
            if finished:
                self._ready.extend(self._readiness.finish(step_id))
            if time.perf_counter() - sliced >= _SLICE_S:
                self._slicing += 1
                try:
                    await asyncio.sleep(0)  # between steps: this worker holds none
                finally:
                    self._slicing -= 1
                sliced = time.perf_counter()
            # This worker's next step, a claimed one first: no new task for it.
            claimed = self._claimed
            next_id = claimed.popleft() if claimed else self._take_ready()
            if self._ready:
                self._start_workers()
            if next_id is None:
                return
            step_id = next_id
