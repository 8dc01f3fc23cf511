"""One optimizer step of a batch of plans, vectorised over plans and islands.

:func:`evaluate` takes :class:`~.inputs.ModelInputs` (arrays broadcastable to ``(N, I)``: N
plans, I islands) and the :class:`~.inputs.PartTable` their codes index, and returns the step
time and its breakdown, memory, throughput and feasibility (a :class:`~.feasibility.Reason`
mask). No Python loop runs per plan; strategies run once per group of rows that uses them.

The composition (per island, per pipeline stage; Narayanan et al. 2021):
``step = m (t_f + t_b + exposed TP/CP/EP/sharding comm + exposed activation offload) + bubble
+ pipeline p2p + exposed data-parallel comm + optimizer``, then islands are combined by the sync strategy
(:mod:`.islands`). Stages: :mod:`.compute`, :mod:`.comm`, the sharding and schedule parts,
:mod:`.memory`, :mod:`.islands`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from shardmeter.inputs.bundles import ModelInputs, PartTable, Topology
from shardmeter.model.comm import PricedTraffic, exposed_traffic, layer_comm, price_traffic
from shardmeter.model.compute import full_recompute_share, local_shapes, micro_batch_compute
from shardmeter.model.dispatch import by_code
from shardmeter.model.feasibility import Reason, batch_reasons, batch_split, layout_reasons, sharding_reasons
from shardmeter.model.formulas import (
    KERNEL_OVERHEAD_S,
    layers_forward_flops,
    model_flops_per_token,
    model_params,
    offload_exposed_s,
    op_recompute_flops_per_token,
    params_per_layer,
)
from shardmeter.model.islands import IslandSteps, combine_islands
from shardmeter.model.memory import activation_memory, layer_activations, memory_parts, total_memory
from shardmeter.model.stages import stage_layers
from shardmeter.model.tiers import span_link
from shardmeter.numeric import ops
from shardmeter.parts import PipeInputs, ShardInputs

__all__ = ["evaluate", "evaluate_columns", "island_memory", "BREAKDOWN_TERMS", "ADAM_BYTES_PER_PARAM"]

#: Names of the breakdown terms, in report order.
BREAKDOWN_TERMS = (
    "compute",
    "memory_ops",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "pp_bubble",
    "dp_comm",
    "offload",
    "optimizer",
    "island_sync",
    "idle",
)

#: Bytes moved per parameter by the Adam update (read fp32 grad 4, master weight, m and v
#: 3 x (4 + 4), write 16-bit weight 2): a memory-bound kernel.
ADAM_BYTES_PER_PARAM = 30.0


_f = ops.as_float


def evaluate(
    inp: ModelInputs, parts: PartTable, *, detail: bool = True, islands_only: bool = False
) -> dict[str, Any]:
    """Score every plan in the batch. See the module docstring. ``detail=False`` returns only
    what a search ranks by (:data:`~.islands.SEARCH_OUTPUTS`), skipping the breakdown;
    ``islands_only=True`` with it returns only the per-island outputs (``reasons``,
    ``island_step_s``, ``feasible_island``, ``island_ar_window_s``, ``island_grad_bytes``,
    ``island_memory_bytes``, ``params``), skipping the cross-island sync terms (a per-island search discards them).

    Inputs built as Python floats (``build_inputs(scalar=True)``: one plan on one island) take
    the scalar fast path: the same formulas through :mod:`.ops` at a fraction of numpy's
    per-call cost, with plain numbers as outputs; a division by zero there (degenerate numbers)
    falls back to the array path, whose inf / nan semantics decide.

    Infeasible rows may divide by zero on the way; their outputs are masked by
    ``feasible``/``reasons``, so those floating-point warnings are silenced here (and only here).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if ops.is_scalar(inp.layout.tp):
            try:
                return _evaluate(inp, parts, detail, islands_only)
            except (ZeroDivisionError, OverflowError, ValueError):
                inp = _as_arrays(inp)
        return _evaluate(inp, parts, detail, islands_only)


_BUNDLES = ("model", "training", "hardware", "topology", "layout", "network")


def _as_arrays(inp: ModelInputs) -> ModelInputs:
    """Scalar inputs as a batch of one row on one island (a tier tuple becomes the tier axis)."""
    out = {}
    for b in _BUNDLES:
        bundle = getattr(inp, b)
        out[b] = type(bundle)(
            **{a.name: np.asarray([[getattr(bundle, a.name)]]) for a in attrs.fields(type(bundle))}
        )
    return ModelInputs(**out)


