"""The ``time-to-quality`` and ``cost-to-quality`` objectives of ``plan``.

They rank plans by the wall-clock time (dollar cost) to the loss data-parallel training reaches
with ``training.tokens``: the raw figure times the convergence model's tokens factor
(:func:`~shardmeter.model.convergence.tokens_factor`; ``docs/convergence.md``). The model
is the one ``[sync] convergence`` names, ``"diloco-fits"`` when none is set (it is then set on
the scenario, so every plan's report carries its ``quality`` object). The factor of a plan
depends on its sync strategy and options, its islands used (replicas) and the model's
parameters only, so within one class of the per-island search (node counts, micro-batch,
recompute, sync option) it is a constant and the class's fastest plan stays its best.
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike

from shardmeter.inputs.bundles import PartTable
from shardmeter.load.specs import Scenario
from shardmeter.model.convergence import tokens_factor
from shardmeter.parts import ConvergencePart

__all__ = ["QUALITY_OBJECTIVES", "DEFAULT_CONVERGENCE", "with_quality", "quality_factor"]

#: Objective -> the raw figure it scales.
QUALITY_OBJECTIVES = {"time-to-quality": "time", "cost-to-quality": "cost"}
#: The convergence model used when the scenario names none.
DEFAULT_CONVERGENCE = "diloco-fits"


def with_quality(sc: Scenario, objective: str) -> Scenario:
    """Scenario ``sc`` with ``[sync] convergence = DEFAULT_CONVERGENCE`` (on the record,
    ``attrs.evolve``) when ``objective`` prices quality and it names no convergence model;
    else ``sc``."""
    if objective in QUALITY_OBJECTIVES and sc.sync.convergence in (None, "none"):
        return attrs.evolve(sc, sync=attrs.evolve(sc.sync, convergence=DEFAULT_CONVERGENCE))
    return sc


def quality_factor(
    model: ConvergencePart | None,
    table: PartTable,
    sync_codes: ArrayLike,
    params: ArrayLike,
    replicas: ArrayLike,
) -> np.ndarray:
    """Each plan's tokens factor (arrays that broadcast); 1 where ``model`` is ``None``."""
    codes = np.asarray(sync_codes, dtype=np.int64)
    shape = np.broadcast_shapes(codes.shape, np.shape(params), np.shape(replicas))
    if model is None:
        return np.ones(shape)
    factor, _ = tokens_factor(
        model,
        table,
        np.broadcast_to(codes, shape),
        params=np.broadcast_to(np.asarray(params, dtype=float), shape),
        replicas=np.broadcast_to(np.asarray(replicas, dtype=float), shape),
    )
    return np.asarray(factor, dtype=float)
