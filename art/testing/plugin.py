"""pytest plugin (entry point `pytest11: art`): art's fixtures.

Every pytest run in an environment where art is installed imports this module, so it
imports nothing heavy at import time: each fixture imports what it needs when used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from art.engine.context import RunContext
    from art.testing.provider import FakeProvider
    from art.testing.scripted import ScriptedModel


@pytest.fixture
def scripted_model() -> Iterator[Callable[..., ScriptedModel]]:
    """A factory for ScriptedModel; every model it made is unregistered after the test."""
    from art.testing.scripted import ScriptedModel

    made: list[ScriptedModel] = []

    def factory(*args: Any, **kwargs: Any) -> ScriptedModel:
        model = ScriptedModel(*args, **kwargs)
        made.append(model)
        return model

    yield factory
    for model in made:
        model.unregister()


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    """A started FakeProvider (an HTTP model provider on 127.0.0.1), closed after the test."""
    from art.testing.provider import FakeProvider

    with FakeProvider() as provider:
        yield provider


@pytest.fixture
def run_context() -> RunContext:
    """A fresh RunContext (default ExecutionConfig, its own EventBus) for phase-level tests."""
    from art.testing.runs import make_run_context

    return make_run_context()


@pytest.fixture
def plan_snapshot(snapshot: Any) -> Any:
    """syrupy's `snapshot`, storing plans as readable Markdown: `assert plan == plan_snapshot`."""
    from art.testing.snapshots import PlanSnapshotExtension

    return snapshot.use_extension(PlanSnapshotExtension)
