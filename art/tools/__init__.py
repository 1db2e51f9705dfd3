"""art.tools: the built-in tools, each an IToolExecutor.

`builtin_tools()` returns a fresh set: calculator, http_get, ask_human and show,
plus read_file and list_files when a `files_root` directory is given.
"""

from __future__ import annotations

import os

from art.tooling.contract import IToolExecutor
from art.tools.calculator import Calculator
from art.tools.files import ListFiles, ReadFile
from art.tools.http import HttpGet
from art.tools.human import AskHuman
from art.tools.show import Show

__all__ = [
    "AskHuman",
    "Calculator",
    "HttpGet",
    "ListFiles",
    "ReadFile",
    "Show",
    "builtin_tools",
]


def builtin_tools(files_root: str | os.PathLike[str] | None = None) -> list[IToolExecutor]:
    """New instances of the built-in tools; the file tools only when `files_root` is given."""
    tools: list[IToolExecutor] = [Calculator(), HttpGet(), AskHuman(), Show()]
    if files_root is not None:
        tools += [ReadFile(files_root), ListFiles(files_root)]
    return tools
