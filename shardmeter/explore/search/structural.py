"""The planner's structural checks: every reason bit :func:`~shardmeter.model.evaluate.evaluate`
would set that needs no model (layout sizes, batch split, virtual stages, layers, the
schedule's and the sharding strategy's own verdicts), computed with the same functions
(:mod:`shardmeter.model.feasibility`, :meth:`~shardmeter.SchedulePart.infeasible`,
:meth:`~shardmeter.ShardingPart.infeasible` through
:func:`~shardmeter.model.feasibility.sharding_reasons`), so a plan is rejected for the same
reason before and after the full model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from shardmeter.inputs.bundles import Topology
from shardmeter.model.dispatch import by_code
from shardmeter.model.feasibility import Reason, batch_reasons, batch_split, layout_reasons, sharding_reasons
from shardmeter.numeric.reduce import over_islands
from shardmeter.parts import PipeInputs

if TYPE_CHECKING:  # annotations only: the space module imports this one
    from shardmeter.explore.search.space import Space

__all__ = [
    "STRUCTURAL_INPUTS",
    "batch_schedule_bits",
    "layout_reason_bits",
    "structural_bits",
    "inner_structural_bits",
]

#: Model input columns read by :func:`structural_bits`; an axis that sets one is structural (it
#: leads the candidate numbering). Not listed: the sharding strategy (``layout.sharding``) and the
#: tiers its verdict reads, so the sharding axis stays inner (after recompute, as the candidate
#: ids have always been numbered): its verdict is the pre-check's where the prefix fixes the
#: strategy, else per candidate (:func:`inner_structural_bits`).
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


def layout_reason_bits(layout: Mapping[str, np.ndarray], base: Mapping[str, np.ndarray]) -> np.ndarray:
    """Reasons that depend on the layout alone, as ``evaluate`` sets them."""

    def f(k: str) -> np.ndarray:
        return np.asarray(base[k], dtype=float)

    tp, pp, cp, ep = (layout[k].astype(float)[:, None] for k in ("tp", "pp", "cp", "ep"))
    dp = layout["dp"].astype(float)
    etp_w = f("layout.expert_tp") if "layout.expert_tp" in base else np.zeros(1)
    etp = np.where(etp_w > 0, etp_w, tp)
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
        etp,
    )
    return np.bitwise_or.reduce(np.atleast_2d(bits), axis=-1)


def _tiers(cols: Mapping[str, np.ndarray], space: Space) -> dict[str, np.ndarray]:
    """The tier columns (rows, islands, tiers) of a prefix batch, as the model reads them."""
    return {
        k: np.asarray(cols[f"topology.{k}"] if f"topology.{k}" in cols else space.base[f"topology.{k}"])
        for k in ("tier_gpus", "tier_bytes_s", "tier_latency_s")
    }


def _fixed_sharding(space: Space, g: Callable[[str], np.ndarray]) -> np.ndarray | None:
    """The sharding codes of a prefix batch when its prefixes fix them (no inner axis varies the
    strategy: an inner axis of one value sets it for all), else None."""
    inner = [a.cols["layout.sharding"] for a in space.axes[space.n_struct :] if "layout.sharding" in a.cols]
    if any(np.unique(c).size > 1 for c in inner):
        return None
    return np.asarray(inner[0][:1], dtype=float) if inner else g("layout.sharding")


def _sharding_bits(
    space: Space, cols: Mapping[str, np.ndarray], g: Callable[[str], np.ndarray], codes: np.ndarray
) -> np.ndarray:
    """:func:`~shardmeter.model.feasibility.sharding_reasons` of the degrees and tiers ``g``
    reads, with sharding ``codes``."""
    topo = Topology(
        **{k: g(f"topology.{k}") for k in ("gpus_per_node", "nodes", "domain_gpus")}, **_tiers(cols, space)
    )
    return sharding_reasons(space.table, codes, g("layout.tp"), g("layout.dp"), g("layout.cp"), topo)


def inner_structural_bits(space: Space, cols: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The structural reason bits that vary with the inner options, ``(prefixes, R_in)``, of a
    prefix batch (``cols``: its columns, as :func:`structural_bits` takes them): the sharding
    strategy's own verdict where an inner axis varies the strategy; None where none does (then
    :func:`structural_bits` has it)."""

    def g0(k: str) -> np.ndarray:
        return np.asarray(cols[k] if k in cols else space.base[k], dtype=float)

    if _fixed_sharding(space, g0) is not None:
        return None
    inner = space.inner_columns()  # (1, R_in, ...)
    wide = {k: np.asarray(v)[:, None] for k, v in cols.items()}  # (prefixes, 1, ...)

    def g(k: str) -> np.ndarray:
        return np.asarray(inner[k] if k in inner else wide[k] if k in wide else space.base[k], dtype=float)

    bits = _sharding_bits(space, {**wide, **inner}, g, g("layout.sharding"))
    shape = (len(next(iter(wide.values()))) if wide else 1, space.R_in)
    bits = np.broadcast_to(bits, np.broadcast_shapes(np.shape(bits), (*shape, 1)))
    return over_islands(np.bitwise_or, np.asarray(bits, dtype=np.int64), keepdims=False)


