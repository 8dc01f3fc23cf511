"""The scalar path's written-out twins of the busiest GPU's memory, the report's records and the
step's composition compute, for one plan, exactly what the general code computes (the same
operations in the same order: equal to the last bit, nan where it gives nan, and a
ZeroDivisionError where it raises one); the pattern of tests/test_scalar_twins.py."""

from __future__ import annotations

import contextlib
import glob
import math
import random

import attrs
import pytest

from shardmeter.model.outputs import field_values

VALS = (0.0, -0.0, 1.0, 2.0, 3.5, 1e-9, 1e12, math.inf, math.nan)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def _flat(v) -> list:
    if attrs.has(type(v)):
        return [y for f in field_values(v).values() for y in _flat(f)]
    if isinstance(v, tuple | list):
        return [y for f in v for y in _flat(f)]
    return [v]


def _alike(a, b) -> bool:
    fa, fb = _flat(a), _flat(b)
    return len(fa) == len(fb) and all(_same(u, v) for u, v in zip(fa, fb, strict=True))


def _scenarios(n: int = 60) -> list[str]:
    """The example and a spread of the bundled published runs (pipelines of 1, 2 and more
    stages, MoE, FSDP, offload, the recompute modes)."""
    runs = sorted(glob.glob("shardmeter/validation_data/published/**/*.toml", recursive=True))
    step = max(len(runs) // n, 1)
    return ["examples/gpt3-175b-a100.toml", *runs[::step]]


def _captured(module, name: str, scenarios: list[str]) -> list[tuple]:
    """The positional arguments ``module.name`` gets in one plan's evaluate of each scenario."""
    import shardmeter.model.evaluate as ev
    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs

    est = Estimator()
    seen: list[tuple] = []
    real = getattr(module, name)

    def spy(*a, **k):
        seen.append((a, k))
        return real(*a, **k)

    setattr(module, name, spy)
    try:
        for path in scenarios:
            try:
                inp, table = build_inputs(est.resolve(est.load(path)), scalar=True)
            except Exception:  # noqa: BLE001 (a scenario this build cannot take as one plan)
                continue
            with contextlib.suppress(ZeroDivisionError):
                ev.evaluate(inp, table, fallback=False)
    finally:
        setattr(module, name, real)
    return seen


def test_one_plans_busiest_gpu_is_the_general_codes_to_the_bit():
    """:func:`~shardmeter.model.busiest._busiest_floats` (each rank's memory, what ranks of one
    shape share computed once, one record built) is :func:`~shardmeter.model.busiest._busiest_ops`
    (:func:`~shardmeter.model.busiest.rank_memory` of each rank, the busiest picked): every
    field, for the bundled runs' plans with their stages known or not, at random and edge
    layers and in-flight counts."""
    import shardmeter.model.evaluate as ev
    from shardmeter.model import busiest

    calls = [c for c in _captured(ev, "busiest_gpu", _scenarios()) if type(c[0][2].tp) is float]
    assert len(calls) > 30
    rng = random.Random(41)
    checked = 0
    for (inp, parts, deg, stl, sch, islands, *rest), _ in calls:
        known = rest[0] if rest else ()
        assert islands == 1
        for trial in range(12):
            s2, k2, d2 = sch, known, deg
            if trial % 3:
                s2 = attrs.evolve(
                    sch,
                    **{
                        k: rng.choice(VALS) if rng.random() < 0.3 else getattr(sch, k) * rng.uniform(0.5, 2.0)
                        for k in ("held_first", "held_middle", "held_last", "loss_held")
                    },
                )
            if trial % 4 == 3:
                k2 = ()
            elif trial % 4 == 1:  # the known stages' state at edge numbers
                k2 = tuple(
                    (*k[:3], attrs.evolve(k[3], state=attrs.evolve(k[3].state, **{
                        f: rng.choice(VALS) for f in ("weights", "optimizer", "param_shards", "extra")
                    })))
                    for k in known
                )  # fmt: skip
            if trial % 6 == 5:
                d2 = attrs.evolve(deg, tp=rng.choice((0.0, 1.0, 2.0, 8.0)))
                k2 = ()
            # the recompute mode, offloaded layers and loss (a working set, a kept share, a transient)
            i2 = attrs.evolve(
                inp,
                training=attrs.evolve(
                    inp.training,
                    recompute=float(rng.choice((0, 1, 2, 3))) if trial % 2 else inp.training.recompute,
                    offload_layers=rng.choice((0.0, 0.0, 1.0, 3.0, -1.0, math.nan)),
                    fused_loss=rng.random() < 0.3,
                    compiled_loss=rng.random() < 0.3,
                ),
            )
            try:
                a = busiest._busiest_floats(i2, parts, d2, stl, s2, k2)
            except ZeroDivisionError:
                with pytest.raises(ZeroDivisionError):
                    busiest._busiest_ops(i2, parts, d2, stl, s2, 1, k2)
                continue
            assert a is not None
            b = busiest._busiest_ops(i2, parts, d2, stl, s2, 1, k2)
            assert type(a) is type(b) and _alike(a, b), (trial, a, b)
            checked += 1
    assert checked > 200
    # and busiest_gpu takes the twin for one plan (the same record as the general code's)
    (inp, parts, deg, stl, sch, islands, known), _ = calls[0]
    got = busiest.busiest_gpu(inp, parts, deg, stl, sch, islands, known)
    assert _alike(got, busiest._busiest_ops(inp, parts, deg, stl, sch, islands, known))
    # a batch, or numbers that are not plain floats, take the general code
    assert busiest._busiest_floats(inp, parts, deg, stl, attrs.evolve(sch, loss_held=1), known) is None


def test_busiest_parts_are_memory_parts():
    """:func:`~shardmeter.model.busiest.busiest_parts`, written out, is the busiest GPU's
    :func:`~shardmeter.model.memory.memory_parts` (the sync strategy's state with the optimizer,
    the strategy's extra buffers with the transient) and adds up to its total."""
    from shardmeter.model.busiest import BusiestGpu, busiest_parts
    from shardmeter.model.memory import MEMORY_PARTS, memory_parts, total_memory
    from shardmeter.parts import StateBytes

    rng = random.Random(5)
    for _ in range(300):
        w, g, o, x, act, tr, oth, ext = (
            rng.choice(VALS) if rng.random() < 0.2 else rng.uniform(0, 1e10) for _ in range(8)
        )
        st = StateBytes(weights=w, gradients=g, optimizer=o, extra=x)
        b = BusiestGpu(
            state=st,
            activations_bytes=act,
            extra_state_bytes=ext,
            memory_bytes=total_memory(w, g, o + ext, x, act, tr, oth),
            transient_bytes=tr,
            other_bytes=oth,
            outside_allocator_bytes=0.5 * oth,
        )
        got = busiest_parts(b)
        want = memory_parts(w, g, o + ext, x, act, tr, oth)
        assert _alike(tuple(got.parts().values()), tuple(want[k] for k in MEMORY_PARTS))
        assert _same(got.outside_allocator_bytes, 0.5 * oth)


def test_one_islands_combined_outputs_are_the_general_codes_to_the_bit():
    """:func:`~shardmeter.model.islands._combine_one` (one plan on one island: nothing broadcast
    or folded, no sync terms) is :func:`~shardmeter.model.islands._combine_ops`: every output
    field, with and without detail and per island only, feasible or not, at random and edge
    numbers (a zero step, zero GPUs: the same ZeroDivisionError)."""
    import shardmeter.model.evaluate as ev
    from shardmeter.model import islands

    calls = [c for c in _captured(ev, "combine_islands", _scenarios(20)) if c[0][2] == ()]
    assert len(calls) > 10
    rng = random.Random(43)

    def x(v):
        return rng.choice(VALS) if rng.random() < 0.2 else v * rng.uniform(0.5, 2.0)

    checked = 0
    for (parts, inp, shape, st0, *_), _ in calls:
        for trial in range(40):
            st = attrs.evolve(
                st0,
                reasons=rng.choice((0, 0, 0, 32, 16 | 128)),
                terms=attrs.evolve(st0.terms, **{k: x(v) for k, v in field_values(st0.terms).items()}),
                hidden=attrs.evolve(st0.hidden, **{k: x(v) for k, v in field_values(st0.hidden).items()}),
                **{
                    k: x(getattr(st0, k))
                    for k in (
                        "model_flops_per_token",
                        "peak_flops",
                        "gpus",
                        "island_batch",
                        "memory_bytes",
                        "params",
                    )
                },
            )
            detail, only = trial % 2 == 0, trial % 4 == 1
            try:
                a = islands._combine_one(parts, inp, st, detail, only)
            except ZeroDivisionError:
                with pytest.raises(ZeroDivisionError):
                    islands._combine_ops(parts, inp, shape, st, detail, only)
                continue
            assert a is not None
            b = islands._combine_ops(parts, inp, shape, st, detail, only)
            assert type(a) is type(b) and _alike(a, b), trial
            assert [f is None for f in field_values(a).values()] == [
                f is None for f in field_values(b).values()
            ]
            checked += 1
    assert checked > 300
    # and combine_islands takes the twin for one island; not where a figure is not a plain number
    parts, inp, shape, st0, *_ = calls[0][0]
    assert _alike(
        islands.combine_islands(parts, inp, shape, st0), islands._combine_ops(parts, inp, shape, st0)
    )
    assert islands._combine_one(parts, inp, attrs.evolve(st0, params=1), True, False) is None


def test_one_plans_degrees_batch_split_and_sharding_reasons_are_the_arrays_to_the_bit():
    """:func:`~shardmeter.model.degrees.degrees`, :func:`~shardmeter.model.feasibility.batch_split`
    and :func:`~shardmeter.model.feasibility.sharding_reasons` of plain numbers (each where the
    value it picks, the maxima written out, by_code's one call) give the batch's values, at
    random and edge numbers (0, a negative, inf, nan: the same ZeroDivisionError where numbers
    raise and arrays give inf or nan)."""
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import degrees, feasibility

    est = Estimator()
    inp, table = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)
    lay0 = inp.layout
    vals = (0.0, -1.0, 0.5, 1.0, 2.0, 3.0, 8.0, 16.0, math.inf, math.nan)
    rng = random.Random(61)
    for _ in range(3000):
        lay = attrs.evolve(
            lay0,
            **{k: rng.choice(vals) for k in ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "expert_tp")},
            sequence_parallel=rng.random() < 0.5,
        )
        one = degrees.degrees(lay)
        fields = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "expert_tp", "sequence_parallel")
        with np.errstate(all="ignore"):
            arr = degrees.degrees(attrs.evolve(lay, **{k: np.asarray([[getattr(lay, k)]]) for k in fields}))
        for k, v in field_values(one).items():
            w = np.asarray(getattr(arr, k)).ravel()[0]
            if k == "sp":
                assert type(v) is bool and v == bool(w)
            else:
                assert type(v) is float and _same(v, float(w)), (lay, k, v, w)
        gb, dp, mb, ib = (rng.choice((*vals, 1536.0, 64.0)) for _ in range(4))
        try:
            got = feasibility.batch_split(gb, dp, mb, ib)
        except ZeroDivisionError:
            continue
        with np.errstate(all="ignore"):
            ref = feasibility.batch_split(*(np.asarray([[x]]) for x in (gb, dp, mb, ib)))
        assert all(type(g) is float for g in got)
        assert all(_same(g, float(np.asarray(r).ravel()[0])) for g, r in zip(got, ref, strict=True)), (
            gb,
            dp,
            mb,
            ib,
        )
    # sharding_reasons: each bundled sharding part's verdict, as by_code and the where give it
    for code in range(len(table.entries["sharding"])):
        for _ in range(60):
            tp, dp, cp = (rng.choice((1.0, 2.0, 3.0, 8.0, 16.0, 64.0)) for _ in range(3))
            got = feasibility.sharding_reasons(table, float(code), tp, dp, cp, inp.topology)
            ref = feasibility.sharding_reasons(table, np.int64(code), tp, dp, cp, inp.topology)
            assert type(got) is int and got == int(ref), (code, tp, dp, cp)