def evaluate_columns(cols: Mapping[str, Any], parts: PartTable) -> dict[str, Any]:
    """:func:`evaluate` of flat input columns (``"layout.tp"``, ...: how the planner and the
    sweep carry batches)."""
    return evaluate(ModelInputs.from_columns(cols), parts)


def _sharding(parts: PartTable, shard: ShardInputs, topo: Topology, codes) -> dict[str, Any]:
    """State bytes and priced traffic of each row's sharding strategy."""

    def run(code: int) -> dict[str, Any]:
        part, opts = parts.get("sharding", code)
        pt = price_traffic(part.traffic(shard, opts), topo)
        return {
            **_state_fields(part.state(shard, opts)),
            "mb_s": pt.micro_batch_s,
            "mb_fixed_s": pt.micro_batch_fixed_s,
            "step_s": pt.step_s,
            "bucket_s": pt.bucket_s,
            "forward_s": pt.forward_s,
            "recompute_s": pt.recompute_s,
            "backward_s": pt.backward_s,
        }

    return by_code(codes, run)


def _schedule(parts: PartTable, pipe: PipeInputs, codes) -> dict[str, Any]:
    """The schedule part's terms, and micro-batches in flight on ranks 0, 1 and ``p - 1`` and
    the last stage's losses in flight."""

    def run(code: int) -> dict[str, Any]:
        part, opts = parts.get("schedule", code)
        t = part.terms(pipe, opts)
        # what the planner's pre-check asks (infeasible()) and what terms() says, either way
        bad = ops.as_float(t.infeasible) + ops.as_float(part.infeasible(pipe, opts))
        pp = pipe.pp
        # None: Megatron's scatter-gather, each TP rank sends 1/t of the activation
        msg = pipe.activation_bytes / pipe.tp if t.p2p_bytes is None else t.p2p_bytes
        return {
            "bubble_s": t.bubble_s,
            "in_flight": t.in_flight,
            "held_first": part.in_flight_at(pipe, opts, 0.0 * pp),
            "held_middle": part.in_flight_at(pipe, opts, ops.minimum(1.0, pp - 1.0)),
            "held_last": part.in_flight_at(pipe, opts, pp - 1.0),
            "loss_held": part.loss_in_flight(pipe, opts),
            "p2p": t.p2p_transfers,
            "p2p_bytes": msg,
            "infeasible": bad,
        }

    return by_code(codes, run)


#: Tier arrays carry a trailing tier axis; every other input broadcasts to the batch shape.
_TIER_FIELDS = ("tier_gpus", "tier_bytes_s", "tier_latency_s")


def batch_shape(inp: ModelInputs) -> tuple[int, ...]:
    """The broadcast shape of the batch (rows..., islands)."""
    shapes = [(1, 1)]
    for b in (inp.model, inp.training, inp.hardware, inp.topology, inp.layout, inp.network):
        for a in attrs.fields(type(b)):
            x = np.shape(getattr(b, a.name))
            shapes.append(x[:-1] if b is inp.topology and a.name in _TIER_FIELDS else x)
    return np.broadcast_shapes(*shapes)


