"""Preloaded by the durability tests' forkserver, never by the test process itself.

Importing litellm and running one scripted run on memory storage here makes every child
forked afterwards start warm (tens of milliseconds instead of seconds). The run closes its
instance, so no thread is left running when the forkserver forks.
"""

from __future__ import annotations

import os
import tempfile
import threading

from . import durability_app as app


def _warm_up() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        settings = app.Settings(
            storage="memory://",
            log=os.path.join(scratch, "warm.log"),
            plan=app.chain_plan(chains=1, depth=1),
            step_s=0,
        )
        inst, model = app.make_instance(settings)
        try:
            assert inst.process(app.QUERY, "warm-up").status == "success"
        finally:
            inst.close()
            model.unregister()
    assert threading.active_count() == 1, threading.enumerate()


_warm_up()
