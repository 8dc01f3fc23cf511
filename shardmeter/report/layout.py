"""The report's resolved layout (``Report.layout``): per island the degrees, gradient
accumulation, layers per stage and parameters per GPU, the keys every island agrees on at the
top."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from shardmeter.model.outputs import Outputs
from shardmeter.model.stages import stage_layers
from shardmeter.resolve.resolver import Resolved, ResolvedIsland

__all__ = ["layout_of", "even_stage_layers", "IslandLayout", "island_layout"]


def _at(x: Any, row: int, j: int | None = None) -> Any:
    """Row ``row`` (island ``j``) of an output array; the scalar path's outputs are plain numbers
    (most of them floats: the exact type first, cheaper than ``isinstance`` of a tuple)."""
    if type(x) is float or isinstance(x, (float, int, bool)):
        return x
    return x[row] if j is None else x[row, j]


def _fat(x: Any, row: int, j: int | None = None) -> float:
    """``float(_at(x, row, j))``: a plain float (the scalar path's outputs) as it is."""
    if type(x) is float:
        return x
    return float(_at(x, row, j))


def even_stage_layers(layers: int, pp: int, v: int, stage: int) -> int:
    """Layers of pipeline stage ``stage`` when ``layers`` split over ``pp x v`` model chunks as
    evenly as they can, the extra layers on the first chunks; a stage holds chunks ``stage``,
    ``stage + pp``, ... (Megatron-LM's interleaved assignment, Narayanan et al. 2021, Sec. 2.2).
    Closed form: each chunk has ``q = layers // (pp v)``, the first ``r = layers % (pp v)`` one
    more, and ``ceil((r - stage) / pp)`` of this stage's ``v`` chunks are among them."""
    q, r = divmod(layers, pp * v)
    return v * q + min(v, max(0, -((stage - r) // pp)))


@attrs.frozen
class IslandLayout:
    """What an island's layout takes from the resolved scenario alone (:func:`island_layout`):
    the keys before ``grad_accumulation`` (``head``), the virtual stages and the first and last
    stages' layers where they differ (``uneven``)."""

    head: dict[str, Any]
    virtual_stages: int
    uneven: dict[str, int]


def island_layout(res: Resolved, isl: ResolvedIsland, j: int) -> IslandLayout:
    """Island ``j``'s :class:`IslandLayout` (Megatron-LM's names where it has one)."""
    sc, par = res.scenario, isl.parallelism
    v = par.virtual_stages if par.pp > 1 else 1
    first = even_stage_layers(sc.model.layers, par.pp, v, 0)
    last = even_stage_layers(sc.model.layers, par.pp, v, par.pp - 1)
    split = par.embedding_in_split or par.loss_in_split
    if par.pp > 1 and (par.first_stage_layers or par.last_stage_layers or split):
        st = stage_layers(
            float(sc.model.layers), float(par.pp), float(v),
            float(par.first_stage_layers or 0), float(par.last_stage_layers or 0),
            float(par.embedding_in_split), float(par.loss_in_split),
        )  # fmt: skip
        first, last = round(st.first), round(st.last)
        uneven = {"first_stage_layers": first, "last_stage_layers": last}
    else:
        uneven = {"first_stage_layers": first, "last_stage_layers": last} if first != last else {}
    head = {
        "tp": par.tp,
        "pp": par.pp,
        "cp": par.cp,
        "ep": par.ep,
        "dp": isl.dp,
        "gpus": isl.gpus_used,
        "sequence_parallel": par.sequence_parallel,
        "sharding": par.sharding,
        "schedule": par.schedule,
        "virtual_stages": v,
        "micro_batch": sc.micro_batch(j),
    }
    return IslandLayout(head, v, uneven)


def _island_layout(fixed: IslandLayout, out: Outputs, row: int, j: int) -> dict[str, Any]:
    """One island's resolved layout: ``fixed``'s keys and the outputs' (a new dict each time)."""
    o = out.island
    largest = round(_fat(o.layers_per_stage, row, j))
    return {
        **fixed.head,
        "grad_accumulation": round(_fat(o.micro_batches, row, j)),
        "batch_per_step": _fat(o.batch_sequences, row, j),
        "layers_per_stage": largest,
        "layers_per_virtual_stage": largest // fixed.virtual_stages,
        **fixed.uneven,
        "params_per_gpu": _fat(o.params_per_gpu, row, j),
        "params_per_gpu_sharded": _fat(o.params_per_gpu_sharded, row, j),
    }


def layout_of(
    res: Resolved, out: Outputs, row: int, fixed: Sequence[IslandLayout] | None = None
) -> dict[str, Any]:
    """The resolved layout: per island ``tp``, ``pp``, ``cp``, ``ep``, ``dp``, ``gpus``,
    ``sequence_parallel``, ``sharding``, ``schedule``, ``virtual_stages``, ``micro_batch``,
    ``grad_accumulation`` (micro-batches per step per pipeline), ``batch_per_step``
    (sequences), ``layers_per_stage`` (the stage the model times: ``virtual_stages`` chunks
    of ``layers_per_virtual_stage``; ``first_stage_layers`` / ``last_stage_layers`` of an even
    split where the stages differ), ``layers_per_virtual_stage``, ``params_per_gpu``
    (the largest stage's tensor / expert slice) and ``params_per_gpu_sharded`` (what the
    sharding strategy leaves one GPU). The keys every island agrees on are at the top, with
    ``params``, ``global_batch`` and ``dp_total`` (replicas over all islands); ``islands``
    lists each island's (with its ``name``) where they differ. ``fixed``: each island's
    :func:`island_layout`, where the caller keeps them."""
    if out.island.layers_per_stage is None:
        return {}
    if fixed is None:
        fixed = [island_layout(res, isl, j) for j, isl in enumerate(res.islands)]
    if len(fixed) == 1:  # one island agrees with itself on every key: its own dict, at the top
        top = _island_layout(fixed[0], out, row, 0)
        top["dp_total"] = 0 + top["dp"]  # sum() of one: its int start plus it
        top["global_batch"] = res.scenario.training.global_batch
        top["params"] = _fat(out.params, row)
        return top
    per = [_island_layout(f, out, row, j) for j, f in enumerate(fixed)]
    top = {k: v for k, v in per[0].items() if all(k in p and p[k] == v for p in per[1:])}
    top |= {
        "dp_total": sum(p["dp"] for p in per),
        "global_batch": res.scenario.training.global_batch,
        "params": _fat(out.params, row),
    }
    if any(p != per[0] for p in per[1:]):
        top["islands"] = [{"name": isl.name, **p} for isl, p in zip(res.islands, per, strict=True)]
    return top