def _evaluate(inp: ModelInputs, parts: PartTable, detail: bool, islands_only: bool = False) -> dict[str, Any]:
    ms, tr, hw, topo, lay = inp.model, inp.training, inp.hardware, inp.topology, inp.layout
    tp, pp, dp, cp, ep = _f(lay.tp), _f(lay.pp), _f(lay.dp), _f(lay.cp), _f(lay.ep)
    sp = ops.as_bool(lay.sequence_parallel)
    v = ops.where(pp > 1, ops.maximum(_f(lay.virtual_stages), 1.0), 1.0)  # one stage: interleaving is a no-op
    rec = _f(tr.recompute)
    wb = _f(tr.weight_bytes)
    shape = () if ops.is_scalar(tp) else batch_shape(inp)

    # ---- batch split and structural feasibility ------------------------------------------------
    b_isl, m, m_int = batch_split(_f(tr.global_batch), dp, _f(tr.micro_batch), _f(tr.island_batch))
    peak, peak16 = _f(hw.peak_flops), _f(hw.peak16_flops)
    reasons = _structural_reasons(inp, m, tp, pp, cp, dp, ep, v, peak) | sharding_reasons(
        parts, lay.sharding, tp, dp, cp, topo
    )
    first_l, last_l = _f(lay.first_stage_layers), _f(lay.last_stage_layers)
    peak = ops.where(peak > 0, peak, 1.0)
    peak16 = ops.where(peak16 > 0, peak16, peak)

    # ---- the stages: compute, the core's communication and the sharding strategy's --------------
    # The pace is the slower of the largest of the first and middle stages (the embedding on the
    # first) and the last (its layers, the output layer and the loss); see model/stages.py.
    stl = stage_layers(ms.layers, pp, v, first_l, last_l)
    one = pp == 1
    body_first = stl.first >= stl.middle
    stage = (ms, tr, hw, topo, lay, parts, tp, pp, dp, cp, ep, v, sp, peak, peak16, rec, wb)
    body = _stage(*stage, ops.maximum(stl.first, stl.middle), body_first | one, one)
    tail = _stage(*stage, stl.last, one, ops.where(pp > 0, True, False))
    pace = _pick(tail["t_mb"] >= body["t_mb"], tail, body)
    sh, ct, lc, shard, sd = pace["sh"], pace["ct"], pace["lc"], pace["shard"], pace["sd"]
    fsdp_exposed_mb = pace["fsdp_mb"]
    # every stage reduces its own gradients after its last backward: the step waits for the
    # stage whose reduction shows most, and a cross-island reduction hides under the shortest
    # stage's window
    dp_exposed = ops.maximum(body["dp_exposed"], tail["dp_exposed"])
    ar_window = ops.minimum(body["ar_window"], tail["ar_window"])
    Ls = sh.layers_per_stage
    p_gpu, grad_b = shard.params_per_gpu, shard.grad_bytes
    fsdp_hidden_mb = sd["mb_s"] - fsdp_exposed_mb
    dp_hidden = ops.maximum(sd["step_s"] - dp_exposed, 0.0)
    t_compute_mb, t_elem_mb = ct.compute, ct.memory_ops

    # ---- pipeline: the schedule's bubble, activations in flight and transfers --------------------
    t_mb = pace["t_mb"]
    sch, pp_comm = _pipeline(parts, lay, topo, pp, m_int, v, t_mb, ct, Ls, lc.act_msg, tp, cp, dp)
    reasons = reasons | ops.where(_f(sch["infeasible"]) > 0, int(Reason.SCHEDULE), 0)

    # ---- optimizer (memory-bound Adam over this GPU's optimizer shard) ---------------------------
    hbm = hw.hbm_bytes_s * hw.hbm_efficiency
    t_opt = p_gpu / sd["optimizer_shards"] * ADAM_BYTES_PER_PARAM / hbm + 10 * KERNEL_OVERHEAD_S

    terms = {
        "compute": m_int * t_compute_mb,
        "memory_ops": m_int * t_elem_mb,
        "tp_comm": m_int * lc.tp_exposed,
        "cp_comm": m_int * lc.cp_exposed,
        "ep_comm": m_int * lc.ep_exposed,
        "pp_comm": pp_comm,
        "pp_bubble": sch["bubble_s"],
        "dp_comm": dp_exposed + m_int * fsdp_exposed_mb,
        "offload": m_int * pace["offload_mb"],
        "optimizer": t_opt,
    }
    hidden = {
        "tp_comm": m_int * lc.tp_hidden,
        "cp_comm": m_int * lc.cp_hidden,
        "dp_comm": dp_hidden + m_int * fsdp_hidden_mb,
    }

    # ---- memory of the busiest GPU: the first, middle (rank 1) and last stages -------------------
    busiest = _busiest(inp, parts, shape, stl, sch, tp, pp, dp, cp, ep, v, sp, wb)
    mem_used = busiest["mem"]
    reasons = reasons | ops.where(mem_used > hw.memory_bytes, int(Reason.MEMORY), 0)

    mf_tok, hw_tok, p_total = _flops(ms, rec, full_recompute_share(tr, sh), tr.op_saves_attention)
    steps = IslandSteps(
        reasons=reasons,
        terms=terms,
        hidden=hidden,
        ar_window=ar_window,
        grad_bytes=grad_b,
        params=p_total,
        island_batch=b_isl,
        micro_batches=m_int,
        memory_bytes=mem_used,
        peak_flops=peak,
        model_flops_per_token=mf_tok,
        hardware_flops_per_token=hw_tok,
        gpus=tp * pp * cp * dp,
    )
    out = combine_islands(parts, inp, shape, steps, detail, islands_only)
    if detail:
        largest = ops.maximum(ops.maximum(stl.first, stl.middle), stl.last)
        out.update(_layout_outputs(sd, busiest, p_gpu, largest, np.shape(out["reasons"])))
    return out


