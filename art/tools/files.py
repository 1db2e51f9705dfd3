"""read_file and list_files: file access confined to one root directory.

Paths are relative to the root. Absolute paths, `..` components and symlinks
whose target lies outside the root are refused with PERMISSION_DENIED, so a
plan cannot read anything the application did not put under the root.

A file name that is not valid UTF-8 is shown with each such byte as `\\xNN`
(`bad\\xff.txt`), and read_file accepts the name written that way.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypedDict

from art.errors import ConfigurationError, ToolErrorCode
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools._common import failure, success

__all__ = ["ListFiles", "ReadFile", "shown_path"]

DEFAULT_MAX_BYTES = 1_000_000
DEFAULT_MAX_ENTRIES = 1_000


class _Refused(Exception):
    def __init__(self, code: ToolErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _RootedTool(IToolExecutor):
    """Resolves user paths inside `root` and refuses everything that would leave it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise ConfigurationError(f"{type(self).__name__} root {str(path)!r} is not a directory")
        self.root = path.resolve()

    def _resolve(self, relative: str) -> Path:
        if "\x00" in relative:
            raise _Refused(ToolErrorCode.VALIDATION_ERROR, "the path contains a NUL character")
        if (
            PurePosixPath(relative).is_absolute()
            or PureWindowsPath(relative).is_absolute()
            or PureWindowsPath(relative).drive
        ):
            raise _Refused(
                ToolErrorCode.PERMISSION_DENIED,
                f"absolute paths are not allowed ({relative!r}); give a path relative to the "
                "root directory",
            )
        parts = PurePosixPath(relative.replace("\\", "/")).parts
        if ".." in parts:
            raise _Refused(
                ToolErrorCode.PERMISSION_DENIED,
                f"'..' is not allowed in paths ({relative!r}); paths stay inside the root",
            )
        resolved = (self.root / relative).resolve()
        if not resolved.is_relative_to(self.root):
            raise _Refused(
                ToolErrorCode.PERMISSION_DENIED,
                f"{relative!r} leads outside the root directory (through a symbolic link)",
            )
        return resolved

    def _relative(self, path: Path) -> str:
        return shown_path(path.relative_to(self.root).as_posix())

    def _existing(self, relative: str) -> Path:
        """`_resolve(relative)`, or the name on disk it shows with `\\xNN` escapes."""
        path = self._resolve(relative)
        if not path.exists() and _ESCAPED_BYTE.search(relative):
            on_disk = self._resolve(_ESCAPED_BYTE.sub(_raw_byte, relative))
            if on_disk.exists():
                return on_disk
        return path


