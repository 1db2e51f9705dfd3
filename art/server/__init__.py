"""`art serve`: the engine behind an HTTP API, with live event streams, AG-UI and an inspector.

Needs the `server` extra (`pip install "art-pes[server]"`). Names load on first use, so
importing `art.server` (as the `art` command does) costs nothing until a server is made::

    from art.server import ServerSettings, create_app

    app = create_app(model="openai/gpt-4o-mini", tools=[...], storage="postgresql://...",
                     settings=ServerSettings(api_keys=["..."]))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = ["Principal", "ServerSettings", "create_app", "serve", "serve_in_thread"]

_EXPORTS = {
    "Principal": "art.server.principals",
    "ServerSettings": "art.server.settings",
    "create_app": "art.server.app",
    "serve": "art.server.serve",
    "serve_in_thread": "art.server.serve",
}

if TYPE_CHECKING:
    from art.server.app import create_app
    from art.server.principals import Principal
    from art.server.serve import serve, serve_in_thread
    from art.server.settings import ServerSettings


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'art.server' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