def _structural_reasons(inp: ModelInputs, m, tp, pp, cp, dp, ep, v, peak) -> Any:
    """The reason bits that need no stage: the layout's, the batch split's (``m`` micro-batches
    per replica) and a precision the GPU has no peak for."""
    ms, lay, topo = inp.model, inp.layout, inp.topology
    first_l, last_l = _f(lay.first_stage_layers), _f(lay.last_stage_layers)
    gpus = _f(topo.nodes) * _f(topo.gpus_per_node)
    return (
        layout_reasons(ms.heads, ms.seq_len, _f(ms.experts), tp, pp, cp, dp, ep, gpus)
        | batch_reasons(m, pp, v, ms.layers, first_l, last_l)
        | ops.where(peak <= 0, int(Reason.PRECISION), 0)
    )


def _busiest(
    inp: ModelInputs, parts: PartTable, shape, stl, sch, tp, pp, dp, cp, ep, v, sp, wb
) -> dict[str, Any]:
    """The busiest GPU of the first, middle (rank 1) and last stages: its sharding state,
    activations (``act``), a sync strategy's extra state and total bytes (``mem``). ``sch``: the
    schedule's micro-batches in flight per rank (:func:`_schedule`)."""
    ms, tr, topo, lay = inp.model, inp.training, inp.topology, inp.layout
    one = pp == 1
    outer = _outer_state_bytes(parts, inp) if (shape[-1] if shape else 1) > 1 else 0.0
    ranks = (
        (stl.first, True, one, sch["held_first"]),
        (stl.middle, one, pp <= 2, sch["held_middle"]),
        (stl.last, one, True, sch["held_last"]),
    )
    busiest = None
    for layers_r, emb_r, head_r, held_r in ranks:
        sh_r = local_shapes(ms, tr, tp, pp, cp, v, layers=layers_r)
        shard_r = _shard_inputs(
            ms, sh_r, topo, tp, pp, dp, cp, ep, wb, emb_r, head_r, ops.as_bool(tr.fp8_params), tr
        )
        st_r = _state(parts, shard_r, lay.sharding)
        logits_r = ops.where(ops.as_bool(head_r), _f(sch["loss_held"]), 0.0)
        act_r = activation_memory(ms, tr, sh_r, tp, sp, held_r, logits_r)
        extra_r = shard_r.params_per_gpu * outer / st_r["param_shards"]  # a sync strategy's
        mem_r = total_memory(
            st_r["weights"], st_r["gradients"], st_r["optimizer"] + extra_r, st_r["extra"], act_r
        )
        cand = {**st_r, "act": act_r, "extra_state": extra_r, "mem": mem_r}
        busiest = cand if busiest is None else _pick(mem_r > busiest["mem"], cand, busiest)
    assert busiest is not None
    return busiest


