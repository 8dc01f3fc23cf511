"""Plugin manager factory and the registry of parts.

The core never imports a bundled plugin module: bundled plugins register
through the ``shardmeter`` entry-point group exactly as a third party's do.
Only when the distribution's metadata is missing (running from a source tree
that was never installed) does the manager fall back to the dotted names in
:data:`BUNDLED`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata as md
import os
import re
import sys
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import pluggy

from shardmeter import hookspecs
from shardmeter.errors import PluginError, ScenarioError
from shardmeter.records import PART_KINDS, as_part, part_kinds
from shardmeter.registry.guard import remember
from shardmeter.registry.names import Provided, case_clash, kind_of, suggest, unique_names
from shardmeter.registry.names import bad_name as _bad_name

__all__ = ["make_plugin_manager", "Registry", "Provided", "BUNDLED", "get_registry"]

ENTRY_POINT_GROUP = "shardmeter"

#: Fallback used only when no ``shardmeter`` distribution metadata is found.
BUNDLED = (
    "shardmeter.plugins.hardware",
    "shardmeter.plugins.interconnects",
    "shardmeter.plugins.costs",
    "shardmeter.plugins.frameworks",
    "shardmeter.strategies.builtin",
)


#: A plugin that takes longer than this to import is named in a warning (seconds).
SLOW_IMPORT_S = 2.0
#: A hook (one contribution function) that takes longer than this is named in a warning (seconds).
SLOW_HOOK_S = 2.0

#: How ``SHARDMETER_STRICT_PLUGINS`` is written on and off (any case, spaces around ignored).
_ON = ("1", "on", "yes", "true")
_OFF = ("", "0", "off", "no", "false")


def _warn(msg: str) -> None:
    print(f"shardmeter: warning: {msg}", file=sys.stderr)


def _strict() -> bool:
    """Is ``SHARDMETER_STRICT_PLUGINS`` on (``1``, ``on``, ``yes``, ``true``) or off (``0``,
    ``off``, ``no``, ``false``, empty or unset)? Anything else is a :class:`PluginError` naming
    the variable, never a guess."""
    raw = os.environ.get("SHARDMETER_STRICT_PLUGINS", "")
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise PluginError(
        f"SHARDMETER_STRICT_PLUGINS={_shown(raw)}: expected one of {', '.join(_ON)} (on) "
        f"or {', '.join(v for v in _OFF if v)} or empty (off)"
    )


def _shown(text: object, limit: int = 80) -> str:
    """``text`` for a one-line message: control characters escaped, shortened past ``limit``."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _norm(name: str) -> str:
    """A distribution or plugin name compared the PEP 503 way (``Acme_X`` == ``acme-x``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _disabled() -> set[str]:
    """Entry-point names or distribution names listed in ``SHARDMETER_DISABLE_PLUGINS``."""
    raw = os.environ.get("SHARDMETER_DISABLE_PLUGINS", "")
    return {_norm(x.strip()) for x in raw.split(",") if x.strip()}


def _entry_points():
    try:
        return list(md.entry_points(group=ENTRY_POINT_GROUP))
    except TypeError:  # pragma: no cover - Python < 3.10 API
        return list(md.entry_points().get(ENTRY_POINT_GROUP, []))


def make_plugin_manager(
    *, entry_points: bool = True, plugins: Iterable[object] = (), bundled: bool | None = None
) -> pluggy.PluginManager:
    """Build a fresh plugin manager.

    :param entry_points: load plugins from the ``shardmeter`` entry-point group,
        one at a time: one that fails to import is named in a one-line warning
        on stderr and skipped (fatal with ``SHARDMETER_STRICT_PLUGINS=1``);
        entry-point or distribution names listed in ``SHARDMETER_DISABLE_PLUGINS=a,b``
        are not loaded; two distributions registering one entry-point name is
        an error naming both.
    :param plugins: extra plugin objects (modules or instances) to register,
        e.g. from tests or an application that composes its own parts.
    :param bundled: force loading the bundled plugins by dotted name; by
        default they are loaded that way only when entry points do not
        provide them (an uninstalled source tree).
    """
    _strict()  # a misspelt SHARDMETER_STRICT_PLUGINS is an error at once, not at the first fault
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    disabled = _disabled()
    dists: dict[str, str] = {}
    core = _load_entry_points(pm, disabled, dists) if entry_points else None
    if bundled or (bundled is None and core is None):
        _register_bundled(pm, disabled, dists)
    elif bundled is None and core is not None and "shardmeter" not in disabled:
        # an installed core whose metadata predates a bundled module (an editable install)
        _register_bundled(pm, disabled, dists, only=[d for d in BUNDLED if d not in core])
    for obj in plugins:
        name = getattr(obj, "__name__", None) or f"{type(obj).__name__}-{id(obj)}"
        pm.register(obj, name=name)
        dists.setdefault(name, "registered in code")
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"ShardMeter plugin '{pm.get_name(exc.plugin)}': {exc}") from None
    pm._shardmeter_dists = dists  # type: ignore[attr-defined]
    return pm


def _load_entry_points(
    pm: pluggy.PluginManager, disabled: set[str], dists: dict[str, str]
) -> set[str] | None:
    """Register the plugin of every entry point that is not disabled, one at a time, recording
    each one's distribution in ``dists``; returns the modules the ``shardmeter`` distribution's
    own entry points name (``None``: no installed core). A bundled module its metadata does not
    name (an editable install made before the module existed) is then registered by name."""
    core: set[str] | None = None
    for ep in _entry_points():
        dist = getattr(ep, "dist", None)
        dist_label = f"{dist.name} {dist.version}" if dist is not None else "unknown distribution"
        own = dist is not None and dist.name.lower().replace("_", "-") == "shardmeter"
        if own:
            core = (core or set()) | {str(ep.value).partition(":")[0]}
        if _norm(ep.name) in disabled or (dist is not None and _norm(dist.name) in disabled):
            continue
        if pm.get_plugin(ep.name) is not None:
            # Two distributions register the same entry-point name: never
            # keep one silently (the part names could differ entirely).
            raise PluginError(
                f"ShardMeter plugin name '{ep.name}' is registered by both {dists.get(ep.name)} and "
                f"{dist_label}; uninstall one of them"
            )
        started = time.perf_counter()
        if not _load_entry_point(pm, ep, dist_label):
            continue
        took = time.perf_counter() - started
        # no timeout (a plugin is code, run at import): say who is slow; the bundled parts are
        # the package's own import (a loaded machine, not a plugin to disable)
        if took > SLOW_IMPORT_S and not own:
            _warn(
                f"ShardMeter plugin '{ep.name}' from {dist_label} took {took:.1f} s to import "
                f"(SHARDMETER_DISABLE_PLUGINS={ep.name} skips it)"
            )
        dists[ep.name] = dist_label
    return core


def _load_entry_point(pm: pluggy.PluginManager, ep, dist_label: str) -> bool:
    """Import entry point ``ep`` and register its plugin; a plugin that fails to import, is not
    a module or object, or implements no (or an unknown) hook is named in a warning and skipped
    (``False``), or is fatal with ``SHARDMETER_STRICT_PLUGINS=1``."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a chatty plugin must not corrupt --json output
            obj = ep.load()
        if obj is None or isinstance(obj, (str, bytes, int, float, bool)):
            raise PluginError(
                f"the entry point names {type(obj).__name__} {obj!r:.40}, not a module "
                "or object with ShardMeter hooks"
            )
        pm.register(obj, name=ep.name)
        unknown = _unknown_hooks(pm, obj)
        if unknown or not pm.get_hookcallers(obj):
            pm.unregister(obj)
            raise PluginError(
                unknown
                or f"{type(obj).__name__} {getattr(obj, '__name__', '')} implements no ShardMeter hook"
            )
    except (Exception, SystemExit) as exc:  # isolate third-party failures
        first = _shown(str(exc).strip().splitlines()[0], 200) if str(exc).strip() else ""
        msg = f"Error loading ShardMeter plugin '{ep.name}' from {dist_label}: {type(exc).__name__}"
        msg += f": {first}" if first else ""
        if _strict():
            raise PluginError(msg) from exc
        _warn(msg + " (skipped; SHARDMETER_DISABLE_PLUGINS=" + ep.name + " silences this)")
        return False
    return True


