"""Layers of each pipeline stage: an even split, or Megatron-LM's uneven first and last stages.

Three stages stand for all of them (the ones a step's pace and the busiest GPU's memory can
come from): the first (rank 0: the embedding, and the most micro-batches in flight), the
busiest middle one (rank 1: the most in flight after rank 0) and the last (rank ``p - 1``: the
output layer and the loss). With ``pp = 1`` the three are the one stage; with ``pp = 2`` the
middle one is the last.
"""

from __future__ import annotations

import math

import attrs

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["StageLayers", "stage_layers", "even_stage_layers"]


@attrs.frozen(kw_only=True)
class StageLayers:
    """Transformer layers on the ``first``, ``middle`` (rank 1) and ``last`` stages, and ``bad``:
    the first/last split breaks Megatron-LM's rule (see :func:`stage_layers`)."""

    first: Array
    middle: Array
    last: Array
    bad: Array


def even_stage_layers(layers: Array, pp: Array, v: Array, rank: Array) -> Array:
    """Layers of stage ``rank`` when ``layers`` split over ``pp x v`` model chunks as evenly as
    they can, the extra layers on the first chunks; a stage holds chunks ``rank``, ``rank + pp``,
    ... (Megatron-LM's interleaved assignment, Narayanan et al. 2021, Sec. 2.2). Each chunk has
    ``q = floor(L / (p v))`` layers, the first ``r = L - q p v`` one more, and
    ``ceil((r - rank) / p)`` of the stage's ``v`` chunks are among them (``report._stage_layers``
    is the same closed form on integers)."""
    q = ops.floor(layers / (pp * v))
    r = layers - q * pp * v
    extra = ops.minimum(v, ops.maximum(0.0, -ops.floor((rank - r) / pp)))
    return v * q + extra


def _even_floats(layers: float, pp: float, v: float, rank: float) -> float:
    """:func:`even_stage_layers` of plain floats: the same operations in the same order,
    ``ops.floor`` (inf and nan kept), ``maximum`` and ``minimum`` (nan where neither side is
    the larger) written out. tests/test_scalar_twins.py holds it to the arrays to the bit."""
    nan = math.nan
    x = layers / (pp * v)
    q = float(math.floor(x)) if x - x == 0.0 else x
    r = layers - q * pp * v
    y = (rank - r) / pp
    y = -(float(math.floor(y)) if y - y == 0.0 else y)
    y = 0.0 if y <= 0.0 else (y if y > 0.0 else nan)
    extra = v if v <= y else (y if y < v else nan)
    return v * q + extra


def stage_layers(
    layers: Array, pp: Array, v: Array, first: Array, last: Array, emb: Array = 0.0, loss: Array = 0.0
) -> StageLayers:
    """Layers of the first, middle and last stages (``first`` / ``last`` > 0: set, 0: unset).

    Unset, the split is :func:`even_stage_layers`. Set, as Megatron-LM's
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
    (``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build`` at
    NVIDIA/Megatron-LM@d98e8a64): the stage(s) given hold that many layers and the others
    (an unset end stage among them) ``(L - first - last) / (p - #set)`` each. Megatron-LM's
    ``TransformerConfig.__post_init__`` refuses (``bad`` here) a remainder that does not divide
    over the middle stages, middle layers without middle stages or the reverse, and, with
    virtual stages, a first, last or middle count that is not a multiple of ``v``.

    ``emb`` / ``loss`` (``embedding_in_split`` / ``loss_in_split``, only with ``pp > 1``): the
    same function's other branch, ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split``: ``num_layers += 1`` for each, split over the ranks
    and their ``v`` chunks, and the first chunk of the first stage (the last chunk of the last
    stage) builds one transformer layer fewer. Megatron asserts ``num_layers % pp == 0`` and,
    interleaved, ``(num_layers / pp) % v == 0`` there, and refuses either flag with a first or
    last stage count ("Does not support standalone embedding stage and standalone loss stage
    with uneven pp"): ``bad``."""
    emb_f, loss_f = ops.as_float(emb), ops.as_float(loss)
    if set(map(type, (layers, pp, v, first, last, emb_f, loss_f))) <= ops.ONLY_FLOAT:
        # one plan: its conditions as plain ifs
        return _one_stage_layers(layers, pp, v, first, last, emb_f, loss_f)
    split = (emb_f + loss_f) * ops.where(pp > 1, 1.0, 0.0)
    e = ops.where(pp > 1, emb_f, 0.0)
    lo = ops.where(pp > 1, loss_f, 0.0)
    set_f, set_l, uneven, n_mid, per_mid, units, bad = _split_checks(layers, pp, v, first, last, split)
    mid_u = ops.where(n_mid > 0, per_mid, 0.0)
    last_rank = ops.maximum(pp - 1.0, 0.0)
    first_n = ops.where(uneven, ops.where(set_f, first, mid_u), even_stage_layers(units, pp, v, 0.0) - e)
    last_n = ops.where(
        uneven,
        ops.where(set_l & (pp > 1), last, ops.where(pp > 1, mid_u, first_n)),
        even_stage_layers(units, pp, v, last_rank) - lo,
    )
    mid_n = ops.where(
        pp > 2,
        ops.where(uneven, mid_u, even_stage_layers(units, pp, v, 1.0)),
        ops.where(pp > 1, last_n, first_n),
    )
    return StageLayers(first=first_n, middle=mid_n, last=last_n, bad=bad)


