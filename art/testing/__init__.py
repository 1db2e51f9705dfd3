"""Test helpers for applications built on art: a scripted LLM, a fake HTTP provider,
fixtures, plan snapshots.

Names load on first use so that the pytest plugin (`art.testing.plugin`), which every
pytest run imports, stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS: dict[str, str] = {
    "ScriptedModel": "art.testing.scripted",
    "Reply": "art.testing.scripted",
    "ScriptedCall": "art.testing.scripted",
    "ScriptError": "art.testing.scripted",
    "replies": "art.testing.scripted",
    "make_run_context": "art.testing.runs",
    "FakeProvider": "art.testing.provider",
    "Answer": "art.testing.provider",
    "HTTPStatus": "art.testing.provider",
    "Hang": "art.testing.provider",
    "Malformed": "art.testing.provider",
    "ProviderRequest": "art.testing.provider",
    "PlanSnapshotExtension": "art.testing.snapshots",
    "render_plan_text": "art.testing.snapshots",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'art.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from art.testing.provider import (  # noqa: F401
        Answer,
        FakeProvider,
        Hang,
        HTTPStatus,
        Malformed,
        ProviderRequest,
    )
    from art.testing.runs import make_run_context  # noqa: F401
    from art.testing.scripted import (  # noqa: F401
        Reply,
        ScriptedCall,
        ScriptedModel,
        ScriptError,
        replies,
    )
    from art.testing.snapshots import PlanSnapshotExtension, render_plan_text  # noqa: F401