def _register_bundled(
    pm: pluggy.PluginManager, disabled: set[str], dists: dict[str, str], only: Iterable[str] = BUNDLED
) -> None:
    """Register the bundled plugins (``only`` those) by dotted name (an uninstalled source tree),
    but not one disabled or already registered."""
    for dotted in only:
        short = dotted.rsplit(".", 1)[-1]
        if _norm(short) in disabled or pm.get_plugin(dotted) is not None:
            continue
        mod = importlib.import_module(dotted)
        if pm.is_registered(mod):
            continue
        pm.register(mod, name=dotted)
        dists[dotted] = "shardmeter (source tree)"


def _unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> str:
    """A message naming the hooks ``plugin`` implements that no hookspec defines
    (a misspelt hook would otherwise be ignored), or ``""``."""
    import difflib

    specs = [n for n in dir(hookspecs) if n.startswith("shardmeter_")]
    bad = []
    for impl_caller in pm.get_hookcallers(plugin) or []:
        if not impl_caller.has_spec():
            close = difflib.get_close_matches(impl_caller.name, specs, n=1, cutoff=0.6)
            bad.append(f"'{impl_caller.name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return f"unknown hook {', '.join(bad)}" if bad else ""


class Registry:
    """Every registered part, by kind and name.

    Built from a plugin manager by calling each contribution hook once. A name
    provided twice within one kind raises :class:`PluginError` naming every
    provider. Use :meth:`override` to replace a part explicitly in code.
    """

    def __init__(self, entries: dict[str, dict[str, Provided]]):
        self._entries = {k: dict(v) for k, v in entries.items()}
        for k in PART_KINDS:
            self._entries.setdefault(k, {})
        for provided in self._entries.values():
            for p in provided.values():
                remember(p.record, p.plugin, p.distribution)

    @classmethod
    def from_plugin_manager(cls, pm: pluggy.PluginManager) -> Registry:
        dists = getattr(pm, "_shardmeter_dists", {})
        entries: dict[str, dict[str, list[Provided]]] = {k: {} for k in PART_KINDS}
        hooks = sorted({hook for _, hook in part_kinds().values()})
        for hook_name in hooks:
            caller = getattr(pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)
                dist = dists.get(plugin_name, "unknown distribution")
                items = _contributed(impl, hook_name, plugin_name, dist)
                for item in items if items is not None else ():
                    accepted = _accepted(item, hook_name, plugin_name, dist)
                    if accepted is not None:
                        kind, part = accepted
                        entries[kind].setdefault(item.name, []).append(Provided(part, plugin_name, dist))
        return cls(unique_names(entries))

    def kinds(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def provided(self, kind: str, name: str) -> Provided:
        return self._entries[kind][name]

    def get(self, kind: str, name: str, *, path: str = "", file: str | None = None):
        """The record called ``name`` of ``kind``; unknown names raise a
        :class:`ScenarioError` that names ``path`` and suggests close matches."""
        try:
            return self._entries[kind][name].record
        except KeyError:
            raise ScenarioError(
                f"unknown {kind} '{name}'" + suggest(name, self._entries[kind]), path=path, file=file
            ) from None

    def items(self, kind: str):
        return [(n, p) for n, p in sorted(self._entries[kind].items())]

    def has(self, kind: str, name: str) -> bool:
        """Whether a part ``name`` of ``kind`` is registered."""
        return name in self._entries.get(kind, {})

    def override(self, kind: str, record, *, plugin: str = "override") -> Registry:
        """A copy of this registry with ``record`` replacing (or adding) a part (a declarative
        strategy record is turned into its part)."""
        return self.override_many([(kind, record)], plugin=plugin)

    def override_many(self, records: Iterable[tuple[str, Any]], *, plugin: str = "override") -> Registry:
        """A copy of this registry with every ``(kind, record)`` of ``records`` applied in order,
        as :meth:`override` one by one, in one copy and time linear in the records (a catalog
        overlay of thousands of entries: one copy per entry was quadratic)."""
        entries = {k: dict(v) for k, v in self._entries.items()}
        folded = {k: {n.casefold(): n for n in v} for k, v in entries.items()}
        for kind, record in records:
            if kind not in entries:
                raise PluginError(
                    f"override: no part kind {_shown(ascii(kind))}; the kinds are {', '.join(entries)}"
                )
            bad = _bad_name(getattr(record, "name", None))
            if bad:
                raise PluginError(f"override of {kind} {_shown(ascii(getattr(record, 'name', None)))}: {bad}")
            new = Provided(as_part(record), plugin, "registered in code")
            other = folded[kind].get(record.name.casefold())
            if other is not None and other != record.name:
                raise case_clash(kind, other, entries[kind][other], record.name, new)
            entries[kind][record.name] = new
            folded[kind][record.name.casefold()] = record.name
        return Registry(entries)


def _reject(msg: str, cause: BaseException | None = None) -> None:
    """A plugin's contribution is unusable: a warning on stderr, or fatal with
    ``SHARDMETER_STRICT_PLUGINS=1``."""
    if _strict():
        if cause is None:
            raise PluginError(msg)
        raise PluginError(msg) from cause
    _warn(msg)


def _contributed(impl, hook_name: str, plugin_name: str, dist: str) -> list | None:
    """What one hook implementation returns, as a list; ``None`` (after :func:`_reject`) when
    it raises, exits or returns something other than an iterable of records."""
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a chatty plugin must not corrupt --json output
            items = impl.function()
            if isinstance(items, (str, bytes, Mapping)) or not (items is None or hasattr(items, "__iter__")):
                raise TypeError(f"returned {type(items).__name__}, not an iterable of records")
            return list(items) if items is not None else []  # a generator runs here
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin's sys.exit() must not end ours
        first = _shown(str(exc).strip().splitlines()[0], 200) if str(exc).strip() else ""
        msg = f"ShardMeter plugin '{plugin_name}' ({dist}) failed in {hook_name}: {type(exc).__name__}"
        _reject(msg + (f": {first}" if first else ""), exc)
        return None
    finally:
        _warn_if_slow(time.perf_counter() - started, hook_name, plugin_name, dist)


def _warn_if_slow(took: float, hook_name: str, plugin_name: str, dist: str) -> None:
    """No timeout (a hook is the plugin's code, run in this process): a slow one is named."""
    if took > SLOW_HOOK_S:
        hint = "" if dist == "registered in code" else f" (SHARDMETER_DISABLE_PLUGINS={plugin_name} skips it)"
        _warn(f"ShardMeter plugin '{plugin_name}' ({dist}) took {took:.1f} s in {hook_name}{hint}")


def _accepted(item: Any, hook_name: str, plugin_name: str, dist: str) -> tuple[str, object] | None:
    """The kind and part of one contributed item; ``None`` (after :func:`_reject`) when the hook
    does not contribute its class or it is invalid. An item from the legacy union hook is
    accepted with a :class:`DeprecationWarning`."""
    kind = kind_of(item, hook_name)
    if kind is None:
        accepted = [c.__name__ for k, (cs, h) in part_kinds().items() if h == hook_name for c in cs]
        _reject(
            f"ShardMeter plugin '{plugin_name}' ({dist}) returned "
            f"{type(item).__name__} from {hook_name}, which expects " + " or ".join(accepted)
        )
        return None
    if part_kinds()[kind][1] != hook_name:
        warnings.warn(
            f"ShardMeter plugin '{plugin_name}' ({dist}) yields a {kind} part "
            f"'{getattr(item, 'name', '?')}' from {hook_name}; yield it from "
            f"{part_kinds()[kind][1]} (the old union hook goes in the next release)",
            DeprecationWarning,
            stacklevel=3,  # the caller of Registry.from_plugin_manager
        )
    try:  # validators again: a record changed after construction (object.__setattr__)
        attrs.validate(item)
    except (ValueError, TypeError) as exc:
        first = str(exc.args[0] if exc.args else exc).strip().splitlines()[0]
        _reject(
            f"ShardMeter plugin '{plugin_name}' ({dist}) returned an invalid "
            f"{type(item).__name__} from {hook_name}: {first}",
            exc,
        )
        return None
    bad_name = _bad_name(getattr(item, "name", None))
    if bad_name:
        _reject(
            f"ShardMeter plugin '{plugin_name}' ({dist}) returned a {type(item).__name__} from "
            f"{hook_name} named {_shown(ascii(getattr(item, 'name', None)))}: {bad_name}"
        )
        return None
    try:
        return kind, as_part(item)
    except (ValueError, TypeError) as exc:
        _reject(
            f"ShardMeter plugin '{plugin_name}' ({dist}) returned an invalid "
            f"{type(item).__name__} from {hook_name}: {exc}",
            exc,
        )
        return None


_DEFAULT: Registry | None = None


def get_registry(*, refresh: bool = False) -> Registry:
    """The process-wide registry built from the installed plugins (cached)."""
    global _DEFAULT
    if _DEFAULT is None or refresh:
        _DEFAULT = Registry.from_plugin_manager(make_plugin_manager())
    return _DEFAULT