def island_memory(inp: ModelInputs, parts: PartTable) -> dict[str, Any]:
    """Only ``reasons`` and ``island_memory_bytes`` of :func:`evaluate` (``islands_only``), by
    the same code with no stage timed: what the planner's probes for the largest feasible
    micro-batch count read (``explore/island_search.py``). Every reason bit and the memory are
    those of :func:`evaluate`: the schedule's in-flight counts and its ``infeasible`` read the
    layout and ``m`` only (the bundled schedules' ``terms`` never set ``infeasible``; a schedule
    whose ``infeasible`` read the stage times would see zeros here)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if ops.is_scalar(inp.layout.tp):
            inp = _as_arrays(inp)
        ms, tr, hw, lay = inp.model, inp.training, inp.hardware, inp.layout
        tp, pp, dp, cp, ep = _f(lay.tp), _f(lay.pp), _f(lay.dp), _f(lay.cp), _f(lay.ep)
        sp = ops.as_bool(lay.sequence_parallel)
        v = ops.where(pp > 1, ops.maximum(_f(lay.virtual_stages), 1.0), 1.0)
        shape = batch_shape(inp)
        _, m, m_int = batch_split(_f(tr.global_batch), dp, _f(tr.micro_batch), _f(tr.island_batch))
        reasons = _structural_reasons(inp, m, tp, pp, cp, dp, ep, v, _f(hw.peak_flops)) | sharding_reasons(
            parts, lay.sharding, tp, dp, cp, inp.topology
        )
        stl = stage_layers(ms.layers, pp, v, _f(lay.first_stage_layers), _f(lay.last_stage_layers))
        zero = 0.0 * pp
        pipe = PipeInputs(
            pp=pp,
            micro_batches=m_int,
            virtual_stages=v,
            stage_s=zero,
            forward_s=zero,
            weight_grad_s=zero,
            activation_bytes=zero,
            tp=tp,
        )
        sch = _schedule(parts, pipe, lay.schedule)
        reasons = reasons | ops.where(_f(sch["infeasible"]) > 0, int(Reason.SCHEDULE), 0)
        mem = _busiest(inp, parts, shape, stl, sch, tp, pp, dp, cp, ep, v, sp, _f(tr.weight_bytes))["mem"]
        reasons = reasons | ops.where(mem > hw.memory_bytes, int(Reason.MEMORY), 0)
        full = np.broadcast_shapes(shape, np.shape(reasons), np.shape(mem))
        return {"reasons": ops.broadcast(reasons, full), "island_memory_bytes": ops.broadcast(mem, full)}


def _stage(ms, tr, hw, topo, lay, parts, tp, pp, dp, cp, ep, v, sp, peak, peak16, rec, wb, layers, emb, head):
    """One pipeline stage of ``layers`` layers, holding the embedding (``emb``) and the output
    layer and loss (``head``): its shapes, compute, the core's TP/CP/EP communication, the
    sharding strategy's state and traffic and what of it is exposed, and ``t_mb``, the time of
    one micro-batch through it."""
    sh = local_shapes(ms, tr, tp, pp, cp, v, layers=layers)
    ct = micro_batch_compute(ms, tr, hw, sh, tp, ep, sp, peak, peak16)
    no_head = ops.where(ops.as_bool(head), 0.0, ct.head)  # the logits and loss run on the last stage
    ct = attrs.evolve(ct, compute=ct.compute - no_head, head=ct.head - no_head)
    lc = layer_comm(
        ms,
        sh,
        ct,
        topo,
        tp,
        cp,
        ep,
        ops.as_bool(lay.tp_comm_overlap),
        rec,
        sp,
        full_recompute_share(tr, sh),
        async_tp=ops.as_bool(lay.async_tp) & sp & ops.as_bool(tr.compile),
    )
    mb_comm = lc.tp_exposed + lc.cp_exposed + lc.ep_exposed
    offload_mb = _offload_exposed(ms, tr, hw, sh, ct, tp, sp)
    shard = _shard_inputs(ms, sh, topo, tp, pp, dp, cp, ep, wb, emb, head, ops.as_bool(tr.fp8_params), tr)
    sd, fsdp_mb, dp_exposed, ar_window = _sharding_exposed(parts, shard, topo, lay, ct, mb_comm)
    return {
        "sh": sh,
        "ct": ct,
        "lc": lc,
        "shard": shard,
        "sd": sd,
        "mb_comm": mb_comm,
        "fsdp_mb": fsdp_mb,
        "dp_exposed": dp_exposed,
        "ar_window": ar_window,
        "offload_mb": offload_mb,
        "t_mb": ct.compute + ct.memory_ops + mb_comm + fsdp_mb + offload_mb,
    }


def _pick(c, a, b):
    """``a`` where ``c``, else ``b``: elementwise through dicts and attrs records of arrays, each
    field picked when it is first read (:class:`_Picked`), so what no term reads is never picked."""
    if isinstance(a, (dict, _Picked)) or attrs.has(type(a)):
        return _Picked(c, a, b)
    return ops.where(c, a, b)


class _Picked:
    """A dict or attrs record (or another ``_Picked``) ``a`` where ``c``, else ``b``, read as
    ``x[key]`` or ``x.field``: each value is ``ops.where(c, a's, b's)`` (nested records picked
    the same way), computed on first read and kept; the same values as picking every field."""

    __slots__ = ("_a", "_attrs", "_b", "_c", "_items")

    def __init__(self, c, a, b):
        self._c, self._a, self._b = c, a, b
        self._items: dict[Any, Any] = {}
        self._attrs: dict[str, Any] = {}

    def __getitem__(self, key):
        if key not in self._items:
            self._items[key] = _pick(self._c, self._a[key], self._b[key])
        return self._items[key]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._attrs:
            self._attrs[name] = _pick(self._c, getattr(self._a, name), getattr(self._b, name))
        return self._attrs[name]


def _state_fields(st) -> dict[str, Any]:
    """A sharding part's :class:`~shardmeter.parts.ShardState` as the dict the model carries."""
    return {
        "weights": st.weights,
        "gradients": st.gradients,
        "optimizer": st.optimizer,
        "param_shards": st.param_shards,
        "optimizer_shards": st.optimizer_shards,
        "extra": st.extra,
    }


