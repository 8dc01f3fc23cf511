"""Stragglers: a step's quantile when ranks vary (``[variability]``).

A synchronous step is a sequence of phases separated by collectives, and each phase ends when
its slowest rank does: the step is the sum over phases of the max over ranks. Each exposed
term of the breakdown is one such phase; the variability part gives the ``q``-quantile of the
slowest of its ranks over one rank's mean (:meth:`~shardmeter.parts.VariabilityPart.quantile_factor`):

* GPU phases (``compute``, ``memory_ops``, ``pp_bubble``, ``optimizer``, ``idle``): the job's
  GPUs, at the part's ``"gpu"`` variability;
* transfers (``tp_comm``, ``cp_comm``, ``ep_comm``, ``pp_comm``, ``dp_comm``, ``offload``):
  one transfer per GPU, at its ``"link"`` variability;
* ``island_sync`` (the cross-island all-reduce, DiLoCo's outer sync): one transfer per island
  uplink, at the ``"link"`` variability.

The step's quantile is the sum of the phases' quantiles, exact when the phases' slowest ranks
move together (comonotone) and never below the deterministic step. It is written
``step + sum(term x (factor - 1))``, so a part without variability (every factor 1) returns
the deterministic step exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardmeter.numeric.ops import Array
from shardmeter.parts import VariabilityPart
from shardmeter.registry.guard import run_part

__all__ = ["GPU_TERMS", "LINK_TERMS", "WAN_TERMS", "step_quantile"]

GPU_TERMS = ("compute", "memory_ops", "pp_bubble", "optimizer", "idle")
LINK_TERMS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "offload")
WAN_TERMS = ("island_sync",)


def step_quantile(
    step_s: Array,
    terms_s: Mapping[str, Array],
    gpus: Array,
    islands: Array,
    q: float,
    part: VariabilityPart,
    opts: Any,
) -> Array:
    """The ``q``-quantile of the step (module docstring) from its exposed ``terms_s``."""
    extra: Array = 0.0
    for name, t in terms_s.items():
        if name in WAN_TERMS:
            f = run_part("variability", part, "quantile_factor", q, islands, "link", opts)
        elif name in LINK_TERMS:
            f = run_part("variability", part, "quantile_factor", q, gpus, "link", opts)
        else:  # GPU_TERMS, and any term a later release adds: the GPU's own time
            f = run_part("variability", part, "quantile_factor", q, gpus, "gpu", opts)
        extra = extra + t * (f - 1.0)
    return step_s + extra