def test_one_plans_allocator_figures_are_the_arrays_to_the_bit():
    """:func:`~shardmeter.model.allocator.stage_required_bytes` (one plan not sharded per
    parameter: allocated plus one page of slack), :func:`~shardmeter.model.allocator.churn_bytes`
    and :func:`~shardmeter.model.allocator.stage_reserved_bytes` of plain numbers (the maxima
    written out) give the batch's values, for the bundled runs' busiest GPUs at random and edge
    numbers (sharded per parameter or not, expandable segments or not, nan and inf)."""
    import numpy as np

    import shardmeter.model.evaluate as ev
    from shardmeter.model import allocator

    calls = [c for c in _captured(ev, "stage_required_bytes", _scenarios(30)) if type(c[0][4]) is float]
    assert len(calls) > 10
    rng = random.Random(47)
    shard_f = (
        "layers_per_stage",
        "params_per_gpu",
        "params_per_layer",
        "param_gather_bytes",
        "weight_bytes",
        "grad_bytes",
    )
    state_f = ("weights", "gradients", "optimizer", "param_shards", "extra")

    def x(v):
        return rng.choice(VALS) if rng.random() < 0.15 else v * rng.uniform(0.5, 2.0)

    def arr(v):
        return np.asarray([v])

    def one(a):
        return float(np.asarray(a).ravel()[0])

    for (ms, tr, shard0, state0, alloc0), _ in calls:
        for trial in range(60):
            shard = attrs.evolve(shard0, **{k: x(getattr(shard0, k)) for k in shard_f})
            state = attrs.evolve(
                state0,
                **{k: x(getattr(state0, k)) for k in state_f},
            )
            if trial % 3 == 0:
                state = attrs.evolve(state, param_shards=rng.choice((1.0, 0.5, 2.0, 8.0, math.inf, math.nan)))
            t2 = attrs.evolve(tr, expandable_segments=rng.choice((False, True, 0.0, 1.0)))
            alloc = x(alloc0)
            shard_a = attrs.evolve(shard, **{k: arr(getattr(shard, k)) for k in shard_f})
            state_a = attrs.evolve(state, **{k: arr(getattr(state, k)) for k in state_f})
            t2_a = attrs.evolve(t2, expandable_segments=arr(t2.expandable_segments))
            with np.errstate(all="ignore"):
                got = allocator.stage_required_bytes(ms, t2, shard, state, alloc)
                ref = allocator.stage_required_bytes(ms, t2_a, shard_a, state_a, arr(alloc))
                assert type(got) is float and _same(got, one(ref)), (trial, got, ref)
                act, loss = x(1e9), x(1e8)
                churn = allocator.churn_bytes(shard, state, act, loss)
                ref = allocator.churn_bytes(shard_a, state_a, arr(act), arr(loss))
                assert type(churn) is float and _same(churn, one(ref)), (trial, churn, ref)
                cap = rng.choice((80e9, 1e9, math.inf, math.nan, 0.0))
                res = allocator.stage_reserved_bytes(got, churn, cap)
                ref = allocator.stage_reserved_bytes(arr(got), arr(churn), arr(cap))
                assert type(res) is float and _same(res, one(ref)), (trial, res, ref)


