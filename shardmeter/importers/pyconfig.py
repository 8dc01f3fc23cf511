"""Reading a Python configuration registry without running it: torchtitan's
``config_registry.py``, Megatron-Bridge and NeMo 2 recipe functions.

:func:`evaluate` parses the file with :mod:`ast` and follows one function's statements: local
assignments, attribute assignments on the configuration being built (``config.training.steps =
5``), ``return``, calls of other functions of the same file (``config = llama3_8b()``, with
their keyword arguments bound), and ``if`` / ``for`` where the test or the sequence is known.
A call of anything else (``Trainer.Config(...)``, ``model_registry("8B")``) becomes a
:class:`Rec`: its name, positional arguments and keyword fields, later assignments added. Only
literals and arithmetic on them are computed; every other expression is kept as an
:class:`Opaque` holding its source text, which the importer writes as a ``# not mapped:``
comment. Work is bounded before it is done (:data:`MAX_STEPS` nodes, :data:`MAX_DEPTH` nested
calls, numbers as :func:`shardmeter.numbers.check_number` allows).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from typing import Any

import attrs

from shardmeter.importers.files import ConfigError

__all__ = [
    "BadNumber",
    "Rec",
    "Opaque",
    "Module",
    "evaluate",
    "parse_tree",
    "tree_loader",
    "MAX_STEPS",
    "MAX_DEPTH",
    "opaque_text",
]

#: Expression nodes evaluated per import, at most (a registry function takes a few thousand).
MAX_STEPS = 200_000
#: Nested same-file calls, at most.
MAX_DEPTH = 24
#: Calls that turn one configuration into another with the same fields, read as the record
#: they take (torchtitan/experiments/graph_trainer: ``to_graph_trainer_config(trainer_config,
#: model_registry)`` copies a ``Trainer.Config`` into a ``GraphTrainer.Config``).
PASS_THROUGH = ("to_graph_trainer_config",)
#: Items of a list built by arithmetic (``[0] * 3 + [1] * 58``), at most.
MAX_ITEMS = 1 << 16
#: Characters of an expression quoted in a comment.
_TEXT = 120


@attrs.frozen
class Opaque:
    """An expression not evaluated: its source text (shortened)."""

    text: str

    def __str__(self) -> str:
        return self.text


@attrs.frozen
class BadNumber(Opaque):
    """A number the reader will not carry (not finite, or beyond ``FLOAT_MAX``): its text and
    value, so the importer can name the field it lands in."""

    value: Any = None


@attrs.define(eq=False)
class Rec:
    """A call of something not defined in the file (a configuration class, a registry): its
    dotted name, positional arguments and fields (keyword arguments, then assignments)."""

    name: str
    args: list[Any] = attrs.field(factory=list)
    fields: dict[str, Any] = attrs.field(factory=dict)
    line: int = 0
    #: the record a method was called on (``AutoBridge.from_hf_pretrained(x).get_model_config()``)
    base: Rec | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def chain(self) -> list[Rec]:
        """This record and the ones its methods were called on, innermost last."""
        out: list[Rec] = []
        r: Rec | None = self
        while r is not None and len(out) < MAX_DEPTH:
            out.append(r)
            r = r.base
        return out


def opaque_text(node: ast.AST) -> Opaque:
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover - a parsed tree unparses
        text = type(node).__name__
    text = " ".join(text.split())
    return Opaque(text if len(text) <= _TEXT else text[: _TEXT - 3] + "...")


@attrs.define
class _Shared:
    """What every file read for one import shares: the work done and the notes."""

    steps: int = 0
    notes: list[str] = attrs.field(factory=list)
    #: the file the import reads (errors name it, whichever file of its tree they arise in)
    root: str = ""


#: Files one import may read through its imports, at most.
MAX_MODULES = 64


@attrs.define
class Module:
    """A parsed file: its top-level functions, constants and imported names; ``loader`` reads
    another module of the same source tree by its dotted name (or ``None``)."""

    file: str
    functions: dict[str, ast.FunctionDef]
    constants: dict[str, ast.expr]
    imports: dict[str, str]  # local name -> "module.name"
    shared: _Shared = attrs.field(factory=_Shared)
    loader: Callable[[str], Module | None] | None = None
    _const_cache: dict[str, Any] = attrs.field(factory=dict)

    @property
    def notes(self) -> list[str]:
        return self.shared.notes

    @property
    def steps(self) -> int:
        return self.shared.steps

    def imported(self, name: str) -> tuple[Module, str] | None:
        """The module and name an imported ``name`` comes from, following re-exports."""
        target, mod, hops = self.imports.get(name), self, 0
        while target and mod.loader is not None and hops < 8:
            module, _, attr = target.rpartition(".")
            other = mod.loader(module) if module else None
            if other is None:
                return None
            if attr in other.functions or attr in other.constants:
                return other, attr
            target, mod, hops = other.imports.get(attr), other, hops + 1
        return None

    @classmethod
    def parse(cls, text: str, file: str, loader: Callable[[str], Module | None] | None = None) -> Module:
        try:
            tree = _parsed(text, file)
        except SyntaxError as exc:
            raise ConfigError(file, f"not valid Python (line {exc.lineno}: {exc.msg})") from None
        except (RecursionError, MemoryError):
            raise ConfigError(file, "nested too deeply to read") from None
        functions: dict[str, ast.FunctionDef] = {}
        constants: dict[str, ast.expr] = {}
        imports: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                functions[node.name] = node
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                if isinstance(node.targets[0], ast.Name):
                    constants[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                constants[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                for a in node.names:
                    imports[a.asname or a.name] = f"{base}.{a.name}" if base else a.name
            elif isinstance(node, ast.Import):
                for a in node.names:
                    imports[a.asname or a.name.split(".")[0]] = a.name
        return cls(file=file, functions=functions, constants=constants, imports=imports, loader=loader)

    def note(self, line: str) -> None:
        if line not in self.notes and len(self.notes) < 200:
            self.notes.append(line)


@functools.lru_cache(maxsize=256)
def _parsed(text: str, file: str) -> ast.Module:
    """``ast.parse`` of a file's text, kept for the next import of the same text (a recipe tree's
    shared modules are read by every recipe of it); the tree is only ever read."""
    return ast.parse(text, filename=file)


def tree_loader(file: str, read: Callable[[str], str], shared: _Shared) -> Callable[[str], Module | None]:
    """A loader of the modules of ``file``'s source tree: ``a.b.c`` is ``a/b/c.py`` (or
    ``a/b/c/__init__.py``) under the nearest folder above ``file`` that holds it; ``.c`` is
    beside ``file``. Each is read once (``read``: the text of a path) and shares ``file``'s
    budget; a module that is not in the tree is ``None`` (its names stay opaque)."""
    import os

    here = os.path.dirname(os.path.abspath(file))
    cache: dict[str, Module | None] = {}

    def find(name: str) -> str | None:
        dots = len(name) - len(name.lstrip("."))
        parts = [p for p in name.lstrip(".").split(".") if p]
        if not parts or any(not p.isidentifier() for p in parts):
            return None
        if dots:
            base = here
            for _ in range(dots - 1):
                base = os.path.dirname(base)
            bases = [base]
        else:
            bases, base = [], here
            for _ in range(16):
                bases.append(base)
                if os.path.dirname(base) == base:
                    break
                base = os.path.dirname(base)
        for b in bases:
            for cand in (os.path.join(b, *parts) + ".py", os.path.join(b, *parts, "__init__.py")):
                if os.path.isfile(cand):
                    return cand
        return None

    def load(name: str) -> Module | None:
        if name in cache:
            return cache[name]
        cache[name] = None
        if len(cache) > MAX_MODULES:
            return None
        path = find(name)
        if path is None or os.path.abspath(path) == os.path.abspath(file):
            return None
        mod = Module.parse(read(path), path, loader=load)
        mod.shared = shared
        cache[name] = mod
        return mod

    return load


def parse_tree(text: str, file: str, read: Callable[[str], str]) -> Module:
    """``file`` parsed, with a :func:`tree_loader` for the modules it imports."""
    root = Module.parse(text, file)
    root.shared.root = file
    root.loader = tree_loader(file, read, root.shared)
    return root


def evaluate(module: Module, function: str) -> Any:
    """The value ``function()`` of ``module`` returns, as far as it can be read (see the module
    docstring); what was not followed is in ``module.notes``."""
    if function not in module.functions:
        raise KeyError(function)
    from shardmeter.importers.pyeval import Frame

    return Frame(module, depth=0).call(module.functions[function], [], {})
