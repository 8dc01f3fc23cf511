"""Who provided a part, and the rules for part names: unique per kind (also when case is
folded), printable, and how a contributed item maps to a registry kind."""

from __future__ import annotations

import difflib
import unicodedata

import attrs

from shardmeter.errors import PluginError
from shardmeter.records import LEGACY_STRATEGY_HOOK, part_kinds

__all__ = ["Provided", "bad_name", "case_clash", "unique_names", "kind_of", "suggest"]


@attrs.frozen
class Provided:
    """A registered part and who provided it."""

    record: object
    plugin: str
    distribution: str


def bad_name(name: object) -> str:
    """Why ``name`` cannot name a part (``""``: it can): a part name is a non-empty string
    without control characters (a newline in one would forge lines of ``shardmeter plugins``)."""
    if not isinstance(name, str) or not name.strip():
        return "a part name must be a non-empty string"
    # Cc: C0/C1 controls (newline, ESC, DEL); Cf: invisible format characters (bidi overrides);
    # Zl/Zp: the Unicode line and paragraph separators; Cs: lone surrogates
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in name):
        return "a part name must not contain control characters (newlines, escapes, format characters)"
    return ""


def unique_names(entries: dict[str, dict[str, list[Provided]]]) -> dict[str, dict[str, Provided]]:
    """One provider per name within a kind; a name provided twice is an error naming every
    provider, and so are names that differ only by case (``H100-SXM`` and ``h100-sxm``: which one
    a scenario meant is a guess)."""
    final: dict[str, dict[str, Provided]] = {}
    for kind, names in entries.items():
        final[kind] = {}
        folded: dict[str, str] = {}
        for name, provs in names.items():
            if len(provs) > 1:
                who = "; ".join(f"plugin '{p.plugin}' from {p.distribution}" for p in provs)
                raise PluginError(
                    f"duplicate {kind} name '{name}' provided by {who} "
                    "(uninstall one, or disable one with SHARDMETER_DISABLE_PLUGINS)"
                )
            other = folded.setdefault(name.casefold(), name)
            if other != name:
                raise case_clash(kind, other, names[other][0], name, provs[0])
            final[kind][name] = provs[0]
    return final


def case_clash(kind: str, a: str, pa: Provided, b: str, pb: Provided) -> PluginError:
    return PluginError(
        f"{kind} names '{a}' (plugin '{pa.plugin}' from {pa.distribution}) and '{b}' "
        f"(plugin '{pb.plugin}' from {pb.distribution}) differ only by case "
        "(rename one, uninstall one, or disable one with SHARDMETER_DISABLE_PLUGINS)"
    )


def kind_of(item: object, hook_name: str) -> str | None:
    """The registry kind of a contributed item: a behaviour part (any subclass) or a declarative
    record (its exact class) of a kind this hook contributes, or of the schedule/sync kinds from
    the legacy union hook."""
    from shardmeter.parts import Part

    for kind, (classes, hook) in part_kinds().items():
        legacy = hook_name == LEGACY_STRATEGY_HOOK and kind in ("schedule", "sync")
        if hook != hook_name and not legacy:
            continue
        part_cls, record_cls = classes[0], classes[-1]
        behaviour = len(classes) > 1 or issubclass(part_cls, Part)  # a part kind: any subclass
        if type(item) is record_cls or (behaviour and isinstance(item, part_cls)):
            return kind
    return None


def suggest(name: str, options) -> str:
    close = difflib.get_close_matches(str(name), list(options), n=3, cutoff=0.5)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
