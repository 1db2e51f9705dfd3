"""How MCP tool names become art tool names: `<server>__<tool>`, both parts snake_case.

art's tool names are snake_case (`^[a-z][a-z0-9_]*$`); MCP's are free-form
(`get-tiny-image`, `getWeather`, `fetch.url`). Each part is lower-cased, camelCase is split
at its humps, accents are dropped and every run of other characters becomes one `_`:

    server "everything", tool "get-tiny-image"  ->  everything__get_tiny_image
    server "My Files",   tool "readFile"        ->  my_files__read_file

The double underscore separates the two parts (a part never contains one). A server name
that does not start with a letter gets `mcp_` in front; two tools of one server that
snake_case to the same name get `_2`, `_3`, ... in listing order; two servers that
snake_case to the same prefix are refused when the config is read.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping

from art.errors import ConfigurationError

__all__ = ["SEPARATOR", "server_prefix", "server_prefixes", "snake_case", "tool_names"]

SEPARATOR = "__"
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")
_OTHER = re.compile(r"[^a-z0-9]+")


def snake_case(text: str) -> str:
    """`text` in lower-case letters, digits and single underscores (may be empty)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    split = _HUMP.sub(r"\1_\2", _ACRONYM.sub(r"\1_\2", ascii_text))
    return _OTHER.sub("_", split.lower()).strip("_")


def server_prefix(server: str) -> str:
    """The first part of the art names of `server`'s tools."""
    prefix = snake_case(server) or "server"
    return prefix if prefix[0].isalpha() else f"mcp_{prefix}"


def server_prefixes(servers: Mapping[str, object]) -> dict[str, str]:
    """Each server's prefix; raises ConfigurationError when two servers share one."""
    seen: dict[str, str] = {}
    for name in servers:
        prefix = server_prefix(name)
        if prefix in seen:
            raise ConfigurationError(
                f"MCP servers {seen[prefix]!r} and {name!r} would both name their tools "
                f"{prefix}__...; rename one of them"
            )
        seen[prefix] = name
    return {name: prefix for prefix, name in seen.items()}


def tool_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """The art name of each of `server`'s MCP tools, in listing order, all different."""
    prefix = server_prefix(server)
    names: dict[str, str] = {}
    taken: set[str] = set()
    for tool in tools:
        base = f"{prefix}{SEPARATOR}{snake_case(tool) or 'tool'}"
        name, count = base, 1
        while name in taken:
            count += 1
            name = f"{base}_{count}"
        taken.add(name)
        names[tool] = name
    return names
