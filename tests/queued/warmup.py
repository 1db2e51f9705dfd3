"""Preloaded by the queue tests' forkserver, never by the test process itself.

Importing litellm and procrastinate and running one queued run on memory storage here makes
every worker forked afterwards start warm. The instance is closed, so no thread is left
running when the forkserver forks.
"""

from __future__ import annotations

import os
import tempfile
import threading

import procrastinate  # noqa: F401 - imported once here, not in every worker

from . import app


def _warm_up() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        settings = app.Settings(
            storage="memory://", log=os.path.join(scratch, "warm.log"), depth=1, step_s=0
        )
        inst, model = app.make_instance(settings)
        try:
            record = inst.submit("warm-up", "warm-up").wait(timeout=60)
            assert record.status == "completed", record
        finally:
            inst.close()
            model.unregister()
    assert threading.active_count() == 1, threading.enumerate()


_warm_up()
