"""The stages run one way: a room imports only rooms below it (load -> resolve -> inputs -> model ->
report -> render, with the tools and the command line on top), and the bundled plugins import only
the public API, as a third party would. Every import counts, including those inside functions;
only ``if TYPE_CHECKING:`` blocks are exempt (annotations, never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "shardmeter"

#: Rooms from the bottom up; a room may import its own modules and any room with a lower rank.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "io", "reading", "numbers", "tables", "frozen", "numeric"),
    ("parts", "exchange", "records", "record_checks", "hookspecs"),
    ("registry",),
    ("load",),
    ("resolve",),
    ("inputs",),
    ("model",),
    ("report",),
    ("render",),
    ("estimator", "hetero", "hetero_report"),
    ("validate",),
    ("explore",),
    ("importers", "calibrate"),
    ("api", "testing"),
    ("cli", "__main__", "__init__"),
)
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}

#: Bundled plugins: the public API only (the package itself, the contract, the catalog reader).
PLUGIN_ROOMS = ("plugins", "strategies")
PLUGIN_MAY_IMPORT = {"errors", "numeric", "parts", "records", "hookspecs", "registry.catalog"}

#: Inside explore, from the bottom up.
EXPLORE_LAYERS = (("execution",), ("search",), ("formats",), ("cli", "commands"))
EXPLORE_RANK = {room: i for i, rooms in enumerate(EXPLORE_LAYERS) for room in rooms}


def _module(path: Path, pkg: Path = PKG) -> list[str]:
    rel = path.relative_to(pkg).with_suffix("")
    parts = list(rel.parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def imports_of(path: Path, root: Path = PKG) -> list[tuple[int, list[str]]]:
    """``(line, target module path within shardmeter)`` of every import of the package's own
    modules (``from shardmeter.x import y`` counts as ``x.y``: a submodule or a name of ``x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    out: list[tuple[int, list[str]]] = []
    me = _module(path, root)
    pkg = me if path.name == "__init__.py" else me[:-1]
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif node.module and (node.module == "shardmeter" or node.module.startswith("shardmeter.")):
                base = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                out.append((node.lineno, [*base, alias.name]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shardmeter" or alias.name.startswith("shardmeter."):
                    out.append((node.lineno, alias.name.split(".")[1:]))
    return out


def _room(mod: list[str]) -> str:
    return mod[0] if mod else "__init__"


def _lazy_names() -> dict[str, list[str]]:
    """``shardmeter/__init__.py``'s ``_LAZY`` table: a public name -> the module it comes from."""
    tree = ast.parse((PKG / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_LAZY":
            table = ast.literal_eval(node.value)
            return {k: v.split(".")[1:] for k, v in table.items()}
    return {}


def _target_room(target: list[str], lazy: dict[str, list[str]]) -> str:
    """The room an import reaches: a name of the package itself is its eager contract
    (``hookimpl``, the records, ``__version__``: rank of ``registry``), unless it is one of the
    names the package imports lazily from a room of its own."""
    if not target:  # ``import shardmeter``: the package's eager contract
        return "registry"
    if len(target) == 1 and not (PKG / target[0]).is_dir() and not (PKG / f"{target[0]}.py").exists():
        return _room(lazy[target[0]]) if target[0] in lazy else "registry"
    return _room(target)


def violations(root: Path = PKG) -> list[str]:
    bad = []
    lazy = _lazy_names()
    for path in sorted(root.rglob("*.py")):
        me = _module(path, root)
        room = _room(me)
        for line, target in imports_of(path, root):
            there = _target_room(target, lazy)
            where = f"{path.relative_to(root.parent)}:{line} imports shardmeter.{'.'.join(target)}"
            if room in PLUGIN_ROOMS:
                if there == room or (len(target) <= 1 and there == "registry"):
                    continue  # its own room, or a name of the package (``shardmeter.hookimpl``)
                if there not in PLUGIN_MAY_IMPORT and ".".join(target[:2]) not in PLUGIN_MAY_IMPORT:
                    bad.append(f"{where}: a bundled plugin imports only the public API")
                continue
            if there in PLUGIN_ROOMS:
                bad.append(f"{where}: the core names bundled plugins only as dotted strings")
                continue
            if there == room:
                if room == "explore" and len(me) > 1 and len(target) > 1:
                    a, b = EXPLORE_RANK.get(me[1]), EXPLORE_RANK.get(target[1])
                    if a is not None and b is not None and b > a:
                        bad.append(f"{where}: explore.{me[1]} may not import explore.{target[1]}")
                continue
            if RANK[there] > RANK[room]:
                bad.append(f"{where}: {room} may not import {there} (a later stage)")
    return bad


def test_every_room_imports_only_rooms_below_it():
    assert violations() == []


def test_every_module_belongs_to_a_room():
    rooms = set(RANK) | set(PLUGIN_ROOMS) | {"hardware_catalog", "validation_data", "presets"}
    strays = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if _room(_module(p)) not in rooms)
    assert strays == []


def test_the_check_sees_backward_lazy_and_plugin_imports(tmp_path):
    """The check itself, on a small fake package: a lazy import of a later stage inside a
    function, a relative one, the core importing a bundled plugin and a plugin importing the
    model are each caught; an import under ``TYPE_CHECKING`` and one of a lower room are not."""
    pkg = tmp_path / "shardmeter"
    for sub in ("load", "model", "strategies"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "load" / "scenario.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from shardmeter.errors import ScenarioError\n"
        "if TYPE_CHECKING:\n    from shardmeter.report.build import Report\n"
        "def f():\n    from shardmeter.resolve.resolver import resolve_part\n"
    )
    (pkg / "model" / "evaluate.py").write_text("from ..strategies import zero\nfrom ..report import words\n")
    (pkg / "strategies" / "zero.py").write_text(
        "from shardmeter.model import comm\nfrom shardmeter.parts import CommEvent\n"
    )
    found = violations(pkg)
    assert [v.split(":")[0:2] for v in found] == [
        ["shardmeter/load/scenario.py", "6 imports shardmeter.resolve.resolver.resolve_part"],
        ["shardmeter/model/evaluate.py", "1 imports shardmeter.strategies.zero"],
        ["shardmeter/model/evaluate.py", "2 imports shardmeter.report.words"],
        ["shardmeter/strategies/zero.py", "1 imports shardmeter.model.comm"],
    ]


@pytest.mark.parametrize("room", [r for rooms in LAYERS for r in rooms if (PKG / r).is_dir()])
def test_every_room_says_what_it_is_for_and_what_it_may_import(room):
    doc = ast.get_docstring(ast.parse((PKG / room / "__init__.py").read_text(encoding="utf-8"))) or ""
    assert len(doc) > 40 and "import" in doc, f"shardmeter/{room}/__init__.py needs its room's docstring"
