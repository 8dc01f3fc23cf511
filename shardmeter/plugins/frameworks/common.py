"""What the bundled software-stack profiles share: the GPU generation tests they decide by, the
raw-table readers (a profile reads the scenario's tables as written) and the dated-state helpers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.parts import StackVersion
from shardmeter.records import HardwareProfile

__all__ = [
    "blackwell",
    "pre_ampere",
    "nvidia_fused_attention",
    "training",
    "parallelism",
    "largest_stage_layers",
    "data_parallel_size",
    "release",
    "read_at",
    "SDPA",
]

#: Why SDPA means FlashAttention-2 on the GPUs of 2024-2025.
SDPA = "SDPA's flash backend is FlashAttention-2; cuDNN attention opt-in since pytorch/pytorch #138522"


def blackwell(gpus: Sequence[HardwareProfile]) -> bool:
    """Whether any island's GPU is an NVIDIA part of compute capability 10.0 or newer
    (B200, GB200; the profile's ``compute_capability``, NVIDIA's CUDA GPUs page)."""
    return any(g.vendor == "nvidia" and (g.compute_capability or 0.0) >= 10.0 for g in gpus)


def pre_ampere(gpus: Sequence[HardwareProfile]) -> bool:
    """Whether any island's GPU is an NVIDIA part older than Ampere (sm < 80), told by its
    tensor cores: bf16 came with Ampere (sm80), so an NVIDIA profile without a bf16 peak is
    Volta or Turing."""
    return any(g.vendor == "nvidia" and "bf16" not in g.peak_tflops for g in gpus)


def nvidia_fused_attention(gpus: Sequence[HardwareProfile]) -> bool:
    """Whether every island's GPU is an NVIDIA part of Ampere or newer, where cuDNN's fused
    attention runs (and there is at least one GPU): not on AMD, not before sm80."""
    return bool(gpus) and all(g.vendor == "nvidia" for g in gpus) and not pre_ampere(gpus)


def training(tables: Mapping[str, Any]) -> Mapping[str, Any]:
    """The raw ``[training]`` table (empty when absent or malformed)."""
    t = tables.get("training")
    return t if isinstance(t, Mapping) else {}


def parallelism(tables: Mapping[str, Any]) -> Mapping[str, Any]:
    """The raw top-level ``[parallelism]`` table (empty when absent or malformed)."""
    p = tables.get("parallelism")
    return p if isinstance(p, Mapping) else {}


def _count(value: Any, default: int = 1) -> int | None:
    """A written count as an int (``default`` when unset), None when it is no count >= 1."""
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def largest_stage_layers(tables: Mapping[str, Any], virtual_stages: int | None = None) -> int:
    """Layers of the largest pipeline stage (of one model chunk) for the scenario's written
    ``pp`` and ``virtual_stages`` (or ``virtual_stages`` given, the profile's own default):
    ``ceil(layers / (pp v))``."""
    par = parallelism(tables)
    layers = int(tables["model"]["layers"])
    pp = _count(par.get("pp"))
    v = _count(virtual_stages if virtual_stages is not None else par.get("virtual_stages"))
    chunks = pp * v if pp is not None and v is not None else 1
    return max(1, math.ceil(layers / chunks))


def data_parallel_size(tables: Mapping[str, Any], gpus: Sequence[HardwareProfile]) -> int | None:
    """The data-parallel ranks of all islands together, as the scenario will resolve them: each
    island's written ``dp`` (its own ``parallelism``, else the top-level one), else
    ``nodes x gpus_per_node / (tp pp cp)``; ``gpus_per_node`` unwritten is the GPU profile's
    (``gpus`` holds one profile per island). None where it cannot be told yet (offers, whose
    nodes ``plan`` chooses; a malformed or unknown entry: the loader reports it)."""
    rows = tables.get("island", tables.get("islands"))
    if tables.get("offer") or not isinstance(rows, list) or not rows:
        return None
    top, total = parallelism(tables), 0
    for k, row in enumerate(rows):
        if not isinstance(row, Mapping):
            return None
        own = row.get("parallelism")
        par = {**top, **(own if isinstance(own, Mapping) else {})}
        dp = _count(par.get("dp"), default=0)
        if dp == 0:
            gpn = row.get("gpus_per_node") or (gpus[k].gpus_per_node if len(gpus) == len(rows) else None)
            sizes = [_count(row.get("nodes"), default=0), _count(gpn, default=0)]
            sizes += [_count(par.get(key)) for key in ("tp", "pp", "cp")]
            if any(not s for s in sizes):
                return None
            nodes, per_node, tp, pp, cp = (int(s or 0) for s in sizes)
            dp = max(1, nodes * per_node // (tp * pp * cp))
        if dp is None:
            return None
        total += dp
    return total


def release(since: str, commit: str, name: str, repo: str | None = None) -> StackVersion:
    """The state of the tagged release ``name`` (at ``commit``, dated ``since``): it changes
    nothing itself, the states before it apply."""
    return StackVersion(
        since=since,
        commit=commit,
        release=name,
        repo=repo,
        change=f"release {name} (tag {name}): the defaults of the states before it",
    )


def read_at(since: str, commit: str, what: str, repo: str | None = None) -> StackVersion:
    """The state at the commit a profile was read at (``what``: the files read); no default
    changed there."""
    return StackVersion(
        since=since,
        commit=commit,
        repo=repo,
        change=f"the commit this profile was read at ({what}); no default changed",
    )
