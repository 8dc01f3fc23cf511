"""The expression and statement reader behind :func:`shardmeter.importers.pyconfig.evaluate`:
one function's frame, its assignments, calls and the arithmetic it computes on literals (see
:mod:`.pyconfig` for what is followed and what stays opaque)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from shardmeter.importers.files import ConfigError
from shardmeter.importers.pyconfig import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_STEPS,
    PASS_THROUGH,
    BadNumber,
    Module,
    Opaque,
    Rec,
    opaque_text,
)
from shardmeter.numbers import FLOAT_MAX

__all__ = ["Frame"]


class _Return(Exception):
    def __init__(self, value: Any):
        self.value = value


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
#: Builtins computed on known arguments.
_BUILTINS: dict[str, Callable[..., Any]] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "len": len,
    "min": min,
    "max": max,
    "abs": abs,
    "round": round,
    "list": list,
    "tuple": tuple,
    "dict": dict,
}


def _bad(node: ast.AST, v: Any) -> Any:
    """A value :func:`_number_ok` refuses: a number is kept (the importer names its field), a
    long string or list stays opaque."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return BadNumber(opaque_text(node).text, v)
    return opaque_text(node)


def _known(v: Any) -> bool:
    """A value computed exactly (no :class:`Opaque` or :class:`Rec` inside)."""
    if isinstance(v, (Opaque, Rec)):
        return False
    if isinstance(v, (list, tuple)):
        return all(_known(x) for x in v)
    if isinstance(v, dict):
        return all(_known(x) for x in v.values())
    return True


def _number_ok(v: Any) -> bool:
    if isinstance(v, bool):
        return True
    if isinstance(v, int):
        return abs(v) <= FLOAT_MAX
    if isinstance(v, float):
        return math.isfinite(v) and abs(v) <= FLOAT_MAX
    if isinstance(v, (str, list, tuple)):
        return len(v) <= MAX_ITEMS
    return True


