"""docs/architecture.md's map of the package names every module of art/ and nothing
that is not there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = "outside-art/"
ENTRY = re.compile(r"^(?P<indent> *)(?P<names>[\w./]+(?:, [\w./]+)*)(?:\s{2,}|\s*->|$)")


def mapped_modules() -> set[str]:
    """Paths (relative to art/) the map names: modules and folders, nested by indent."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```\n", 2)[1]
    named: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, folder) of the open folders
    for line in block.splitlines()[1:]:  # the first line is art/ itself
        match = ENTRY.match(line)
        if match is None or line.lstrip().startswith("#"):
            continue
        indent = len(match["indent"])
        if indent == 0:  # tools/ and adapters/ (and their contents): outside art/
            folders = [(0, OUTSIDE)]
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        for name in match["names"].split(", "):
            path = f"{parent}{name}"
            named.add(path.rstrip("/"))
            if name.endswith("/"):
                folders.append((indent, path))
    return {path for path in named if not path.startswith(OUTSIDE)}


def package_modules() -> set[str]:
    art = ROOT / "art"
    found = {path.name for path in art.glob("*.py")}
    for package in sorted(p.parent for p in art.glob("*/__init__.py")):
        found.add(package.name)
    return found


def test_the_architecture_map_names_each_module_of_art_and_no_other():
    named = {path for path in mapped_modules() if "/" not in path}
    assert named == package_modules()


def test_modules_listed_inside_a_folder_of_the_map_exist():
    nested = {path for path in mapped_modules() if "/" in path}
    missing = sorted(path for path in nested if not (ROOT / "art" / path).exists())
    assert missing == []
    queue = {path.removeprefix("queue/") for path in nested if path.startswith("queue/")}
    assert queue == {p.name for p in (ROOT / "art" / "queue").glob("*.py")} - {"__init__.py"}
