"""The planner's structural checks: every reason bit :func:`~shardmeter.model.evaluate.evaluate`
would set that needs no model (layout sizes, batch split, virtual stages, layers, the
schedule's own verdict), computed with the same functions
(:mod:`shardmeter.model.feasibility`, :meth:`~shardmeter.SchedulePart.infeasible`), so a plan is
rejected for the same reason before and after the full model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from shardmeter.model.dispatch import by_code
from shardmeter.model.feasibility import Reason, batch_reasons, batch_split, layout_reasons
from shardmeter.numeric.reduce import over_islands
from shardmeter.parts import PipeInputs

if TYPE_CHECKING:  # annotations only: the space module imports this one
    from shardmeter.explore.search.space import Space

__all__ = ["STRUCTURAL_INPUTS", "layout_reason_bits", "structural_bits"]

#: Model input columns read by :func:`structural_bits`.
STRUCTURAL_INPUTS = frozenset(
    {
        "layout.dp",
        "training.micro_batch",
        "layout.pp",
        "training.global_batch",
        "training.island_batch",
        "layout.virtual_stages",
        "layout.schedule",
        "model.layers",
        "layout.tp",
        "layout.cp",
        "layout.ep",
        "topology.nodes",
        "topology.gpus_per_node",
        "model.heads",
        "model.seq_len",
        "model.experts",
    }
)


def layout_reason_bits(layout, base) -> np.ndarray:
    """Reasons that depend on the layout alone, as ``evaluate`` sets them."""

    def f(k):
        return np.asarray(base[k], dtype=float)

    tp, pp, cp, ep = (layout[k].astype(float)[:, None] for k in ("tp", "pp", "cp", "ep"))
    dp = layout["dp"].astype(float)
    nodes = layout["nodes"].astype(float) if "nodes" in layout else f("topology.nodes")
    bits = layout_reasons(
        f("model.heads"),
        f("model.seq_len"),
        f("model.experts"),
        tp,
        pp,
        cp,
        dp,
        ep,
        nodes * f("topology.gpus_per_node"),
    )
    return np.bitwise_or.reduce(np.atleast_2d(bits), axis=-1)


def structural_bits(space: Space, cols: Mapping[str, np.ndarray], layout_bits: np.ndarray) -> np.ndarray:
    """Every reason bit ``evaluate`` would set that does not need the full model (all but memory
    and precision), with the same functions (:mod:`shardmeter.model.feasibility`, the schedule's
    own :meth:`~shardmeter.SchedulePart.infeasible`)."""

    def g(k):
        return np.asarray(cols[k] if k in cols else space.base[k], dtype=float)

    dp, pp = g("layout.dp"), g("layout.pp")
    island_batch = (
        g("training.island_batch")
        if "training.island_batch" in cols or ("training.island_batch" in space.base)
        else 0.0
    )
    _, m, m_int = batch_split(g("training.global_batch"), dp, g("training.micro_batch"), island_batch)
    v = np.where(pp > 1, np.maximum(g("layout.virtual_stages"), 1.0), 1.0)
    bits = batch_reasons(
        m, pp, v, g("model.layers"), g("layout.first_stage_layers"), g("layout.last_stage_layers")
    )
    pipe = PipeInputs(
        pp=pp,
        micro_batches=m_int,
        virtual_stages=v,
        stage_s=np.zeros(()),
        forward_s=np.zeros(()),
        weight_grad_s=np.zeros(()),
    )

    def run(code: int) -> dict[str, Any]:
        part, opts = space.table.get("schedule", code)
        return {"bad": np.asarray(part.infeasible(pipe, opts), dtype=float)}

    bad = by_code(g("layout.schedule"), run)["bad"]
    bits = bits | np.where(bad > 0, int(Reason.SCHEDULE), 0)
    return over_islands(np.bitwise_or, np.asarray(bits, dtype=np.int64), keepdims=False) | layout_bits