def _state(parts: PartTable, shard: ShardInputs, codes) -> dict[str, Any]:
    """The sharding strategy's state bytes of one stage (no traffic)."""

    def run(code: int) -> dict[str, Any]:
        part, opts = parts.get("sharding", code)
        return _state_fields(part.state(shard, opts))

    return by_code(codes, run)


def _layout_outputs(sd, busiest, p_gpu, Ls, full) -> dict[str, Any]:
    """Per island, for the report: the busiest GPU's memory by part (GB, adding up to
    ``island_memory_gb``), the pacing stage's parameters before and after the sharding
    strategy divides them, and the layers of the largest pipeline stage."""
    b = busiest
    mem = memory_parts(b["weights"], b["gradients"], b["optimizer"] + b["extra_state"], b["extra"], b["act"])
    return {
        "island_memory_parts_gb": {k: ops.broadcast(_f(v) / 1e9, full) for k, v in mem.items()},
        "island_params_per_gpu": ops.broadcast(_f(p_gpu), full),
        "island_params_per_gpu_sharded": ops.broadcast(_f(p_gpu / sd["param_shards"]), full),
        "island_layers_per_stage": ops.broadcast(_f(Ls), full),
    }


def _sharding_exposed(parts: PartTable, shard: ShardInputs, topo: Topology, lay, ct, mb_comm):
    """The sharding part's state and priced traffic, and what of it is exposed: ``(state and
    traffic arrays, exposed per micro-batch, exposed per step, window left after it)``."""
    sd = _sharding(parts, shard, topo, lay.sharding)
    priced = PricedTraffic(
        micro_batch_s=_f(sd["mb_s"]),
        micro_batch_fixed_s=_f(sd["mb_fixed_s"]),
        step_s=_f(sd["step_s"]),
        bucket_s=_f(sd["bucket_s"]),
        forward_s=_f(sd["forward_s"]),
        recompute_s=_f(sd["recompute_s"]),
        backward_s=_f(sd["backward_s"]),
    )
    mb_window = ct.compute + ct.memory_ops + mb_comm
    # each pass's share of the micro-batch's work: its compute, with the elementwise kernels and
    # exposed TP/CP/EP communication shared out in proportion (the head runs with the backward)
    scale = mb_window / ops.maximum(ct.compute, 1e-30)
    passes = (ct.forward * scale, ct.recompute * scale, (ct.backward + ct.head) * scale)
    exposed = exposed_traffic(
        priced,
        mb_window,
        ct.backward + ct.recompute + mb_comm,
        ops.as_bool(lay.dp_comm_overlap),
        pass_windows=passes,
    )
    sd["mb_s"], sd["step_s"] = priced.micro_batch_s, priced.step_s
    return (sd, *exposed)


def _pipeline(parts: PartTable, lay, topo: Topology, pp, m_int, v, t_mb, ct, Ls, act_msg, tp, cp, dp):
    """The schedule part's terms and the pipeline's point-to-point time per step: its transfers,
    each one message of the bytes it says one GPU sends (Megatron's scatter-gather optimisation,
    1/t of an activation per TP rank, unless it says otherwise) on the link between stages."""
    pipe = PipeInputs(
        pp=pp,
        micro_batches=m_int,
        virtual_stages=v,
        stage_s=t_mb,
        forward_s=ct.forward,
        weight_grad_s=Ls * ct.dense_forward,
        activation_bytes=act_msg,
        tp=tp,
    )
    sch = _schedule(parts, pipe, lay.schedule)
    bw_pp, lat_pp = span_link(pp, tp * cp * dp, topo)
    return sch, _f(sch["p2p"]) * (_f(sch["p2p_bytes"]) / bw_pp + lat_pp)


