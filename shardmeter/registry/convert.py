"""One strict cattrs converter, and cattrs errors turned into one clear line.

cattrs' defaults coerce ``7.9`` to ``7`` and ``"false"`` to ``True``; this
converter does not: an ``int`` field takes only an integer (never a bool or a
float), a ``float`` field takes an integer or a finite float (never a bool or
a string), a ``str`` only a string, a ``bool`` only a boolean, and unknown
keys are rejected (``forbid_extra_keys=True``).
"""

from __future__ import annotations

import json
import math
import re
import sys
import typing
from collections.abc import Mapping
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from shardmeter.errors import ScenarioError

if sys.version_info < (3, 11):  # the builtin arrived in 3.11; cattrs depends on the backport below it
    from exceptiongroup import ExceptionGroup

__all__ = ["make_converter", "structure_record", "format_cattrs_error", "CONVERTER"]


def _type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a float"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, Mapping):
        return "a table"
    if isinstance(v, (list, tuple)):
        return "an array"
    return type(v).__name__


def _shown(v: Any, limit: int = 60) -> str:
    """``repr(v)`` for a one-line message, shortened past ``limit`` (a value from a file may be
    a megabyte long)."""
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class StrictTypeError(TypeError):
    pass


def _int(v, _t):
    if isinstance(v, bool) or not isinstance(v, int):
        raise StrictTypeError(f"expected an integer, got {_type_name(v)} ({_shown(v)})")
    return v


def _float(v, _t):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise StrictTypeError(f"expected a number, got {_type_name(v)} ({_shown(v)})")
    v = float(v)
    if not math.isfinite(v):
        raise StrictTypeError(f"expected a finite number, got {v!r}")
    if v != 0.0 and not FLOAT_MIN <= abs(v) <= FLOAT_MAX:
        # a unit slip or a typo: 1e-300 GB/s or 1e308 tokens would overflow the model to inf
        raise StrictTypeError(
            f"{v!r} is absurdly {'large' if abs(v) > 1 else 'small'} "
            f"(0 or {FLOAT_MIN:g} to {FLOAT_MAX:g} in magnitude)"
        )
    return v


#: Magnitudes a scenario's real number may have (besides 0).
FLOAT_MIN, FLOAT_MAX = 1e-9, 1e18


def _str(v, _t):
    if not isinstance(v, str):
        raise StrictTypeError(f"expected a string, got {_type_name(v)} ({_shown(v)})")
    return v


def _bool(v, _t):
    if not isinstance(v, bool):
        raise StrictTypeError(f"expected true or false, got {_type_name(v)} ({_shown(v)})")
    return v


def _any_scalar(v, _t):
    return v


def make_converter() -> cattrs.Converter:
    """A fresh strict converter (never ``cattrs.global_converter``)."""
    c = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    c.register_structure_hook(int, _int)
    c.register_structure_hook(float, _float)
    c.register_structure_hook(str, _str)
    c.register_structure_hook(bool, _bool)
    c.register_structure_hook_func(lambda t: t is object or t is Any, _any_scalar)

    def _map_str_float(v, t):
        if not isinstance(v, Mapping):
            raise StrictTypeError(f"expected a table, got {_type_name(v)}")
        out = {}
        for k, x in v.items():
            try:
                out[k] = _float(x, float)
            except StrictTypeError as exc:
                raise StrictTypeError(f"{k}: {exc}") from None
        return out

    def _map_str_obj(v, t):
        if not isinstance(v, Mapping):
            raise StrictTypeError(f"expected a table, got {_type_name(v)}")
        return dict(v)

    def _is(*types):
        return lambda t: any(t == x for x in types)

    # the records annotate with typing.Mapping, whose aliases compare unequal to collections.abc's
    c.register_structure_hook_func(_is(typing.Mapping[str, float], dict[str, float]), _map_str_float)
    c.register_structure_hook_func(
        _is(typing.Mapping[str, object], dict[str, Any], dict[str, object]), _map_str_obj
    )
    for base, fn in ((float, _float), (int, _int), (str, _str)):
        c.register_structure_hook_func(
            _is(base | None),  # equal to typing.Optional[base]: both spellings match
            (lambda f: lambda v, t: None if v is None else f(v, t))(fn),
        )
    return c


CONVERTER = make_converter()


