"""pytest plugin (entry point `pytest11: art`): art's fixtures.

Every pytest run in an environment where art is installed imports this module, so it
imports nothing heavy at import time: each fixture imports what it needs when used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ParamSpec

import pytest

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion

    from art.engine.context import RunContext
    from art.testing.provider import FakeProvider
    from art.testing.scripted import ScriptedModel

P = ParamSpec("P")


@pytest.fixture
def scripted_model() -> Iterator[Callable[..., ScriptedModel]]:
    """A factory for ScriptedModel; every model it made is unregistered after the test."""
    from art.testing.scripted import ScriptedModel

    made: list[ScriptedModel] = []
    yield _recording(ScriptedModel, made)
    for model in made:
        model.unregister()


def _recording(
    make: Callable[P, ScriptedModel], made: list[ScriptedModel]
) -> Callable[P, ScriptedModel]:
    """`make`, adding each model it makes to `made`."""

    def factory(*args: P.args, **kwargs: P.kwargs) -> ScriptedModel:
        model = make(*args, **kwargs)
        made.append(model)
        return model

    return factory


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
def plan_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """syrupy's `snapshot`, storing plans as readable Markdown: `assert plan == plan_snapshot`."""
    from art.testing.snapshots import PlanSnapshotExtension

    return snapshot.use_extension(PlanSnapshotExtension)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "art_dataset(path): run the test once per case of an art evaluation dataset, the "
        "case given as its `eval_case` argument (docs/evaluation.md)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`@pytest.mark.art_dataset(path)` on a test taking `eval_case`: one test per case,
    named by the case (a relative path is found next to the test file)."""
    if "eval_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("art_dataset")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: a test taking eval_case needs "
            "@pytest.mark.art_dataset(path)"
        )
    from pathlib import Path

    from art.evaluation.dataset import load_dataset

    path = Path(marker.args[0])
    if not path.is_absolute():
        beside = Path(str(metafunc.definition.path)).parent / path
        path = beside if beside.exists() else path
    dataset = load_dataset(path)
    metafunc.parametrize(
        "eval_case", dataset.cases, ids=[case.name for case in dataset.cases], scope="function"
    )
