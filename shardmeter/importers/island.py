"""The ``[[island]]`` of ``--gpu NAME --gpus N`` (``shardmeter init`` and ``shardmeter import``).

A node holds the GPU profile's ``gpus_per_node`` (its usual server: 8 for an HGX board, 4 for a
GB200 tray), or all N GPUs when N is smaller; ``nodes = N / gpus_per_node``, and an N that is not
a whole number of nodes is an error naming ``--gpus``. The links are left to the profile's
defaults (``intra_node``, ``inter_node``), which the comment names."""

from __future__ import annotations

from typing import Any

from shardmeter.errors import ShardMeterError

__all__ = ["island_table", "node_size", "PLACEHOLDER_GPU", "MAX_GPUS"]

#: The ``gpu`` written when no ``--gpu`` is given: ``estimate`` rejects it, naming the key.
PLACEHOLDER_GPU = "GPU-NAME"

#: The most GPUs ``--gpus`` takes (a scenario's counts are at most 2**40).
MAX_GPUS = 1 << 40


def _profile(gpu: str, registry=None):
    from shardmeter.registry.manager import get_registry

    reg = registry if registry is not None else get_registry()
    try:
        return reg.get("hardware", gpu)
    except ShardMeterError as exc:  # unknown name, with close matches
        raise ShardMeterError(f"--gpu: {getattr(exc, 'message', exc)}") from None


def node_size(gpu: str | None, registry=None) -> int:
    """GPUs in one of ``gpu``'s usual nodes (8 without a GPU: an HGX/DGX node)."""
    return 8 if gpu is None else int(_profile(gpu, registry).gpus_per_node)


def island_table(gpu: str | None, gpus: int, registry=None) -> tuple[dict[str, Any], dict[str, str]]:
    """The island's keys for ``gpus`` GPUs of ``gpu`` (``None``: the placeholder) and a comment
    per key."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ShardMeterError(f"--gpus: expected a whole number of GPUs >= 1, got {gpus!r}")
    if gpus > MAX_GPUS:
        raise ShardMeterError(f"--gpus: at most {MAX_GPUS:,} GPUs, got {gpus:,}")
    usual = node_size(gpu, None if gpu is None else registry)
    per_node = min(usual, gpus)
    if gpus % per_node:
        raise ShardMeterError(
            f"--gpus {gpus} is not a whole number of {per_node}-GPU {gpu or ''} nodes".replace("  ", " ")
            + f"; give a multiple of {per_node}"
        )
    why = {}
    if gpu is None:
        why["gpu"] = "placeholder: give --gpu, or write a GPU name (shardmeter plugins lists them)"
        table: dict[str, Any] = {"gpu": PLACEHOLDER_GPU}
    else:
        prof = _profile(gpu, registry)
        links = ", ".join(x for x in (prof.intra_node, prof.inter_node) if x) or "the defaults"
        why["gpu"] = f"--gpu; links default to the profile's usual ones ({links})"
        table = {"gpu": gpu}
    table["nodes"] = gpus // per_node
    table["gpus_per_node"] = per_node
    why["nodes"] = f"{gpus} GPUs / {per_node} per node"
    why["gpus_per_node"] = (
        f"the GPU's usual node ({usual})" if per_node == usual else f"all {gpus} GPUs in one node"
    )
    return table, why
