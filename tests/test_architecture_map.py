"""docs/architecture.md's module map names the tree as it is: every module under shardmeter/ has
a row (``__init__.py`` aside: a room's own line says what it is), every package folder holding
modules has its room line, and everything the map names exists. Names are written in backticks
in the table's first column, relative to shardmeter/ (``load/scenario.py``; a room as ``load/``)."""

from __future__ import annotations

import re
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "shardmeter"
DOC = ROOT / "docs" / "architecture.md"


@attrs.frozen
class MapCheck:
    """What the map lacks and what it names in vain (each sorted)."""

    missing_modules: tuple[str, ...]
    missing_rooms: tuple[str, ...]
    not_in_tree: tuple[str, ...]
    named_twice: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.missing_modules or self.missing_rooms or self.not_in_tree or self.named_twice)

    def message(self) -> str:
        parts = [
            ("modules missing from the map", self.missing_modules),
            ("rooms (package folders) missing from the map", self.missing_rooms),
            ("named in the map but not in shardmeter/", self.not_in_tree),
            ("named in more than one row", self.named_twice),
        ]
        lines = [f"  {what}: {', '.join(names)}" for what, names in parts if names]
        return "docs/architecture.md's module map is out of date:\n" + "\n".join(lines)


def map_names(text: str) -> list[str]:
    """The backticked names in the first column of the tables under ``## Module map``: modules
    (``*.py``) and rooms (``folder/``), in the order written, repeats kept."""
    m = re.search(r"^## Module map\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, "docs/architecture.md has no '## Module map' section"
    names = []
    for line in m.group(1).splitlines():
        if not line.startswith("|") or re.fullmatch(r"\|[\s:|-]+", line.strip()):
            continue  # not a table row, or the header's rule
        first = re.split(r"(?<!\\)\|", line)[1]
        names += [n for n in re.findall(r"`([^`]+)`", first) if n.endswith((".py", "/"))]
    return names[1:] if names[:1] == ["module"] else names


def tree(pkg: Path) -> tuple[set[str], set[str]]:
    """``(modules, rooms)`` under ``pkg``: every ``*.py`` but ``__init__.py``, and every folder
    holding such a module (a data folder, holding none, is no room), relative to ``pkg``."""
    modules = {
        p.relative_to(pkg).as_posix()
        for p in pkg.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    rooms = {m.rsplit("/", 1)[0] + "/" for m in modules if "/" in m}
    return modules, rooms


def check_map(text: str, pkg: Path) -> MapCheck:
    names = map_names(text)
    modules, rooms = tree(pkg)
    named = set(names)
    absent = {n for n in named if not ((pkg / n).is_dir() if n.endswith("/") else (pkg / n).is_file())}
    return MapCheck(
        missing_modules=tuple(sorted(modules - named)),
        missing_rooms=tuple(sorted(rooms - named)),
        not_in_tree=tuple(sorted(absent)),
        named_twice=tuple(sorted({n for n in names if names.count(n) > 1})),
    )


def test_the_module_map_names_every_module_and_only_modules_that_exist():
    result = check_map(DOC.read_text(encoding="utf-8"), PKG)
    assert not result, result.message()


def test_the_check_names_exactly_what_is_missing_and_what_is_extra(tmp_path):
    pkg = tmp_path / "pkg"
    for rel in (
        "__init__.py",
        "errors.py",
        "load/__init__.py",
        "load/scenario.py",
        "load/specs.py",
        "data/__init__.py",
    ):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("", encoding="utf-8")
    doc = """# X

## Module map

| module | its one job |
| --- | --- |
| **`load/`** | stage 1 \\| and an escaped bar; `load/specs.py` in this column is no row |
| `load/scenario.py`, `load/gone.py` | one job |
| `errors.py` | errors |
| `load/scenario.py` | again |

## Next

| `model/` | a table of another section is not the map |
"""
    result = check_map(doc, pkg)
    assert result.missing_modules == ("load/specs.py",)
    assert result.missing_rooms == ()
    assert result.not_in_tree == ("load/gone.py",)
    assert result.named_twice == ("load/scenario.py",)
    msg = result.message()
    assert "modules missing from the map: load/specs.py" in msg
    assert "named in the map but not in shardmeter/: load/gone.py" in msg
    fixed = doc.replace("`load/gone.py`", "`load/specs.py`").replace("| `load/scenario.py` | again |\n", "")
    assert not check_map(fixed, pkg)
    assert check_map(fixed.replace("**`load/`**", "**load**"), pkg).missing_rooms == ("load/",)