def test_one_plans_local_shapes_are_the_arrays_to_the_bit():
    """:func:`~shardmeter.model.shapes.local_shapes` of plain floats (each where the value it
    picks, ceil and the maxima written out) gives the batch's shapes, every bundled model's, at
    random and edge degrees and layers (0: the same ZeroDivisionError where arrays give inf)."""
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import shapes

    est = Estimator()
    models = []
    for path in _scenarios(40):
        try:
            inp, _ = build_inputs(est.resolve(est.load(path)), scalar=True)
        except Exception:  # noqa: BLE001 (not one plan)
            continue
        if type(inp.layout.tp) is float:
            models.append((inp.model, inp.training))
    assert len(models) > 10
    vals = (0.0, 1.0, 2.0, 3.0, 8.0, 0.5, math.inf, math.nan)
    rng = random.Random(53)
    for _ in range(4000):
        ms, tr = rng.choice(models)
        ms = attrs.evolve(
            ms,
            kv_heads=rng.choice((ms.kv_heads, 0.0, 8.0, math.nan)),
            dense_layers=rng.choice((ms.dense_layers, 0.0, 3.0, 100.0)),
            experts=rng.choice((ms.experts, 1.0, 8.0)),
        )
        tp, pp, cp, v = (
            rng.choice(vals) if rng.random() < 0.3 else float(rng.choice((1, 2, 4, 8))) for _ in range(4)
        )
        layers = rng.choice((None, 0.0, 1.0, 7.0, 12.0, math.nan))
        try:
            got = shapes.local_shapes(ms, tr, tp, pp, cp, v, layers=layers)
        except ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                shapes._local_shapes_ops(ms, tr, tp, pp, cp, v, layers)
            continue
        assert _alike(got, shapes._local_shapes_ops(ms, tr, tp, pp, cp, v, layers))
        with np.errstate(all="ignore"):
            ref = shapes.local_shapes(
                ms,
                tr,
                *(np.asarray([x]) for x in (tp, pp, cp, v)),
                layers=None if layers is None else np.asarray([layers]),
            )
        for k, a in field_values(got).items():
            b = np.asarray(getattr(ref, k)).ravel()[0]
            if k == "moe":
                assert a is bool(b)
            else:
                assert type(a) is float and _same(a, float(b)), (k, a, b, tp, pp, cp, v, layers)
    # and a ZeroDivisionError where the general code's numbers raise one
    ms, tr = models[0]
    with pytest.raises(ZeroDivisionError):
        shapes.local_shapes(ms, tr, 0.0, 1.0, 1.0, 1.0)