# A byte of a file name that is not UTF-8, as `shown_path` writes it.
_ESCAPED_BYTE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def shown_path(path: str) -> str:
    """`path` as text: a byte that is not UTF-8 (a lone surrogate from os.fsdecode) as \\xNN."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def _raw_byte(match: re.Match[str]) -> str:
    return chr(0xDC00 + int(match[1], 16))  # how os.fsdecode holds an undecodable byte


class ReadFile(_RootedTool):
    """Read one UTF-8 text file under the root (at most `max_bytes`)."""

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES):
        super().__init__(root)
        if max_bytes < 1:
            raise ConfigurationError("ReadFile max_bytes must be at least 1")
        self.max_bytes = max_bytes
        self.schema = ToolSchema(
            name="read_file",
            description=(
                "Reads a text file from the project's file area and returns its content. Use "
                "it when the answer depends on what a file says; find file names with "
                "list_files first. Paths are relative to the file area (no absolute paths, "
                f"no '..'); files over {max_bytes:,} bytes are refused. Returns an object "
                "with path, size (bytes) and content (text; undecodable bytes are replaced)."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "description": "File path relative to the file area, e.g. 'notes/todo.md'.",
                    }
                },
                "required": ["path"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "size": {"type": "integer"},
                    "content": {"type": "string"},
                },
            },
            examples=[
                {
                    "input": {"path": "todo.md"},
                    "description": "What does my todo.md file say?",
                }
            ],
        )

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        requested = input["path"]
        try:
            path = self._existing(requested)
            if not path.exists():
                raise _Refused(ToolErrorCode.NOT_FOUND, f"no such file: {requested!r}")
            if path.is_dir():
                raise _Refused(
                    ToolErrorCode.NOT_FOUND,
                    f"{requested!r} is a directory; use list_files to see what it contains",
                )
            size = path.stat().st_size
            if size > self.max_bytes:
                raise _Refused(
                    ToolErrorCode.IO_ERROR,
                    f"{requested!r} is {size:,} bytes, over the {self.max_bytes:,}-byte read "
                    "limit (ReadFile(max_bytes=...) raises it)",
                )
            with path.open("rb") as handle:
                # Read one byte past the limit: the file may have grown since stat().
                data = handle.read(self.max_bytes + 1)
            if len(data) > self.max_bytes:
                raise _Refused(
                    ToolErrorCode.IO_ERROR,
                    f"{requested!r} is over the {self.max_bytes:,}-byte read limit",
                )
        except _Refused as refused:
            return failure(self, context, refused.code, str(refused), path=requested)
        except PermissionError as exc:
            return failure(
                self, context, ToolErrorCode.PERMISSION_DENIED, f"cannot read {requested!r}: {exc}"
            )
        except OSError as exc:
            return failure(
                self, context, ToolErrorCode.IO_ERROR, f"cannot read {requested!r}: {exc}"
            )
        content = data.decode("utf-8", errors="replace")
        return success(
            self,
            context,
            {"path": self._relative(path), "size": len(data), "content": content},
        )


class ListFiles(_RootedTool):
    """List a directory under the root (optionally recursively and filtered by a glob)."""

    def __init__(
        self, root: str | os.PathLike[str], *, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        super().__init__(root)
        if max_entries < 1:
            raise ConfigurationError("ListFiles max_entries must be at least 1")
        self.max_entries = max_entries
        self.schema = ToolSchema(
            name="list_files",
            description=(
                "Lists the files and directories in the project's file area. Use it to find "
                "out which files exist before reading them with read_file. Give a directory "
                "relative to the file area ('.' for the top), recursive=true to include "
                "subdirectories, and an optional glob pattern such as '*.md'. Returns an "
                "object with path, entries (each with path, type 'file'|'directory'|'symlink' "
                f"and size in bytes) and truncated (true when more than {max_entries:,} "
                "entries matched)."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "default": ".",
                        "description": "Directory relative to the file area; '.' is the top.",
                    },
                    "recursive": {"type": "boolean", "default": False},
                    "pattern": {
                        "type": "string",
                        "description": "Glob matched against entry names, e.g. '*.py'.",
                    },
                },
                "additionalProperties": False,
            },
            examples=[
                {
                    "input": {"path": ".", "pattern": "*.md"},
                    "description": "Which markdown files do I have?",
                }
            ],
        )

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        requested = input.get("path") or "."
        recursive = bool(input.get("recursive", False))
        pattern = input.get("pattern")
        try:
            directory = self._existing(requested)
            if not directory.exists():
                raise _Refused(ToolErrorCode.NOT_FOUND, f"no such directory: {requested!r}")
            if not directory.is_dir():
                raise _Refused(
                    ToolErrorCode.NOT_FOUND,
                    f"{requested!r} is a file, not a directory; read it with read_file",
                )
            entries, truncated = self._entries(directory, recursive, pattern, context)
        except _Refused as refused:
            return failure(self, context, refused.code, str(refused), path=requested)
        except PermissionError as exc:
            return failure(
                self, context, ToolErrorCode.PERMISSION_DENIED, f"cannot list {requested!r}: {exc}"
            )
        except OSError as exc:
            return failure(
                self, context, ToolErrorCode.IO_ERROR, f"cannot list {requested!r}: {exc}"
            )
        return success(
            self,
            context,
            {"path": self._relative(directory), "entries": entries, "truncated": truncated},
        )

    def _entries(
        self, directory: Path, recursive: bool, pattern: str | None, context: ExecutionContext
    ) -> tuple[list[_Entry], bool]:
        entries: list[_Entry] = []
        pending = [directory]
        while pending:
            if context.cancelled:
                break
            current = pending.pop(0)
            with os.scandir(current) as scan:
                children = sorted(scan, key=lambda entry: entry.name)
            for child in children:
                kind = _kind(child)
                if recursive and kind == "directory":
                    pending.append(Path(child.path))
                if pattern and not fnmatch.fnmatch(child.name, pattern):
                    continue
                if len(entries) >= self.max_entries:
                    return entries, True
                entries.append(
                    {
                        "path": self._relative(Path(child.path)),
                        "type": kind,
                        "size": child.stat(follow_symlinks=False).st_size
                        if kind == "file"
                        else None,
                    }
                )
        return entries, False


class _Entry(TypedDict):
    """One listed path."""

    path: str
    type: str
    size: int | None


def _kind(entry: os.DirEntry[str]) -> str:
    # Symlinks are listed but never followed: their targets may lie outside the root.
    if entry.is_symlink():
        return "symlink"
    return "directory" if entry.is_dir(follow_symlinks=False) else "file"
