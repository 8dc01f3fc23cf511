"""The knobs of the plan space and ``--only``: short names, their scenario key paths, and
the values a knob is tried at (its default range, or what ``--only`` restricts it to).

A ``--only`` the space cannot use is an error naming the knob and the value, never dropped:
an unknown knob, no values, a value of the wrong type, one the scenario rules out (``tp`` not
dividing ``model.heads``, an unknown schedule, ``island[5].nodes`` of a two-island scenario)
or a knob that this scenario's space does not have (``dp`` of several islands, ``strategy`` of
one island); see :func:`normalise_only` and :func:`check_only`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.load.specs import Scenario
from shardmeter.registry.manager import Registry

__all__ = ["KNOB_ALIASES", "KNOBS", "normalise_only", "check_only", "only_label", "pick"]

#: The normalised ``--only`` (:func:`normalise_only`): key path -> values, or ``None`` for the
#: scenario's own value.
Only = dict[str, list | None]

#: Short names accepted by ``--only`` for the knobs of the space.
KNOB_ALIASES = {
    "tp": "parallelism.tp",
    "pp": "parallelism.pp",
    "dp": "parallelism.dp",
    "cp": "parallelism.cp",
    "ep": "parallelism.ep",
    "sp": "parallelism.sequence_parallel",
    "sequence_parallel": "parallelism.sequence_parallel",
    "sharding": "parallelism.sharding",
    "schedule": "parallelism.schedule",
    "v": "parallelism.virtual_stages",
    "virtual_stages": "parallelism.virtual_stages",
    "mbs": "training.micro_batch",
    "micro_batch": "training.micro_batch",
    "recompute": "training.recompute",
    "strategy": "sync.strategy",
    "inner_steps": "sync.inner_steps",
    "bits": "sync.compression_bits",
    "compression_bits": "sync.compression_bits",
}
#: The key paths of the knobs (besides ``island[i].nodes``).
KNOBS = set(KNOB_ALIASES.values())
#: ``island[i].nodes`` (``i`` a decimal index).
_ISLAND_NODES = re.compile(r"^island\[(\d+)\]\.nodes$")
#: The short name of each knob path, for messages.
_SHORT = {path: short for short, path in reversed(KNOB_ALIASES.items())}
#: Knobs whose values are whole numbers >= 1.
_COUNTS = {
    "parallelism.tp",
    "parallelism.pp",
    "parallelism.dp",
    "parallelism.cp",
    "parallelism.ep",
    "parallelism.virtual_stages",
    "training.micro_batch",
    "sync.inner_steps",
}
#: Knobs that exist only in a space of several islands (the sync between them).
_SYNC_KNOBS = ("sync.strategy", "sync.inner_steps", "sync.compression_bits")


def only_label(key: str, value: Any = None, *, values: bool = True) -> str:
    """``--only tp=3``: how a message names knob ``key`` (a path) and one of its values."""
    short = _SHORT.get(key, key)
    if not values:
        return f"--only {short}"
    text = "true" if value is True else "false" if value is False else str(value)
    return f"--only {short}={_printable(text)}"


def _named(key: str, vals: list | None) -> str:
    """``--only KEY=VALUES`` as given (``--only KEY`` for the scenario's own value)."""
    if not vals:
        return only_label(key, values=False)
    return f"--only {_SHORT.get(key, key)}={','.join(only_label(key, v).split('=', 1)[1] for v in vals)}"


def _printable(text: str, limit: int = 60) -> str:
    """A value for a one-line message: control characters escaped, shortened past ``limit``."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dedupe(values: list) -> list:
    """``values`` without repeats (``1`` and ``True`` differ), in their order."""
    out: list = []
    for v in values:
        if not any(type(v) is type(w) and v == w for w in out):
            out.append(v)
    return out


def normalise_only(only: Mapping[str, Any] | None) -> dict[str, list | None]:
    """``{"tp": [8], "island[1].nodes": None}`` -> canonical key paths; ``None`` = the scenario's value.

    An unknown knob, or a knob given an empty list of values, is a :class:`ShardMeterError`
    naming it; repeated values are tried once."""
    out: dict[str, list | None] = {}
    for k, v in (only or {}).items():
        key = KNOB_ALIASES.get(k, k)
        m = _ISLAND_NODES.match(key) if isinstance(key, str) else None
        if m:
            key = f"island[{int(m.group(1))}].nodes"
        elif key not in KNOBS:
            import difflib

            close = difflib.get_close_matches(str(k), sorted(set(KNOB_ALIASES) | KNOBS), n=2, cutoff=0.5)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ShardMeterError(
                f"--only {_printable(str(k))}: not a knob of the plan space{hint}; knobs: "
                f"{', '.join(sorted(KNOB_ALIASES))}, island[i].nodes"
            )
        if key in out:
            raise ShardMeterError(f"{only_label(key, values=False)}: given twice (as {k!r} too)")
        vals = None if v is None else list(v if isinstance(v, (list, tuple)) else [v])
        if vals is not None and not vals:
            raise ShardMeterError(
                f"{only_label(key, values=False)}: no values (give {_SHORT.get(key, key)}=V1,V2,..., or "
                f"{_SHORT.get(key, key)} alone for the scenario's value)"
            )
        out[key] = None if vals is None else _dedupe(vals)
    return out


def check_only(only: Mapping[str, list | None], sc: Scenario, registry: Registry) -> None:
    """Every value of the normalised ``--only`` is one scenario ``sc`` can be planned with;
    else a :class:`ShardMeterError` naming the knob and the value (see the module docstring)."""
    n_islands = len(sc.islands)
    for key, vals in only.items():
        m = _ISLAND_NODES.match(key)
        if m:
            _check_island_nodes(key, int(m.group(1)), vals, sc)
            continue
        if n_islands == 1 and key in _SYNC_KNOBS:
            raise ShardMeterError(
                f"{_named(key, vals)}: a single-island scenario has no sync between islands to choose"
            )
        if n_islands > 1 and key == "parallelism.dp":
            raise ShardMeterError(
                f"{_named(key, vals)}: with several islands each island's dp fills the nodes "
                "it uses; restrict those with --only island[i].nodes=..."
            )
        for v in vals or ():
            why = _unusable(key, v, sc, registry)
            if why:
                raise ShardMeterError(f"{only_label(key, v)}: {why}")


def _check_island_nodes(key: str, j: int, vals: list | None, sc: Scenario) -> None:
    n_islands = len(sc.islands)
    if n_islands == 1:
        raise ShardMeterError(
            f"{_named(key, vals)}: a single-island plan chooses dp, not nodes (use --only dp=...)"
        )
    if j >= n_islands:
        raise ShardMeterError(
            f"{_named(key, vals)}: the scenario has {n_islands} islands "
            f"(island[0] .. island[{n_islands - 1}])"
        )
    isl = sc.islands[j]
    for v in vals or ():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ShardMeterError(f"{only_label(key, v)}: expected a whole number of nodes >= 1")
        if v > isl.nodes:
            name = f"'{isl.name}' " if isl.name else ""
            raise ShardMeterError(f"{only_label(key, v)}: island {name}has {isl.nodes} nodes")


def _unusable(key: str, v: Any, sc: Scenario, reg: Registry) -> str:
    """Why value ``v`` of knob ``key`` cannot be planned with (``""``: it can)."""
    m = sc.model
    if key in _COUNTS:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            return "expected a whole number >= 1"
        rules = {
            "parallelism.tp": (m.heads % v, f"does not divide model.heads ({m.heads})"),
            "parallelism.cp": (m.seq_len % v, f"does not divide model.seq_len ({m.seq_len})"),
            "parallelism.ep": (
                m.experts % v,
                f"does not divide model.experts ({m.experts})"
                if m.experts > 1
                else "the model has no experts",
            ),
            "parallelism.pp": (v > m.layers, f"more stages than model.layers ({m.layers})"),
            "parallelism.virtual_stages": (v > m.layers, f"more than model.layers ({m.layers})"),
            "training.micro_batch": (
                v > sc.training.global_batch,
                f"larger than training.global_batch ({sc.training.global_batch})",
            ),
        }
        bad, why = rules.get(key, (False, ""))
        return why if bad else ""
    if key == "parallelism.sequence_parallel":
        return "" if isinstance(v, bool) else "expected true or false"
    if key == "training.recompute":
        return "" if v in ("none", "selective", "op", "full") else "expected none, selective, op or full"
    if key == "sync.compression_bits":
        return "" if isinstance(v, (int, float)) and not isinstance(v, bool) else "expected a number of bits"
    kinds = {
        "parallelism.sharding": ("sharding", "sharding strategy"),
        "parallelism.schedule": ("schedule", "pipeline schedule"),
        "sync.strategy": ("sync", "sync strategy"),
    }
    if key in kinds:
        kind, what = kinds[key]
        names = reg.names(kind)
        if not isinstance(v, str) or v not in names:
            return f"unknown {what}{_suggest(v, names)}; known: {', '.join(names)}"
    return ""


def _suggest(v: Any, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(str(v), names, n=2, cutoff=0.5)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def pick(only: Mapping[str, list | None], key: str, default: Sequence[Any], current: Any) -> list[Any]:
    """The values knob ``key`` is tried at: ``default``, unless the normalised ``--only``
    restricts it (to its values, or to ``current``, the scenario's value, when given none)."""
    if key not in only:
        return list(default)
    vals = only[key]
    return [current] if vals is None else vals