def _one_stage_layers(
    layers: float, pp: float, v: float, first: float, last: float, emb: float, loss: float
) -> StageLayers:
    """:func:`stage_layers` of one plan (plain numbers): the same operations in the same order,
    each ``ops.where`` a conditional expression (the value it picks), and only the split the plan
    has (uneven or even) worked out; the checks are :func:`_split_checks`, shared.
    tests/test_scalar_twins.py holds it to the general code."""
    multi = pp > 1
    split = (emb + loss) * (1.0 if multi else 0.0)
    e = emb if multi else 0.0
    lo = loss if multi else 0.0
    set_f, set_l, uneven, n_mid, per_mid, units, bad = _split_checks(layers, pp, v, first, last, split)
    mid_u = per_mid if n_mid > 0 else 0.0
    if uneven:
        first_n = first if set_f else mid_u
        last_n = last if set_l & multi else (mid_u if multi else first_n)
        mid_n = mid_u if pp > 2 else (last_n if multi else first_n)
    else:
        x = pp - 1.0
        last_rank = x if x >= 0.0 else (0.0 if x < 0.0 else math.nan)
        first_n = _even_floats(units, pp, v, 0.0) - e
        last_n = _even_floats(units, pp, v, last_rank) - lo
        mid_n = _even_floats(units, pp, v, 1.0) if pp > 2 else (last_n if multi else first_n)
    return StageLayers(first=first_n, middle=mid_n, last=last_n, bad=bad)


def _split_checks(layers: Array, pp: Array, v: Array, first: Array, last: Array, split: Array) -> tuple:
    """What both paths of :func:`stage_layers` share (its ``ops`` take plain numbers and arrays
    alike): whether a first / last stage count is set (``set_f``, ``set_l``, ``uneven``), the
    middle stages (``n_mid``) and their layers each (``per_mid``), the split's units (its
    layers, the embedding and the loss among them) and the layout's ``bad`` flag."""
    set_f, set_l = first > 0, last > 0
    uneven = set_f | set_l
    if type(uneven) is bool and set(map(type, (layers, pp, v, first, last, split))) <= ops.ONLY_FLOAT:
        return _one_split_checks(layers, pp, v, first, last, split, set_f, set_l, uneven)
    n_mid = pp - ops.where(set_f, 1.0, 0.0) - ops.where(set_l, 1.0, 0.0)
    rest = layers - first - last
    per_mid = rest / ops.maximum(n_mid, 1.0)
    bad = uneven & (
        (rest < 0)
        | (n_mid < 0)
        | ((rest > 0) != (n_mid > 0))
        | ((n_mid > 0) & (ops.mod(rest, ops.maximum(n_mid, 1.0)) != 0))
        | ((n_mid > 0) & (ops.mod(per_mid, v) != 0))
        | (set_f & (ops.mod(first, v) != 0))
        | (set_l & (ops.mod(last, v) != 0))
    )
    units = layers + split
    per_rank = units / ops.maximum(pp, 1.0)
    bad = bad | (
        (split > 0) & (uneven | (ops.mod(units, ops.maximum(pp, 1.0)) != 0) | (ops.mod(per_rank, v) != 0))
    )
    return set_f, set_l, uneven, n_mid, per_mid, units, bad


def _one_split_checks(
    layers: float,
    pp: float,
    v: float,
    first: float,
    last: float,
    split: float,
    set_f: bool,
    set_l: bool,
    uneven: bool,
) -> tuple:
    """:func:`_split_checks` of one plan (plain numbers): the same figures, each ``ops.where`` the
    value it picks and ``ops.maximum`` written out, and the ``bad`` flag's divisibility checks
    only where they count (an uneven split; the embedding or loss in the split), as the bools'
    ``&`` gives. tests/test_scalar_twins.py holds it to the arrays."""
    nan = math.nan
    n_mid = pp - (1.0 if set_f else 0.0) - (1.0 if set_l else 0.0)
    rest = layers - first - last
    n1 = n_mid if n_mid >= 1.0 else (1.0 if n_mid < 1.0 else nan)
    per_mid = rest / n1
    bad = uneven and (
        rest < 0
        or n_mid < 0
        or ((rest > 0) != (n_mid > 0))
        or (n_mid > 0 and ops.mod(rest, n1) != 0)
        or (n_mid > 0 and ops.mod(per_mid, v) != 0)
        or (set_f and ops.mod(first, v) != 0)
        or (set_l and ops.mod(last, v) != 0)
    )
    units = layers + split
    p1 = pp if pp >= 1.0 else (1.0 if pp < 1.0 else nan)
    per_rank = units / p1
    if split > 0:
        bad = bad or uneven or ops.mod(units, p1) != 0 or ops.mod(per_rank, v) != 0
    return set_f, set_l, uneven, n_mid, per_mid, units, bool(bad)
