"""One warm forkserver for every test that starts child processes.

Children forked from it start in milliseconds instead of the seconds a fresh interpreter
spends importing litellm, so a test can start, kill and restart many of them. Python has
one forkserver per process, started with the preload list of whoever starts it first, so
every such test shares this one, preloaded with each application the children run.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
from pathlib import Path
from typing import Any

PRELOAD = ["storage.durability_warmup", "queued.warmup"]


def warm_forkserver() -> Any:
    """The forkserver multiprocessing context, its server running with `PRELOAD` imported."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    # Python 3.11's forkserver ignores the parent's sys.path when it preloads: hand it the
    # directory the test packages are imported from.
    import_root = Path(__file__).parent
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(import_root), saved]))
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    return context