class Frame:
    """One function's frame."""

    def __init__(self, module: Module, depth: int, env: dict[str, Any] | None = None):
        self.m = module
        self.depth = depth
        self.env: dict[str, Any] = env or {}

    # -- statements -------------------------------------------------------------------------
    def call(self, fn: ast.FunctionDef, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.depth >= MAX_DEPTH:
            raise ConfigError(
                self.m.shared.root or self.m.file, f"{fn.name}: calls nested more than {MAX_DEPTH} deep"
            )
        frame = Frame(self.m, self.depth + 1)
        frame._bind(fn, args, kwargs)
        try:
            frame.block(fn.body)
        except _Return as r:
            return r.value
        return None

    def _bind(self, fn: ast.FunctionDef, args: list[Any], kwargs: dict[str, Any]) -> None:
        a = fn.args
        params = [p.arg for p in a.posonlyargs + a.args]
        defaults = [None] * (len(params) - len(a.defaults)) + list(a.defaults)
        for i, name in enumerate(params):
            if i < len(args):
                self.env[name] = args[i]
            elif name in kwargs:
                self.env[name] = kwargs[name]
            elif defaults[i] is not None:
                self.env[name] = self.expr(defaults[i])
            else:
                self.env[name] = Opaque(name)
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            self.env[p.arg] = kwargs.get(p.arg, self.expr(d) if d is not None else Opaque(p.arg))

    def block(self, body: list[ast.stmt]) -> None:
        for st in body:
            self.stmt(st)

    def stmt(self, st: ast.stmt) -> None:
        self._tick()
        if isinstance(st, ast.Return):
            raise _Return(self.expr(st.value) if st.value is not None else None)
        if isinstance(st, ast.Assign):
            value = self.expr(st.value)
            for target in st.targets:
                self.assign(target, value)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                self.assign(st.target, self.expr(st.value))
        elif isinstance(st, ast.AugAssign):
            cur = self.expr(st.target)
            self.assign(st.target, self._binop(type(st.op), cur, self.expr(st.value), st))
        elif isinstance(st, ast.Expr):
            if not isinstance(st.value, ast.Constant):  # a docstring
                self.expr(st.value)
        elif isinstance(st, ast.If):
            test = self.expr(st.test)
            if _known(test):
                self.block(st.body if test else st.orelse)
            else:
                self.m.note(f"not followed (line {st.lineno}): if {opaque_text(st.test)}")
        elif isinstance(st, ast.For):
            seq = self.expr(st.iter)
            if isinstance(seq, (list, tuple, dict)) and len(seq) <= 256 and not st.orelse:
                for item in list(seq):
                    self.assign(st.target, item)
                    self.block(st.body)
            else:
                self.m.note(f"not followed (line {st.lineno}): for ... in {opaque_text(st.iter)}")
        elif isinstance(st, (ast.Assert, ast.Pass, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)):
            return
        elif isinstance(st, ast.Raise):
            what = opaque_text(st.exc).text if st.exc is not None else "an exception"
            where = (
                f"line {st.lineno}"
                if self.m.file == self.m.shared.root
                else f"{self.m.file} line {st.lineno}"
            )
            raise ConfigError(
                self.m.shared.root or self.m.file, f"{where}: it raises {what}, so it makes no configuration"
            )
        elif isinstance(st, ast.FunctionDef):
            self.env[st.name] = Opaque(f"{st.name} (a nested function)")
        else:
            self.m.note(f"not followed (line {st.lineno}): {type(st).__name__.lower()} statement")

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, ast.Attribute):
            obj = self.expr(target.value, store=True)
            if isinstance(obj, Rec):
                obj.fields[target.attr] = value
            else:
                self.m.note(f"not followed (line {target.lineno}): {opaque_text(target)} = ...")
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (list, tuple)) and len(value) == len(target.elts):
                for t, v in zip(target.elts, value, strict=True):
                    self.assign(t, v)
            else:
                for t in target.elts:
                    self.assign(t, opaque_text(t))
        elif isinstance(target, ast.Subscript):
            obj = self.expr(target.value, store=True)
            key = self.expr(target.slice)
            if isinstance(obj, dict) and _known(key) and not isinstance(key, (list, dict)):
                obj[key] = value
            elif isinstance(obj, Rec) and isinstance(key, str):
                obj.fields[key] = value
        else:  # pragma: no cover - the grammar allows no other target
            self.m.note(f"not followed (line {target.lineno}): {opaque_text(target)} = ...")

    # -- expressions ------------------------------------------------------------------------
    def _tick(self) -> None:
        self.m.shared.steps += 1
        if self.m.shared.steps > MAX_STEPS:
            raise ConfigError(
                self.m.shared.root or self.m.file,
                f"more than {MAX_STEPS:,} steps to read; not a configuration file",
            )

    def expr(self, node: ast.expr | None, store: bool = False) -> Any:
        if node is None:
            return None
        self._tick()
        try:
            method = getattr(self, f"_{type(node).__name__}", None)
            return method(node, store) if method else opaque_text(node)
        except RecursionError:
            raise ConfigError(
                self.m.shared.root or self.m.file, "expressions nested too deeply to read"
            ) from None

    def _Constant(self, node: ast.Constant, store: bool) -> Any:
        v = node.value
        if isinstance(v, (bytes, complex)) or v is Ellipsis:
            return opaque_text(node)
        return v if _number_ok(v) else _bad(node, v)

    def _Name(self, node: ast.Name, store: bool) -> Any:
        if node.id in self.env:
            return self.env[node.id]
        if node.id in self.m.constants:
            return self._constant(node.id)
        found = self.m.imported(node.id) if node.id in self.m.imports else None
        if found is not None and found[1] in found[0].constants:
            return Frame(found[0], self.depth + 1)._constant(found[1])
        if node.id in ("True", "False", "None"):  # pragma: no cover - Constant in Python 3.8+
            return {"True": True, "False": False, "None": None}[node.id]
        return Opaque(node.id)

    def _constant(self, name: str) -> Any:
        cache = self.m._const_cache
        if name not in cache:
            cache[name] = Opaque(name)  # a cycle reads as opaque
            cache[name] = Frame(self.m, self.depth + 1).expr(self.m.constants[name])
        return cache[name]

    def _Attribute(self, node: ast.Attribute, store: bool) -> Any:
        obj = self.expr(node.value, store=store)
        if isinstance(obj, Rec):
            if node.attr not in obj.fields:
                if not store:
                    return opaque_text(node)
                obj.fields[node.attr] = Rec(name=f"{obj.name}.{node.attr}", line=node.lineno)
            return obj.fields[node.attr]
        return opaque_text(node)

    def _List(self, node: ast.List, store: bool) -> Any:
        return self._items(node.elts)

    def _Tuple(self, node: ast.Tuple, store: bool) -> Any:
        return tuple(self._items(node.elts))

    def _Set(self, node: ast.Set, store: bool) -> Any:
        return self._items(node.elts)

    def _items(self, elts: list[ast.expr]) -> list[Any]:
        out: list[Any] = []
        for e in elts:
            if isinstance(e, ast.Starred):
                v = self.expr(e.value)
                out.extend(v) if isinstance(v, (list, tuple)) else out.append(opaque_text(e))
            else:
                out.append(self.expr(e))
        return out

    def _Dict(self, node: ast.Dict, store: bool) -> Any:
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                inner = self.expr(v)
                if isinstance(inner, dict):
                    out.update(inner)
                else:
                    out[f"**{opaque_text(v)}"] = opaque_text(v)
                continue
            key = self.expr(k)
            hashable = isinstance(key, (str, int, float, bool)) or (isinstance(key, tuple) and _known(key))
            out[key if hashable else str(opaque_text(k))] = self.expr(v)
        return out

    def _UnaryOp(self, node: ast.UnaryOp, store: bool) -> Any:
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not) and _known(v):
            return not v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return v
        return opaque_text(node)

    def _BinOp(self, node: ast.BinOp, store: bool) -> Any:
        return self._binop(type(node.op), self.expr(node.left), self.expr(node.right), node)

    def _binop(self, op: type, a: Any, b: Any, node: ast.AST) -> Any:
        fn = _BINOPS.get(op)
        if fn is None or not (_known(a) and _known(b)):
            return opaque_text(node)
        if op is ast.Pow and not (
            isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(b) <= 64 and abs(a) <= 1e6
        ):
            return opaque_text(node)
        if op is ast.Mult and isinstance(a, (str, list, tuple)) != isinstance(b, (str, list, tuple)):
            seq, n = (a, b) if isinstance(a, (str, list, tuple)) else (b, a)
            if not isinstance(n, int) or len(seq) * max(n, 0) > MAX_ITEMS:
                return opaque_text(node)
        try:
            v = fn(a, b)
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, MemoryError):
            return opaque_text(node)
        return v if _number_ok(v) else _bad(node, v)

    def _BoolOp(self, node: ast.BoolOp, store: bool) -> Any:
        vals = [self.expr(v) for v in node.values]
        if not all(_known(v) for v in vals):
            return opaque_text(node)
        if isinstance(node.op, ast.And):
            out: Any = True
            for v in vals:
                out = v
                if not v:
                    break
            return out
        out = False
        for v in vals:
            out = v
            if v:
                break
        return out

    def _Compare(self, node: ast.Compare, store: bool) -> Any:
        left = self.expr(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.expr(right_node)
            fn = _COMPARE.get(type(op))
            if fn is None or not (_known(left) and _known(right)):
                return opaque_text(node)
            try:
                if not fn(left, right):
                    return False
            except TypeError:
                return opaque_text(node)
            left = right
        return True

    def _IfExp(self, node: ast.IfExp, store: bool) -> Any:
        test = self.expr(node.test)
        if not _known(test):
            return opaque_text(node)
        return self.expr(node.body if test else node.orelse)

    def _JoinedStr(self, node: ast.JoinedStr, store: bool) -> Any:
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1:
                inner = self.expr(v.value)
                if not _known(inner) or isinstance(inner, (list, dict, tuple)):
                    return opaque_text(node)
                parts.append(str(inner))
            else:
                return opaque_text(node)
        text = "".join(parts)
        return text if len(text) <= MAX_ITEMS else opaque_text(node)

    def _Subscript(self, node: ast.Subscript, store: bool) -> Any:
        obj = self.expr(node.value)
        key = self.expr(node.slice)
        if isinstance(obj, dict) and _known(key) and not isinstance(key, (list, dict)) and key in obj:
            return obj[key]
        if isinstance(obj, (list, tuple)) and isinstance(key, int) and -len(obj) <= key < len(obj):
            return obj[key]
        return opaque_text(node)

    def _Call(self, node: ast.Call, store: bool) -> Any:
        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value)
                args.extend(v) if isinstance(v, (list, tuple)) else args.append(opaque_text(a))
            else:
                args.append(self.expr(a))
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            v = self.expr(kw.value)
            if kw.arg is None:
                if isinstance(v, dict):
                    kwargs.update({str(k): x for k, x in v.items()})
                else:
                    kwargs[f"**{opaque_text(kw.value)}"] = v
            else:
                kwargs[kw.arg] = v
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in self.m.functions and func.id not in self.env:
                return self.call(self.m.functions[func.id], args, kwargs)
            found = (
                self.m.imported(func.id) if func.id in self.m.imports and func.id not in self.env else None
            )
            if found is not None and found[1] in found[0].functions:
                return Frame(found[0], self.depth).call(found[0].functions[found[1]], args, kwargs)
            if func.id in ("getattr", "hasattr") and args and isinstance(args[0], Rec) and len(args) >= 2:
                has = isinstance(args[1], str) and args[1] in args[0].fields
                if func.id == "hasattr":
                    return has
                return args[0].fields[args[1]] if has else (args[2] if len(args) > 2 else opaque_text(node))
            if func.id in _BUILTINS and func.id not in self.m.imports and not kwargs:
                return self._builtin(func.id, args, node)
            if func.id in PASS_THROUGH and args and isinstance(args[0], Rec):
                self.m.note(f"{func.id}(...): read as the configuration it converts")
                return args[0]
            if func.id == "cast" and len(args) == 2:
                return args[1]
            replace = func.id == "replace" and self.m.imports.get("replace") == "dataclasses.replace"
            if replace and args and isinstance(args[0], Rec):
                rec = args[0]
                return Rec(
                    name=rec.name, args=list(rec.args), fields={**rec.fields, **kwargs}, line=node.lineno
                )
            return Rec(name=self._dotted(func), args=args, fields=kwargs, line=node.lineno)
        if isinstance(func, ast.Attribute):
            base = self.expr(func.value)
            if isinstance(base, Rec):
                return Rec(
                    name=f"{base.name}.{func.attr}", args=args, fields=kwargs, line=node.lineno, base=base
                )
            if func.attr == "replace" and args and isinstance(args[0], Rec):  # dataclasses.replace
                rec = args[0]
                return Rec(
                    name=rec.name, args=list(rec.args), fields={**rec.fields, **kwargs}, line=node.lineno
                )
            return Rec(name=self._dotted(func), args=args, fields=kwargs, line=node.lineno)
        return opaque_text(node)

    def _builtin(self, name: str, args: list[Any], node: ast.AST) -> Any:
        if not all(_known(a) for a in args):
            return opaque_text(node)
        try:
            v = _BUILTINS[name](*args)
        except (TypeError, ValueError, OverflowError):
            return opaque_text(node)
        return v if _number_ok(v) else _bad(node, v)

    def _dotted(self, node: ast.expr) -> str:
        """A callee's dotted name (``Trainer.Config``), with an imported alias resolved."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute) and len(parts) < 16:
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(node.id)
        else:
            parts.append(str(opaque_text(node)))
        return ".".join(reversed(parts))
