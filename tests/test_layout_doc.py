"""A newcomer's map is the tree: the layout picture of docs/architecture.md ("Layout") names every
folder under ``src/nefos``, and no folder that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import nefos

SRC = Path(nefos.__file__).parent
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_ENTRY = re.compile(r"[\w*.-]")


def pictured_folders(text: str) -> set[str]:
    """The folders the layout picture names, as paths under ``src/nefos`` (the tree's root is
    ``src/nefos/``; each level is indented by four characters of the drawing)."""
    section = text.split("## Layout", 1)[1]
    picture = section.split("```", 2)[1]
    folders: set[str] = set()
    stack: list[str] = []
    for line in picture.splitlines()[1:]:
        entry = _ENTRY.search(line)
        if entry is None:
            continue
        name = line[entry.start():].split()[0]
        if not name.endswith("/"):
            continue  # a description's continuation line
        if name == "src/nefos/":
            stack = []
            continue
        depth = entry.start() // 4 - 1
        stack[depth:] = [name.rstrip("/")]
        folders.add("/".join(stack))
    return folders


def test_the_picture_is_read_as_a_tree():
    picture = "## Layout\n```\nsrc/nefos/   top\n├── a/     x\n│   └── b/ y\n│          more y\n└── c/\n```\n"
    assert pictured_folders(picture) == {"a", "a/b", "c"}


def test_the_layout_picture_names_the_folders_that_exist():
    # A folder with nothing but caches left (a work tree's, after a move) is not one.
    files = [path.relative_to(SRC) for path in SRC.rglob("*") if path.is_file() and "__pycache__" not in path.parts]
    existing = {str(folder) for path in files for folder in path.parents if folder != Path(".")}
    pictured = pictured_folders(DOC.read_text())
    assert {"missing from the picture": existing - pictured, "pictured but absent": pictured - existing} == \
        {"missing from the picture": set(), "pictured but absent": set()}