def _shard_inputs(
    ms, sh, topo, tp, pp, dp, cp, ep, wb, emb_here=True, head=True, fp8_params=False, tr=None
) -> ShardInputs:
    """What the sharding strategy sees: this GPU's parameters (its stage's layers, its
    tensor-parallel slice, its local experts; the word embedding where the stage holds it
    (``emb_here``: the first), the output layer where it holds that (``head``: the last; with one
    stage only when untied: Megatron-LM's last stage keeps its own copy of a tied embedding,
    ``LanguageModule.setup_embeddings_and_output_layer`` at NVIDIA/Megatron-LM@d98e8a64), of its
    largest weight matrix (fused QKV, fc1, an expert's fc1 or the embedding) and the bytes per
    element of weights, gradients and the optimizer. A MoE layer's
    shared experts are tensor-parallel like a dense MLP, not spread over ``ep``; the stage's dense
    layers (``dense_layers_local``) hold one ``ffn_hidden`` MLP each. With ``fp8_params`` the
    layers' weights are held and all-gathered in fp8 (1 byte; Megatron ``--fp8-param-gather``,
    torchao ``enable_fsdp_float8_all_gather``: only the linears' weights, the embeddings stay 16-bit),
    the gradients and the optimizer's fp32 master copy unchanged."""
    mats = ops.where(ms.swiglu, 3.0, 2.0)
    ffn = sh.ffn_local * tp  # an expert's width in a MoE layer
    mlp = mats * ms.hidden * ffn
    attn = _attn(ms)
    p_layer = (
        params_per_layer(ms.hidden, ms.q_dim, ms.kv_dim, ffn, ms.swiglu, 1.0, **attn)
        - mlp
        + mlp * ops.where(sh.moe, ms.experts / ep + ms.shared_experts, 1.0)
    ) / tp
    p_dense = params_per_layer(ms.hidden, ms.q_dim, ms.kv_dim, ms.ffn_hidden, ms.swiglu, 1.0, **attn) / tp
    Ld = sh.dense_layers_local
    emb = ms.vocab * ms.hidden / tp
    emb_gpu = emb * ops.where(ops.as_bool(emb_here), 1.0, 0.0) + emb * ops.where(
        ops.as_bool(head) & ((pp > 1) | ops.logical_not(ops.as_bool(ms.tied))), 1.0, 0.0
    )
    p_gpu = sh.layers_per_stage * p_layer + ops.where(Ld > 0, Ld * (p_dense - p_layer), 0.0) + emb_gpu
    gemm_in = ops.where(ms.swiglu, 2.0, 1.0) * ms.ffn_hidden  # Megatron fuses gate and up into fc1
    largest = ops.maximum(
        ops.maximum(ms.hidden * (ms.q_dim + 2.0 * ms.kv_dim), ms.hidden * gemm_in),
        ops.maximum(ms.hidden * gemm_in / ms.ffn_hidden * ffn, ms.vocab * ms.hidden),
    )
    gather16 = ops.where(wb > 2, 4.0, 2.0)
    held = ops.where(fp8_params, ((p_gpu - emb_gpu) * 1.0 + emb_gpu * wb) / p_gpu, wb)
    if tr is None:
        rec_layers: Any = 0.0
    else:  # full recompute re-runs the forward of recompute_layers (0: all) of the stage
        rl = _f(tr.recompute_layers)
        all_layers = sh.layers_per_stage
        rec_layers = ops.where(
            _f(tr.recompute) == 2, ops.where(rl > 0, ops.minimum(rl, all_layers), all_layers), 0.0
        )
    return ShardInputs(
        recompute_layers=rec_layers,
        params_last_module=ops.where(sh.moe, 0.0, ms.hidden * ms.ffn_hidden / tp),
        params_largest_module=largest / tp,
        params_per_gpu=p_gpu,
        params_per_layer=p_layer,
        layers_per_stage=sh.layers_per_stage,
        weight_bytes=held,
        param_gather_bytes=ops.where(
            fp8_params, ((p_gpu - emb_gpu) * 1.0 + emb_gpu * gather16) / p_gpu, gather16
        ),
        grad_bytes=ops.where(wb > 2, 4.0, 2.0),
        optimizer_bytes_per_param=ops.where(wb > 2, 8.0, 12.0),
        tp=tp,
        dp=dp,
        cp=cp,
        domain_gpus=_f(topo.domain_gpus),
        tier_gpus=topo.tier_gpus,
        tier_bytes_s=topo.tier_bytes_s,
        tier_latency_s=topo.tier_latency_s,
    )