class _Flt(float):
    """A float that is not ``type(x) is float``: the general code's numbers, the same values."""


def test_one_plans_layout_reasons_are_the_arrays_to_the_bit():
    """:func:`~shardmeter.model.feasibility.layout_reasons` of one plan (each where the bit it
    picks, ``ops.mod(a, b) != 0`` by :func:`~shardmeter.model.feasibility._indivisible`) is its
    array code's bits, at random and edge degrees (a zero divisor, inf, nan: numpy's mod)."""
    import numpy as np

    from shardmeter.model import feasibility

    vals = (0.0, 1.0, 2.0, 3.0, 4.0, 8.0, 96.0, 0.5, math.inf, math.nan)
    rng = random.Random(61)
    for _ in range(4000):
        args = [
            rng.choice(vals) if rng.random() < 0.4 else float(rng.choice((1, 2, 4, 8, 64))) for _ in range(10)
        ]
        got = feasibility.layout_reasons(*args)
        assert type(got) is int
        with np.errstate(all="ignore"):
            ref = feasibility.layout_reasons(*(np.asarray([x]) for x in args))
        assert got == int(np.asarray(ref).ravel()[0]), args
    for _ in range(2000):
        a, b = rng.choice(vals) * rng.choice((1.0, -1.0)), rng.choice(vals) * rng.choice((1.0, -1.0))
        with np.errstate(all="ignore"):
            assert feasibility._indivisible(a, b) is bool(np.mod(a, b) != 0), (a, b)


