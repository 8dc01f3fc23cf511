"""The knobs of the plan space and ``--only``: short names, their scenario key paths, and
the values a knob is tried at (its default range, or what ``--only`` restricts it to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ShardMeterError

__all__ = ["KNOB_ALIASES", "KNOBS", "normalise_only", "pick"]

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


def normalise_only(only: Mapping[str, Any] | None) -> dict[str, list | None]:
    """``{"tp": [8], "island[1].nodes": None}`` -> canonical key paths; ``None`` = the scenario's value."""
    out: dict[str, list | None] = {}
    for k, v in (only or {}).items():
        key = KNOB_ALIASES.get(k, k)
        if key not in KNOBS and not (key.startswith("island[") and key.endswith("].nodes")):
            import difflib

            close = difflib.get_close_matches(k, sorted(set(KNOB_ALIASES) | KNOBS), n=2, cutoff=0.5)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ShardMeterError(
                f"--only {k}: not a knob of the plan space{hint}; knobs: "
                f"{', '.join(sorted(KNOB_ALIASES))}, island[i].nodes"
            )
        out[key] = None if v is None else list(v if isinstance(v, (list, tuple)) else [v])
    return out


def pick(only, key, default, current):
    """The values knob ``key`` is tried at: ``default``, unless the normalised ``--only``
    restricts it (to its values, or to ``current``, the scenario's value, when given none)."""
    if key not in only:
        return list(default)
    vals = only[key]
    return [current] if vals is None else vals