def _attn(ms) -> dict[str, Any]:
    """The attention projections' shape keywords of the formulas (MLA's low ranks, V width)."""
    return {"v_dim": ms.v_dim, "o_dim": ms.o_dim, "q_rank": ms.q_rank, "kv_rank": ms.kv_rank}


def _offload_exposed(ms, tr, hw, sh, ct, tp, sp):
    """Seconds per micro-batch that activation offload (``offload_layers``) does not hide, both
    directions: :func:`~.formulas.offload_exposed_s` with one layer's stored activations over
    the GPU's own host link (``host_bytes_s``, one direction: a PCIe x16 link per GPU, NVLink-C2C
    on a superchip; GPUs that share a PCIe switch are not divided) against one layer's GEMMs
    and attention, forward (offload) and backward with its recompute (reload). The layer's
    elementwise kernels and communication are left out of the window, and the copies' HBM
    traffic is not charged to the kernels beside them."""
    Ls = sh.layers_per_stage
    stored, _ = layer_activations(ms, tr, sh, tp, sp)
    tau = stored / Ls / hw.host_bytes_s
    k = tr.offload_layers
    fwd = offload_exposed_s(k, Ls, tau, ct.forward / Ls)
    bwd = offload_exposed_s(k, Ls, tau, (ct.backward + ct.recompute) / Ls)
    return fwd + bwd


def _flops(ms, rec, share=1.0, op_saves_attention=1.0):
    """``(model FLOPs per token, hardware FLOPs per token with recompute, parameters)``: full
    recompute reruns the forward of its ``share`` of the layers, selective the attention core,
    op the matrix multiplies it does not save (:func:`~.formulas.op_recompute_flops_per_token`)
    and, where its save list leaves the attention kernel out (``op_saves_attention`` = 0), the
    attention core too."""
    E, ktop = _f(ms.experts), _f(ms.experts_per_token)
    args = (ms.hidden, ms.q_dim, ms.kv_dim, ms.ffn_hidden, ms.swiglu)
    shape = {
        "moe_ffn": ms.moe_ffn_hidden,
        "shared_experts": ms.shared_experts,
        "dense_layers": ms.dense_layers,
        **_attn(ms),
    }
    mf_tok = model_flops_per_token(ms.layers, *args, ms.vocab, ms.seq_len, ktop, E, **shape)
    dense_all, att_all = layers_forward_flops(ms.layers, *args, ms.seq_len, ktop, E, **shape)
    op_moe = op_recompute_flops_per_token(
        ms.hidden,
        ms.q_dim,
        ms.kv_dim,
        ms.moe_ffn_hidden,
        ms.swiglu,
        ktop,
        E,
        shared_experts=ms.shared_experts,
        o_dim=ms.o_dim,
    )
    op_dense = op_recompute_flops_per_token(
        ms.hidden, ms.q_dim, ms.kv_dim, ms.ffn_hidden, ms.swiglu, o_dim=ms.o_dim
    )
    moe = E > 1
    op_all = ops.where(moe, ms.layers * op_moe + ms.dense_layers * (op_dense - op_moe), ms.layers * op_dense)
    hw_tok = mf_tok + ops.where(
        rec == 2,
        share * (dense_all + att_all),
        ops.where(
            rec == 1,
            att_all,
            ops.where(rec == 3, op_all + ops.where(ops.as_bool(op_saves_attention), 0.0, att_all), 0.0),
        ),
    )
    return mf_tok, hw_tok, model_params(ms.layers, *args, ms.vocab, ops.as_bool(ms.tied), E, **shape)


def _outer_state_bytes(parts: PartTable, inp: ModelInputs) -> Any:
    """The sync strategy's extra state per parameter, per row."""
    return by_code(
        inp.network.sync,
        lambda c: {"b": parts.get("sync", c)[0].state_bytes_per_param(parts.get("sync", c)[1])},
    )["b"]