def test_one_plans_loss_transient_is_the_general_codes_to_the_bit():
    """:func:`~shardmeter.model.memory.loss_transient_bytes` of one plan (the bytes per logit its
    flags' truth picks) is the general code's (the same flags as numbers that are not plain
    floats), at random and edge flags and degrees, a zero ``tp``'s ZeroDivisionError too."""
    from types import SimpleNamespace

    from shardmeter.model.memory import loss_transient_bytes

    flags = (True, False, 0.0, 1.0, 2.0, -0.0, math.nan)
    rng = random.Random(67)
    for _ in range(3000):
        lp, fused, comp = (rng.choice(flags) for _ in range(3))
        tp = rng.choice((0.0, 0.5, 1.0, 2.0, 8.0, math.inf, math.nan))
        ms = SimpleNamespace(vocab=rng.choice((50257.0, 0.0, math.inf)))
        sh = SimpleNamespace(tokens=rng.choice((4096.0, 1.0, 0.0, math.nan)))
        tr = SimpleNamespace(loss_parallel=lp, fused_loss=fused, compiled_loss=comp)
        ref_tr = SimpleNamespace(**{k: _Flt(v) if type(v) is float else v for k, v in vars(tr).items()})
        if all(type(v) is bool for v in vars(tr).values()):
            ref_tr.fused_loss = _Flt(float(fused))  # one not plain: the general code
        try:
            got = loss_transient_bytes(ms, tr, sh, tp)
        except ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                loss_transient_bytes(ms, ref_tr, sh, tp)
            continue
        want = loss_transient_bytes(ms, ref_tr, sh, tp)
        assert type(got) is float and _same(got, float(want)), (lp, fused, comp, tp, got, want)