def _walk(exc: BaseException, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(exc, ForbiddenExtraKeysError):
        for k in sorted(exc.extra_fields):
            fields = [f.name for f in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
            out.append((_join(path, key_path(k)), "unknown key" + _suggest(k, fields)))
        return
    if isinstance(exc, (ClassValidationError, IterableValidationError, ExceptionGroup)):
        if hasattr(exc, "group_exceptions"):
            with_notes, without = exc.group_exceptions()
            notes_excs = list(with_notes) + [(e, None) for e in without]
        else:
            notes_excs = [(e, None) for e in exc.exceptions]
        for sub, note in notes_excs:
            sub_path = path
            if note is not None:
                name = getattr(note, "name", None)
                idx = getattr(note, "index", None)
                if name is not None:
                    sub_path = _join(path, name)
                elif idx is not None:
                    sub_path = f"{path}[{idx}]"
            _walk(sub, sub_path, out)
        return
    if isinstance(exc, KeyError) and not isinstance(exc, StrictTypeError):
        out.append((path, "required key is missing"))
        return
    msg = str(exc) if str(exc) else type(exc).__name__
    # attrs: ValueError(msg, attribute, options, value)
    if len(exc.args) > 1 and isinstance(exc.args[0], str):
        msg = exc.args[0]
        m = re.match(r"^'(\w+)' (must be .+)$", msg, re.S)
        if m:
            out.append((_join(path, m.group(1)), m.group(2)))
            return
    if isinstance(exc, KeyError) and len(msg) >= 2 and msg[0] == msg[-1] and msg[0] in "'\"":
        msg = msg[1:-1]  # str(KeyError('x')) is "'x'"; never cut a quote off a message
    m = _FIELD_MSG.match(msg)
    if m and isinstance(exc, (ValueError, TypeError)):
        out.append((_join(path, m.group(1)), m.group(2)))
    else:
        out.append((path, msg))


_FIELD_MSG = re.compile(r"^([A-Za-z_][\w]*(?:\.[\w-]+)*): (.+)$", re.S)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def key_path(key) -> str:
    """A key as it appears in a ``$.`` path: bare, or quoted as TOML quotes it (``""``, ``"a.b"``)."""
    k = str(key)
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)


def _suggest(name: str, options) -> str:
    import difflib

    close = difflib.get_close_matches(str(name), list(options), n=2, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def format_cattrs_error(exc: BaseException, *, path: str = "", file: str | None = None) -> ScenarioError:
    """The first problem in a cattrs error tree as a :class:`ScenarioError`."""
    found: list[tuple[str, str]] = []
    _walk(exc, path, found)
    if not found:
        return ScenarioError(str(exc), path=path, file=file)
    # A misspelt key also leaves its intended key "missing": name the misspelling (it has the hint).
    found.sort(key=lambda pm: not pm[1].startswith("unknown key"))
    p, m = found[0]
    more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    return ScenarioError(m + more, path=p, file=file)


def structure_record(data: Any, cls, *, path: str = "", file: str | None = None, converter=None):
    """Structure ``data`` into the attrs class ``cls`` or raise a one-line :class:`ScenarioError`.

    Validator errors raised by the record (``ValueError``/``TypeError`` whose
    message starts with the field name) are mapped onto the key path.
    """
    conv = converter or CONVERTER
    if not isinstance(data, Mapping):
        raise ScenarioError(f"expected a table, got {_type_name(data)}", path=path, file=file)
    if attrs.has(cls):
        attrs.resolve_types(cls)
    try:
        return conv.structure(dict(data), cls)
    except (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError) as exc:
        raise format_cattrs_error(exc, path=path, file=file) from None
    except (ValueError, TypeError) as exc:
        # attrs' own validators raise ValueError(message, attribute, options, value): keep the message
        msg = exc.args[0] if len(exc.args) > 1 and isinstance(exc.args[0], str) else str(exc)
        m = re.match(r"^'(\w+)' (must be .+)$", msg, re.S)
        if m:
            raise ScenarioError(m.group(2), path=_join(path, m.group(1)), file=file) from None
        head, _, rest = msg.partition(": ")
        if rest and head.replace(".", "").replace("_", "").isalnum():
            raise ScenarioError(rest, path=_join(path, head), file=file) from None
        raise ScenarioError(msg, path=path, file=file) from None
