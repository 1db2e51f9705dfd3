import pytest

from art.errors import ConfigurationError
from art.tooling.contract import ExecutionContext
from art.tooling.invocation import invoke_tool
from art.tooling.registry import ToolRegistry
from art.tools import ListFiles, ReadFile


def make_context() -> ExecutionContext:
    return ExecutionContext(thread_id="t1", trace_id="0" * 32, call_id="c1")


@pytest.fixture
def area(tmp_path):
    """root/ with notes.md, docs/guide.md, docs/deep/x.txt; a secret file beside root."""
    root = tmp_path / "root"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "notes.md").write_text("# Notes\nbuy milk\n")
    (root / "docs" / "guide.md").write_text("guide ✓")
    (root / "docs" / "deep" / "x.txt").write_text("x")
    (tmp_path / "secret.txt").write_text("top secret")
    return root


async def call(tool, **args):
    return await invoke_tool(tool, args, make_context(), registry=ToolRegistry([tool]))


async def test_read_file(area):
    result = await call(ReadFile(area), path="notes.md")
    assert result.status == "success"
    assert result.output == {"path": "notes.md", "size": 17, "content": "# Notes\nbuy milk\n"}
    nested = await call(ReadFile(area), path="docs/guide.md")
    assert nested.output["content"] == "guide ✓"
    assert nested.output["path"] == "docs/guide.md"


async def test_undecodable_bytes_are_replaced(area):
    (area / "blob.bin").write_bytes(b"ok \xff\xfe")
    result = await call(ReadFile(area), path="blob.bin")
    assert result.output["content"] == "ok \ufffd\ufffd"


@pytest.mark.parametrize(
    "path",
    ["../secret.txt", "docs/../../secret.txt", "docs/..", "..\\secret.txt"],
)
async def test_dot_dot_is_refused(area, path):
    result = await call(ReadFile(area), path=path)
    assert result.metadata["error_code"] == "PERMISSION_DENIED"
    assert "'..' is not allowed" in result.error


@pytest.mark.parametrize("path", ["/etc/passwd", "C:\\Windows\\win.ini", "\\\\server\\share"])
async def test_absolute_paths_are_refused(area, path):
    result = await call(ReadFile(area), path=path)
    assert result.metadata["error_code"] == "PERMISSION_DENIED"
    assert "absolute paths are not allowed" in result.error


async def test_absolute_path_inside_the_root_is_still_refused(area):
    result = await call(ReadFile(area), path=str(area / "notes.md"))
    assert result.metadata["error_code"] == "PERMISSION_DENIED"


async def test_symlinks_leaving_the_root_are_refused(area, tmp_path):
    (area / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (area / "outside").symlink_to(tmp_path)
    (area / "inside.md").symlink_to(area / "notes.md")
    for path in ("escape.txt", "outside/secret.txt"):
        result = await call(ReadFile(area), path=path)
        assert result.metadata["error_code"] == "PERMISSION_DENIED", path
        assert "outside the root" in result.error
        assert "top secret" not in str(result.output)
    listing = await call(ListFiles(area), path="outside")
    assert listing.metadata["error_code"] == "PERMISSION_DENIED"
    inside = await call(ReadFile(area), path="inside.md")
    assert inside.output["content"].startswith("# Notes")


async def test_missing_file_and_directory(area):
    missing = await call(ReadFile(area), path="nope.md")
    assert missing.metadata["error_code"] == "NOT_FOUND"
    assert "no such file: 'nope.md'" in missing.error
    directory = await call(ReadFile(area), path="docs")
    assert directory.metadata["error_code"] == "NOT_FOUND"
    assert "use list_files" in directory.error


async def test_size_limit(area):
    (area / "big.txt").write_text("a" * 101)
    tool = ReadFile(area, max_bytes=100)
    result = await call(tool, path="big.txt")
    assert result.status == "error"
    assert result.metadata["error_code"] == "IO_ERROR"
    assert "101 bytes, over the 100-byte read limit" in result.error
    assert "max_bytes" in result.error
    (area / "ok.txt").write_text("a" * 100)
    assert (await call(tool, path="ok.txt")).output["size"] == 100
    assert "100 bytes are refused" in tool.schema.description


async def test_unreadable_file(area, monkeypatch):
    from pathlib import Path

    def deny(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", deny)
    result = await call(ReadFile(area), path="notes.md")
    assert result.metadata["error_code"] == "PERMISSION_DENIED"
    assert "cannot read 'notes.md'" in result.error


async def test_list_files(area):
    result = await call(ListFiles(area))
    assert result.status == "success"
    assert result.output == {
        "path": ".",
        "entries": [
            {"path": "docs", "type": "directory", "size": None},
            {"path": "notes.md", "type": "file", "size": 17},
        ],
        "truncated": False,
    }


async def test_list_files_recursive_with_pattern(area):
    result = await call(ListFiles(area), recursive=True, pattern="*.md")
    assert [e["path"] for e in result.output["entries"]] == ["notes.md", "docs/guide.md"]
    everything = await call(ListFiles(area), path="docs", recursive=True)
    assert [e["path"] for e in everything.output["entries"]] == [
        "docs/deep",
        "docs/guide.md",
        "docs/deep/x.txt",
    ]


async def test_symlinks_are_listed_but_not_followed(area, tmp_path):
    (area / "outside").symlink_to(tmp_path)
    result = await call(ListFiles(area), recursive=True)
    paths = {e["path"]: e["type"] for e in result.output["entries"]}
    assert paths["outside"] == "symlink"
    assert not any(p.startswith("outside/") for p in paths)


async def test_list_files_limit_and_errors(area):
    for i in range(5):
        (area / f"f{i}.txt").write_text("")
    result = await call(ListFiles(area, max_entries=3))
    assert len(result.output["entries"]) == 3
    assert result.output["truncated"] is True
    assert (await call(ListFiles(area), path="../")).metadata["error_code"] == "PERMISSION_DENIED"
    assert (await call(ListFiles(area), path="nope")).metadata["error_code"] == "NOT_FOUND"
    not_dir = await call(ListFiles(area), path="notes.md")
    assert "read it with read_file" in not_dir.error


def test_root_must_be_a_directory(tmp_path):
    with pytest.raises(ConfigurationError, match="not a directory"):
        ReadFile(tmp_path / "missing")
    with pytest.raises(ConfigurationError, match="max_bytes"):
        ReadFile(tmp_path, max_bytes=0)


async def test_a_file_name_that_is_not_utf8_is_shown_escaped_and_can_be_read(area):
    import json
    import os

    (area / os.fsdecode(b"bad\xff name.txt")).write_text("found me")  # not UTF-8
    (area / "bad").mkdir()
    (area / "bad" / os.fsdecode(b"\xfe.md")).write_text("deep")
    listing = await call(ListFiles(area), recursive=True)
    paths = [entry["path"] for entry in listing.output["entries"]]
    assert "bad\\xff name.txt" in paths and "bad/\\xfe.md" in paths
    json.dumps(listing.output).encode("utf-8")  # no lone surrogate left anywhere
    read = await call(ReadFile(area), path="bad\\xff name.txt")
    assert read.output == {"path": "bad\\xff name.txt", "size": 8, "content": "found me"}
    assert (await call(ReadFile(area), path="bad/\\xfe.md")).output["content"] == "deep"
    missing = await call(ReadFile(area), path="bad\\xfe name.txt")
    assert missing.metadata["error_code"] == "NOT_FOUND"