def test_plain_layer_reads_every_number_of_the_layers_activations():
    """:func:`~shardmeter.model.memory._plain_layer` (its reads in two tuple literals) is False as
    soon as any one number :func:`~shardmeter.model.memory.layer_activations` reads is not a
    plain float (a size) or a float or bool (a flag), and True for a bundled run's plan."""
    import numpy as np

    from shardmeter.model import busiest, memory

    calls = [c for c in _captured(busiest, "layer_activations", _scenarios(10)) if type(c[0][3]) is float]
    assert calls
    (ms, tr, sh, tp, sp), _ = calls[0]
    assert memory._plain_layer(ms, tr, sh, tp, sp)
    sizes = {
        "tr": ("recompute", "micro_batch", "recompute_layers"),
        "sh": ("seq_local", "tokens", "q_local", "ffn_local", "dense_layers_local", "layers_per_stage", "virtual_stages"),
        "ms": ("hidden", "heads", "q_dim", "kv_dim", "seq_len", "experts_per_token", "shared_experts", "ffn_hidden", "kv_rank", "q_rank"),
    }  # fmt: skip
    flags = {
        "tr": ("compile", "materialized", "op_saves_attention", "fp8", "fp8_te", "rc_moe", "rc_moe_act",
               "rc_shared_experts", "rc_layernorm", "rc_mlp", "rc_mla_up_proj"),
        "ms": ("dropout",),
    }  # fmt: skip
    recs = {"ms": ms, "tr": tr, "sh": sh}
    for group, odd in ((sizes, (np.float64(1.0), 1, True)), (flags, (np.float64(1.0), 1))):
        for rec, names in group.items():
            for n in names:
                for v in odd:
                    changed = {**recs, rec: attrs.evolve(recs[rec], **{n: v})}
                    assert not memory._plain_layer(changed["ms"], changed["tr"], changed["sh"], tp, sp), (
                        rec,
                        n,
                        v,
                    )
    assert not memory._plain_layer(ms, tr, sh, np.float64(tp), sp)
    assert not memory._plain_layer(ms, tr, sh, tp, 1)
    assert not memory._plain_layer(ms, tr, attrs.evolve(sh, moe=1), tp, sp)
    assert not memory._plain_layer(attrs.evolve(ms, swiglu=1), tr, sh, tp, sp)


def test_model_flops_values_are_the_records():
    """:func:`~shardmeter.model.flops.model_flops_values` (what the evaluator reads, no record) is
    :func:`~shardmeter.model.flops.model_flops`' fields in order."""
    import shardmeter.model.evaluate as ev
    from shardmeter.model import flops

    calls = [c for c in _captured(ev, "model_flops_values", _scenarios(20)) if type(c[0][0].layers) is float]
    assert len(calls) > 10
    for (ms, tr, share), _ in calls:
        rec = flops.model_flops(ms, tr, share)
        assert _alike(flops.model_flops_values(ms, tr, share), tuple(field_values(rec).values()))


def test_one_plans_hidden_terms_and_structural_reasons_are_the_general_codes():
    """:func:`~shardmeter.model.evaluate._hidden_terms` of one plan (the data-parallel maximum
    written out) is its array code's, at random and edge exposed seconds; and
    :func:`~shardmeter.model.evaluate.structural_reasons` given the layout's split inputs is the
    same bits as reading them itself."""
    import numpy as np

    import shardmeter.model.evaluate as ev

    calls = _captured(ev, "_hidden_terms", _scenarios(20))
    calls = [c for c in calls if type(c[0][2]) is float]
    assert len(calls) > 10
    rng = random.Random(71)
    for (m_int, pace, dp_exposed), _ in calls:
        for _ in range(30):
            x = (
                rng.choice(VALS) * rng.choice((1.0, -1.0))
                if rng.random() < 0.4
                else dp_exposed * rng.uniform(0, 3)
            )
            got = ev._hidden_terms(m_int, pace, x)
            with np.errstate(all="ignore"):
                ref = ev._hidden_terms(m_int, pace, np.asarray([x]))
            for k, a in field_values(got).items():
                assert type(a) is float and _same(a, float(np.asarray(getattr(ref, k)).ravel()[0])), (k, x)
    seen = [c for c in _captured(ev, "structural_reasons", _scenarios(20)) if len(c[0]) == 7]
    assert len(seen) > 10
    for (inp, parts, deg, m, peak, stl, split_in), _ in seen:
        assert all(np.array_equal(u, v) for u, v in zip(split_in, ev._split_inputs(inp.layout), strict=True))
        for m2 in (m, 0.5, 3.0, math.nan) if type(m) is float else (m,):
            with np.errstate(all="ignore"):
                a = ev.structural_reasons(inp, parts, deg, m2, peak, stl, split_in)
                b = ev.structural_reasons(inp, parts, deg, m2, peak, stl)
            assert np.array_equal(a, b) and type(a) is type(b)
