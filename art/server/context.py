"""ServerContext: what every route of one app shares (the engine, its runs, its event feed)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from art.core.redaction import Secrets, known_secrets, secrets_from_params
from art.instance import ArtInstance
from art.server.feed import EventFeed
from art.server.journal import EventJournal
from art.server.principals import ThreadAccess
from art.server.runs import RunManager
from art.server.settings import ServerSettings
from art.server.sse import EventStreams

__all__ = ["ServerContext", "get_context"]


@dataclass
class ServerContext:
    settings: ServerSettings
    instance: ArtInstance
    journal: EventJournal
    feed: EventFeed
    runs: RunManager
    threads: ThreadAccess
    streams: EventStreams

    @property
    def secrets(self) -> Secrets:
        """What every answer masks, as storage does: the environment's keys and the
        secrets in the engine's `llm_params`."""
        return known_secrets(secrets_from_params(self.instance.config.llm_params))

    @property
    def display_tools(self) -> frozenset[str]:
        return frozenset(s.name for s in self.instance.registry.schemas() if s.mode == "display")


def get_context(request: Request) -> ServerContext:
    """The context of the app serving `request` (a FastAPI dependency)."""
    context: ServerContext = request.app.state.context
    return context