def structural_bits(space: Space, cols: Mapping[str, np.ndarray], layout_bits: np.ndarray) -> np.ndarray:
    """Every reason bit ``evaluate`` would set that does not need the full model (all but memory
    and precision), with the same functions (:mod:`shardmeter.model.feasibility`, the schedule's
    own :meth:`~shardmeter.SchedulePart.infeasible`, and the sharding strategy's own
    :meth:`~shardmeter.ShardingPart.infeasible` where the prefix fixes the strategy; a sharding
    axis of several options is inner: :func:`inner_structural_bits` has its verdicts)."""

    def g(k: str) -> np.ndarray:
        return np.asarray(cols[k] if k in cols else space.base[k], dtype=float)

    dp = g("layout.dp")
    island_batch = (
        g("training.island_batch")
        if "training.island_batch" in cols or ("training.island_batch" in space.base)
        else 0.0
    )
    _, m, m_int = batch_split(g("training.global_batch"), dp, g("training.micro_batch"), island_batch)
    bits = batch_schedule_bits(space, g, m, m_int)
    codes = _fixed_sharding(space, g)
    if codes is not None:  # the prefix fixes the sharding strategy (else inner_structural_bits)
        bits = bits | _sharding_bits(space, cols, g, codes)
    return over_islands(np.bitwise_or, np.asarray(bits, dtype=np.int64), keepdims=False) | layout_bits


def batch_schedule_bits(
    space: Space, g: Callable[[str], np.ndarray], m: np.ndarray, pipe_m: np.ndarray | None = None
) -> np.ndarray:
    """The batch split's and the stage split's reason bits
    (:func:`~shardmeter.model.feasibility.batch_reasons`) and the schedule's own verdict
    (:meth:`~shardmeter.SchedulePart.infeasible`) at ``m`` micro-batches per replica, the layout
    read through ``g`` (a column by its input name): shared by :func:`structural_bits` and the
    per-island search (:mod:`.island_candidates`), so both reject a layout for the same reason.
    ``pipe_m``: the whole micro-batch count the schedule sees (default ``m``), as
    :func:`~shardmeter.model.feasibility.batch_split` rounds it."""
    pp = g("layout.pp")
    v = np.where(pp > 1, np.maximum(g("layout.virtual_stages"), 1.0), 1.0)
    mf = np.asarray(m, dtype=float)
    bits = batch_reasons(
        mf,
        pp,
        v,
        g("model.layers"),
        g("layout.first_stage_layers"),
        g("layout.last_stage_layers"),
        g("layout.embedding_in_split"),
        g("layout.loss_in_split"),
    )
    pipe = PipeInputs(
        pp=pp,
        micro_batches=mf if pipe_m is None else np.asarray(pipe_m, dtype=float),
        virtual_stages=v,
        stage_s=np.zeros(()),
        forward_s=np.zeros(()),
        weight_grad_s=np.zeros(()),
    )

    def run(code: int) -> dict[str, np.ndarray]:
        part, opts = space.table.get("schedule", code)
        return {"bad": np.asarray(part.infeasible(pipe, opts), dtype=float)}

    bad = np.broadcast_to(by_code(g("layout.schedule"), run)["bad"], np.shape(bits))
    return np.asarray(bits, dtype=np.int64) | np.where(bad > 0, int(Reason.SCHEDULE), 0)
