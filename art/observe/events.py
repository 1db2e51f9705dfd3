"""One event stream per instance: names, hooks (on/off/once), before-hook edits and vetoes.

A hook is `fn(data, context)`, sync or async. A `*:before` hook may return new data
(a dict replaces the event data) or raise to veto the action; every other hook's
return value is ignored. A hook that raises never crashes a run: the failure is
reported as an `error` event (and, for a before-hook, as a `HookVeto` to the caller).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from art.core.log import get_logger
from art.core.models import ArtModel
from art.core.spans import SpanContext, SpanIds
from art.observe.errors import error_data

log = get_logger("art.observe.events")

EVENT_NAMES: frozenset[str] = frozenset(
    {
        "run:before",
        "session:start",
        "session:end",
        "plan:created",
        "plan:updated",
        "message:before",
        "message:after",
        "chunk:before",
        "chunk:after",
        "buffer:flush",
        "tool:before",
        "tool:after",
        "tool:update",
        "tool:loop:before",
        "tool:loop:after",
        "step:status",
        "suspended",
        "resumed",
        "error",
    }
)
ALL_EVENTS = "*"

Hook = Callable[[dict[str, object], "EventContext"], object]


class EventContext(ArtModel):
    """Where an event happened; the second argument of every hook.

    `session_id` and `metadata` are the run's (`options={"session_id": ..., "metadata":
    {...}}`), `message_id` the id of the answer the run writes (`resp.response.message_id`);
    all three are None for an event outside a run. Treat `metadata` as read-only.
    """

    name: str
    thread_id: str | None = None
    run_id: str | None = None
    trace_id: str | None = None
    span: SpanContext | None = None
    session_id: str | None = None
    message_id: str | None = None
    metadata: dict[str, Any] | None = None
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class RunScope:
    """What every event of one run shares besides its ids: the `EventContext` fields
    `session_id`, `message_id` and `metadata`."""

    session_id: str | None = None
    message_id: str | None = None
    metadata: dict[str, Any] | None = None


class Event(ArtModel):
    """One emitted event, as hooks' context sees it and as `stream()` yields it."""

    name: str
    data: dict[str, Any] = Field(default_factory=dict)
    thread_id: str | None = None
    run_id: str | None = None
    span: SpanContext | None = None
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def trace_id(self) -> str | None:
        return self.span.trace_id if self.span else None


class HookVeto(Exception):
    """A before-hook refused the action; `reason` says why."""

    def __init__(self, event: str, reason: str) -> None:
        super().__init__(f"{event} vetoed by a hook: {reason}")
        self.event = event
        self.reason = reason


def _check_name(name: str) -> None:
    if name != ALL_EVENTS and name not in EVENT_NAMES:
        known = ", ".join(sorted(EVENT_NAMES))
        raise ValueError(f"unknown event {name!r}; known events: {known} (or '*' for all)")


class EventBus:
    """Hooks and subscribers of one instance. Cheap when nobody listens."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[tuple[Hook, bool]]] = {}
        # Called for every event after the hooks, like a '*' hook that `off` never
        # removes: the instance's AgentCallbacks (see `observe`).
        self._observers: list[Hook] = []
        self._subscribers: list[Callable[[Event], None]] = []
        # Counts changes to the hooks and subscribers, so a run can keep its answers to
        # `wants` until the next change (it asks several times per step).
        self.changes = 0

    # -- registration -------------------------------------------------------------
    def on(self, name: str, fn: Hook) -> EventBus:
        """Call `fn(data, context)` on every `name` event ('*' for all). Returns the bus,
        so calls chain."""
        _check_name(name)
        self._hooks.setdefault(name, []).append((fn, False))
        self.changes += 1
        return self

    def once(self, name: str, fn: Hook) -> EventBus:
        """Like `on`, but only for the next `name` event."""
        _check_name(name)
        self._hooks.setdefault(name, []).append((fn, True))
        self.changes += 1
        return self

    def off(self, name: str | None = None, fn: Hook | None = None) -> EventBus:
        """Remove hooks: `fn` from `name`; every hook of `name` when `fn` is None.

        `name` None or '*' means every event: `off()` removes every hook, `off("*", fn)`
        removes `fn` wherever it was added. Returns the bus.
        """
        if name is not None:
            _check_name(name)
        self.changes += 1
        keys = list(self._hooks) if name is None or name == ALL_EVENTS else [name]
        if fn is None:
            for key in keys:
                self._hooks.pop(key, None)
            return self
        for key in keys:
            kept = [(h, o) for h, o in self._hooks.get(key, []) if h is not fn]
            if kept:
                self._hooks[key] = kept
            else:
                self._hooks.pop(key, None)
        return self

    def observe(self, fn: Hook) -> Callable[[], None]:
        """Call `fn(data, context)` on every event after its hooks, whatever `off` removes
        later; returns the function that stops it. What `AgentCallbacks` use: configured
        with the instance, they are not hooks a caller can remove by accident."""
        self._observers.append(fn)
        self.changes += 1

        def stop() -> None:
            if fn in self._observers:
                self._observers.remove(fn)
                self.changes += 1

        return stop

    def subscribe(self, sink: Callable[[Event], None]) -> Callable[[], None]:
        """Receive every event (after hooks ran); returns the unsubscribe function."""
        self._subscribers.append(sink)
        self.changes += 1

        def unsubscribe() -> None:
            if sink in self._subscribers:
                self._subscribers.remove(sink)
                self.changes += 1

        return unsubscribe

    def wants(self, name: str) -> bool:
        return bool(
            self._subscribers
            or self._observers
            or self._hooks.get(name)
            or self._hooks.get(ALL_EVENTS)
        )

    def listened(self, name: str) -> bool:
        """Whether a hook or subscriber would see `name` (the same as `wants` here; a
        run's `RunEvents` also wants events it only logs)."""
        return self.wants(name)

    def hooked(self, name: str) -> bool:
        """Whether a hook (or an observer) would see `name`; subscribers aside."""
        return bool(self._observers or self._hooks.get(name) or self._hooks.get(ALL_EVENTS))

    # -- emission -----------------------------------------------------------------
    async def emit(
        self,
        name: str,
        data: dict[str, object],
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        span: SpanContext | None = None,
        sinks: Sequence[Callable[[Event], None]] = (),
        scope: RunScope | None = None,
        hooks_only: bool = False,
    ) -> dict[str, Any]:  # llm/client.py passes the edited "messages" on unchecked
        """Run the hooks of `name` and deliver the event; return the (possibly edited) data.

        `sinks` receive this one event besides the bus's subscribers (a run's stream);
        `scope` fills the run's fields of the hooks' `EventContext`; `hooks_only` keeps
        the event from the subscribers (`run:before`, which comes before a run exists).
        Raises HookVeto when a `*:before` hook raises.
        """
        hooks = self._take_hooks(name) if (name in self._hooks or ALL_EVENTS in self._hooks) else ()
        if self._observers:
            hooks = [*hooks, *self._observers]
        if not hooks and not sinks and not self._subscribers:
            return data
        timestamp = datetime.now(UTC)
        if hooks:
            context = EventContext(
                name=name,
                thread_id=thread_id,
                run_id=run_id,
                trace_id=span.trace_id if span else None,
                span=span,
                session_id=scope.session_id if scope else None,
                message_id=scope.message_id if scope else None,
                metadata=scope.metadata if scope else None,
                timestamp=timestamp,
            )
            is_before = name.endswith(":before")
            for fn in hooks:
                try:
                    returned = fn(data, context)
                    if inspect.isawaitable(returned):
                        returned = await returned
                except Exception as exc:
                    await self._report_hook_failure(name, fn, exc, context)
                    if is_before:
                        raise HookVeto(name, str(exc) or type(exc).__name__) from exc
                    continue
                if is_before and isinstance(returned, dict):
                    data = returned
        if hooks_only or (not sinks and not self._subscribers):
            return data
        # Built without re-validation: every field is already of its type.
        event = Event.model_construct(
            name=name,
            data=data,
            thread_id=thread_id,
            run_id=run_id,
            span=span,
            timestamp=timestamp,
        )
        for sink in (*self._subscribers, *sinks):
            try:
                sink(event)
            except Exception:  # a broken sink must not break the run
                log.exception("event subscriber failed", event_name=name)
        return data

    def _take_hooks(self, name: str) -> list[Hook]:
        selected: list[Hook] = []
        for key in (name, ALL_EVENTS):
            entries = self._hooks.get(key)
            if not entries:
                continue
            selected.extend(fn for fn, _ in entries)
            if any(once for _, once in entries):
                kept: list[tuple[Hook, bool]] = [(fn, once) for fn, once in entries if not once]
                if kept:
                    self._hooks[key] = kept
                else:
                    del self._hooks[key]
                self.changes += 1
        return selected

    async def _report_hook_failure(
        self, name: str, fn: Hook, exc: Exception, context: EventContext
    ) -> None:
        hook_name = getattr(fn, "__qualname__", repr(fn))
        log.warning("hook failed", event_name=name, hook=hook_name, error=repr(exc))
        if name == "error":  # never recurse on a failing error hook
            return
        await self.emit(
            "error",
            error_data(
                "hook",
                "HOOK_FAILED",
                str(exc),
                recoverable=True,
                event_type=name,
                suggestion=f"fix the hook {hook_name}; the run went on without it",
                event=name,
                hook=hook_name,
                error_type=type(exc).__name__,
            ),
            thread_id=context.thread_id,
            run_id=context.run_id,
            span=context.span,
            scope=scope_of(context),
        )


def scope_of(context: EventContext) -> RunScope | None:
    """The run fields of a hook's context, for an event emitted from that hook's place."""
    if context.session_id is None and context.message_id is None and context.metadata is None:
        return None
    return RunScope(context.session_id, context.message_id, context.metadata)


class RunEvents:
    """One run's view of the instance's EventBus: the same hooks and subscribers, plus
    sinks of the run's own (`stream()`), and a log of emitted events for storage.

    It has the bus's `emit` and `wants`, so the phases take it where they take a bus.
    Only events named in `logged` for which `keep(name, data)` is true enter the log.
    Emitting costs a few dict lookups when nobody listens and the event is not logged.
    """

    __slots__ = (
        "_listened",
        "_seen_changes",
        "_wants",
        "bus",
        "keep",
        "log",
        "logged",
        "scope",
        "sinks",
    )

    def __init__(
        self,
        bus: EventBus,
        *,
        sinks: Sequence[Callable[[Event], None]] = (),
        logged: frozenset[str] | None = None,
        keep: Callable[[str, dict[str, object]], bool] | None = None,
        scope: RunScope | None = None,
    ) -> None:
        self.bus = bus
        self.scope = scope
        self.sinks = tuple(sinks)
        self.logged = logged or frozenset()
        self.keep = keep
        # (name, data, span, timestamp) per logged event; the owner drains it to storage.
        self.log: list[tuple[str, dict[str, object], SpanIds | None, datetime]] = []
        # Answers to wants/listened by event name, valid while the bus has not changed.
        self._wants: dict[str, bool] = {}
        self._listened: dict[str, bool] = {}
        self._seen_changes = bus.changes

    @property
    def changes(self) -> int:
        """The bus's count of changes to its hooks and subscribers (`EventBus.changes`)."""
        return self.bus.changes

    def wants(self, name: str) -> bool:
        """Whether emitting `name` does anything: a hook, subscriber, sink, or the log."""
        if self._seen_changes != self.bus.changes:
            self._forget()
        wanted = self._wants.get(name)
        if wanted is None:
            wanted = self._wants[name] = name in self.logged or self.listened(name)
        return wanted

    def listened(self, name: str) -> bool:
        """Whether a hook, subscriber or sink would see `name` (the log aside)."""
        if self._seen_changes != self.bus.changes:
            self._forget()
        listened = self._listened.get(name)
        if listened is None:
            listened = self._listened[name] = bool(self.sinks) or self.bus.wants(name)
        return listened

    def _forget(self) -> None:
        self._wants.clear()
        self._listened.clear()
        self._seen_changes = self.bus.changes

    async def emit(
        self,
        name: str,
        data: dict[str, object],
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        span: SpanContext | None = None,
    ) -> dict[str, Any]:  # llm/client.py passes the edited "messages" on unchecked
        """Like `EventBus.emit`; the event also reaches the run's sinks and log."""
        if self.listened(name):
            data = await self.bus.emit(
                name,
                data,
                thread_id=thread_id,
                run_id=run_id,
                span=span,
                sinks=self.sinks,
                scope=self.scope,
            )
        self.log_only(name, data, span)
        return data

    def log_only(
        self,
        name: str,
        data: dict[str, object],
        span: SpanIds | None,
        timestamp: datetime | None = None,
    ) -> None:
        """Log an event that no hook, subscriber or sink sees (`not listened(name)`):
        what `emit` would do, without a coroutine (the executor logs one per step).
        `timestamp` is when it happened, if the caller has just read the clock."""
        if name in self.logged and (self.keep is None or self.keep(name, data)):
            self.log.append((name, data, span, timestamp or datetime.now(UTC)))

    def drain(self) -> list[tuple[str, dict[str, object], SpanIds | None, datetime]]:
        """The logged events not drained yet, oldest first."""
        taken, self.log = self.log, []
        return taken
