"""Streamed planning: steps taken from the planning reply while it is still being written.

`StepStreamReader` reads the reply chunk by chunk with pydantic-core's partial JSON
parser and hands out each element of the plan's `steps` array once it is complete: a
later sibling has started, or the element's closing brace is followed by nothing that
could still belong to it (the text plus `]` and the closing braces parses strictly).

`StepArrivals` checks each arriving step on its own (the step's shape, its tool, its
arguments, its id against the steps already taken, and that it closes no cycle with
them) and hands the valid ones to an intake; a step that waits for a step not seen yet
waits in the executor. At the end of the reply the whole plan is checked as before;
steps taken are fixed: a repaired plan may leave them out (they are kept) but not
change them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import ValidationError
from pydantic_core import from_json

from art.core.json import JsonValue
from art.planning.plans import Plan, Step, ToolCatalog, validate_plan

__all__ = ["StepArrivals", "StepIntake", "StepStreamReader"]

_THINK_OPEN = re.compile(r"<(?:think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
# Only a chunk holding one of these can complete a step (its own brace, or the array's).
_CLOSING = frozenset("}]")


class StepStreamReader:
    """The complete step objects of a plan reply, as its text arrives.

    `feed(text)` returns the raw step objects (dicts, or whatever the model wrote as an
    element) completed by `text`, each once. Text before the plan object (prose, a code
    fence, a `<think>` block) is skipped; an element never counts as complete while it
    may still grow.
    """

    __slots__ = ("_before", "_closing", "_parts", "_start", "_tail", "_taken", "_text")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._text = ""
        self._start: int | None = None  # where the plan object starts in the reply
        self._closing = "}"  # what closes the plan object around the steps array
        self._taken = 0  # elements handed out so far
        # Once elements are taken, only the text after the last one is parsed again, behind
        # a made-up opening: each chunk then costs the same however long the plan is.
        self._tail: int | None = None  # where the text after the last taken element starts
        self._before = 0  # elements taken before `_tail`

    @property
    def taken(self) -> int:
        """How many step elements have been handed out."""
        return self._taken

    def feed(self, text: str) -> list[JsonValue]:
        """Add `text` to the reply; return the step elements it completed."""
        if not text:
            return []
        self._parts.append(text)
        if _CLOSING.isdisjoint(text):
            return []
        added_from = len(self._text)
        self._text += "".join(self._parts)
        self._parts.clear()
        steps, complete = self._read()
        if steps is None:
            return []
        new = steps[self._taken - self._before : complete]
        if new:
            self._taken = self._before + complete
            self._move_tail(added_from, complete)
        return new

    def _candidate(self, end: int | None = None) -> str:
        """The text to parse: the plan object, or the made-up opening and the tail."""
        text = self._text if end is None else self._text[:end]
        if self._tail is None:
            return text[self._start or 0 :]
        body = text[self._tail :].lstrip()
        if body.startswith(","):
            body = body[1:]
        return _OPENINGS[self._closing] + body

    def _move_tail(self, added_from: int, complete: int) -> None:
        """Start the tail after the last element taken: its brace is among the new text."""
        position = self._text.find("}", added_from)
        while position >= 0:
            try:
                value = from_json(self._candidate(position + 1) + "]" + self._closing)
            except ValueError:
                value = None
            steps = _steps_of(value)[0]
            if steps is not None and len(steps) == complete:
                self._tail, self._before = position + 1, self._taken
                return
            position = self._text.find("}", position + 1)
        # Not found (the element ended earlier, in text not read as closing it): the
        # tail stays where it was, which only costs time.

    def _read(self) -> tuple[list[JsonValue] | None, int]:
        """The steps array as far as it is written (the tail's, once there is one), and
        how many of its elements are done."""
        if self._tail is not None:
            candidate = self._candidate()
            try:
                value = from_json(candidate, allow_partial=True)
            except ValueError:
                return None, 0  # damage after steps were taken: the end decides
            steps = _steps_of(value)[0]
            return _with_done(steps, self._last_done(candidate) if steps else False)
        text = self._text
        while True:
            start = self._find_start(text)
            if start is None:
                return None, 0
            candidate = text[start:]
            try:
                value = from_json(candidate, allow_partial=True)
            except ValueError:
                if self._taken:
                    return None, 0  # damage after steps were taken: the end decides
                self._start = start + 1  # not JSON from here: look at the next brace
                continue
            steps, closing = _steps_of(value)
            if steps is None:
                return None, 0
            self._start, self._closing = start, closing
            return _with_done(steps, self._last_done(candidate) if steps else False)

    def _find_start(self, text: str) -> int | None:
        """Where the plan object starts: the first `{` after any thinking (None: not yet)."""
        begin = self._start or 0
        if self._start is None or not self._taken:
            closes = list(_THINK_CLOSE.finditer(text))
            if closes:
                begin = max(begin, closes[-1].end())
            opened = _THINK_OPEN.search(text, begin)
            if opened is not None:
                return None  # still thinking: nothing after the tag is the plan yet
        start = text.find("{", begin)
        return start if start >= 0 else None

    def _last_done(self, candidate: str) -> bool:
        """Whether the array's last element is closed: the text, closed off, parses."""
        trimmed = candidate.rstrip()
        if trimmed.endswith(","):
            trimmed = trimmed[:-1].rstrip()
        attempts: tuple[str, ...]
        if trimmed.endswith("}"):
            attempts = (trimmed + "]" + self._closing, trimmed)
        elif trimmed.endswith("]"):
            attempts = (trimmed + self._closing,)
        else:
            return False
        for attempt in attempts:
            try:
                value = from_json(attempt)
            except ValueError:
                continue
            if _steps_of(value)[0] is not None:
                return True
        return False


# The made-up start of a plan object whose steps array is open, by what closes it.
_OPENINGS = {"}": '{"steps":[', "}}": '{"plan":{"steps":['}


def _with_done(
    steps: list[JsonValue] | None, last_done: bool
) -> tuple[list[JsonValue] | None, int]:
    """`steps` and how many are complete: all but the last one, which only if it is done."""
    if not steps:
        return steps, 0
    return steps, len(steps) if last_done else len(steps) - 1


def _steps_of(value: object) -> tuple[list[JsonValue] | None, str]:
    """The steps list of a (partial) plan object and the braces that close around it."""
    if not isinstance(value, dict):
        return None, "}"
    steps = value.get("steps")
    if isinstance(steps, list):
        return steps, "}"
    inner = value.get("plan")
    if isinstance(inner, dict) and isinstance(inner.get("steps"), list):
        return inner["steps"], "}}"
    return None, "}"


#: Where valid steps go: the step and when it arrived.
StepIntake = Callable[[Step, datetime], None]


class StepArrivals:
    """Checks the steps of a streamed plan as they arrive and hands the valid ones on.

    Lives as long as the planning of one run, across repair calls: `reader()` gives the
    reader of one reply, `feed` takes its chunks, `finish(plan)` is called with the
    whole reply's plan (or None) and returns the plan to check (the taken steps the
    reply left out are added back) and the extra problems (a taken step changed).
    """

    def __init__(
        self,
        registry: ToolCatalog,
        intake: StepIntake,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.registry = registry
        self._intake = intake
        self._clock = clock
        self.taken: dict[str, Step] = {}  # valid steps handed on, in arrival order
        self._reader = StepStreamReader()

    def reader(self) -> StepStreamReader:
        """A fresh reader for the next reply."""
        self._reader = StepStreamReader()
        return self._reader

    def feed(self, text: str) -> None:
        """A chunk of the current reply: its completed steps are checked and handed on."""
        for raw in self._reader.feed(text):
            self.arrive(raw)

    def arrive(self, raw: object) -> bool:
        """Check one step element; hand it on when valid. True when it was handed on now."""
        try:
            step = raw if isinstance(raw, Step) else Step.model_validate(raw)
        except (ValidationError, ValueError, TypeError):
            return False  # the whole reply's check names the problem
        taken = self.taken.get(step.id)
        if taken is not None:
            return False  # already running, or changed (reported at the end)
        if self._problems(step):
            return False
        self.taken[step.id] = step
        self._intake(step, self._clock())
        return True

    def finish(self, plan: Plan, *, offer: bool = True) -> tuple[Plan, list[str]]:
        """The reply's plan with the taken steps it left out, and the problems only a
        streamed plan has; the steps of `plan` not taken yet are offered first (the last
        one is complete only when the reply ends) unless `offer` is False."""
        if offer:
            for step in plan.steps:
                if step.id not in self.taken:
                    self.arrive(step)
        problems = []
        written = {step.id: step for step in plan.steps}
        for step_id, step in self.taken.items():
            again = written.get(step_id)
            if again is not None and _definition(again) != _definition(step):
                problems.append(
                    f"step {step_id!r} already started as first written; keep it unchanged "
                    "or give the changed step a new id"
                )
        missing = [step for step_id, step in self.taken.items() if step_id not in written]
        if missing:
            plan = plan.model_copy(update={"steps": [*missing, *plan.steps]})
        return plan, problems

    def repair_note(self) -> str:
        """What the repair message says about the steps already taken."""
        if not self.taken:
            return ""
        ids = ", ".join(self.taken)
        return (
            f"The steps {ids} already started as written: keep them unchanged (their "
            "outputs can be referenced); fix or add only the other steps."
        )

    def _problems(self, step: Step) -> list[str]:
        """What is wrong with `step` alone, given the steps taken before it."""
        dependencies = step.all_dependencies
        if step.id in dependencies:
            return ["self-dependency"]
        # The step and the taken steps it reads, checked as a plan in which every other
        # step counts as defined elsewhere (not seen yet, or taken and checked before).
        referenced = [self.taken[d] for d in dependencies if d in self.taken]
        elsewhere = set(self.taken).union(dependencies)
        for dependency in referenced:
            elsewhere.update(dependency.all_dependencies)
        elsewhere -= {step.id, *(d.id for d in referenced)}
        problems = validate_plan(
            Plan(steps=[*referenced, step]), self.registry, completed=elsewhere
        )
        if not problems and self._closes_cycle(step):
            problems.append("cycle")
        return problems

    def _closes_cycle(self, step: Step) -> bool:
        """Whether a taken step waits, through other taken steps, for `step`."""
        target, seen = step.id, set()
        stack = list(step.all_dependencies)
        while stack:
            current = stack.pop()
            if current == target:
                return True
            if current in seen or current not in self.taken:
                continue
            seen.add(current)
            stack.extend(self.taken[current].all_dependencies)
        return False


def _definition(step: Step) -> tuple[object, ...]:
    return (step.tool, step.args, sorted(step.all_dependencies))
