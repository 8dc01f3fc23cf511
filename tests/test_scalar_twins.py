"""The scalar path's written-out twins of the model's busiest formulas compute, for plain
numbers, exactly what the general code computes through :mod:`shardmeter.numeric.ops` (the
same operations in the same order: equal to the last bit, nan where it gives nan, and a
ZeroDivisionError where it raises one)."""

from __future__ import annotations

import math
import random

import pytest

from shardmeter.model import formulas

EDGES = (0.0, 1.0, 7.0, 100.0, 511.0, 512.0, 4096.0, 50257.0, 1e9, math.inf, math.nan)


def _same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def _both(fa, fb, *args):
    try:
        a = fa(*args)
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            fb(*args)
        return
    b = fb(*args)
    assert _same(a, b), (args, a, b)


def test_gemm_time_of_plain_numbers_is_the_general_codes_to_the_bit():
    rng = random.Random(24)
    cases = 0
    for _ in range(3000):
        m, n, k = (
            rng.choice(EDGES) if rng.random() < 0.2 else float(rng.randint(1, 70000)) for _ in range(3)
        )
        sms = rng.choice((0.0, 1.0, 108.0, 132.0, -1.0, math.nan))
        args = (
            m,
            n,
            k,
            rng.choice((312e12, 989e12, 0.0, 1e15)),
            rng.choice((0.7, 0.85, 1.0)),
            rng.choice((2.0e12, 3.35e12, 1.0)),
            sms,
            rng.choice((1.0, 2.0, 4.0, 2)),
            rng.choice((1.0, 3.0, 2)),
            rng.choice((1.0, 8.0, 96.0, 3)),
        )
        _both(formulas._gemm_time_floats, formulas._gemm_time_ops, *args)
        cases += 1
    assert cases == 3000
    # and gemm_time takes the twin for plain numbers
    assert formulas.gemm_time(
        4096.0, 4096.0, 4096.0, 989e12, 0.8, 3.35e12, 132.0
    ) == formulas._gemm_time_floats(4096.0, 4096.0, 4096.0, 989e12, 0.8, 3.35e12, 132.0, 2.0, 1.0, 1.0)


def test_a_collective_of_plain_numbers_is_the_general_codes_to_the_bit():
    import attrs

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import tiers

    est = Estimator()
    inp, _ = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)
    base = inp.topology
    rng = random.Random(7)
    for _ in range(3000):
        n_t = rng.choice((1, 2, 3))
        gpus = tuple(
            sorted(rng.choice((1.0, 2.0, 4.0, 8.0, 72.0, 256.0, 1024.0, math.inf)) for _ in range(n_t))
        )
        bw = tuple(rng.choice((0.0, 25e9, 50e9, 300e9, 450e9)) for _ in range(n_t))
        lat = tuple(rng.choice((0.0, 1e-6, 5e-6, 2e-5)) for _ in range(n_t))
        topo = attrs.evolve(base, tier_gpus=gpus, tier_bytes_s=bw, tier_latency_s=lat)
        nbytes = rng.choice((0.0, 1.0, 3e6, 7.5e8, 1e12))
        size = rng.choice((0.0, 1.0, 2.0, 3.0, 8.0, 16.0, 96.0, 1024.0))
        stride = rng.choice((0.0, 0.5, 1.0, 2.0, 8.0, 64.0))
        kind = rng.choice(("ag", "rs", "ar"))
        flat = rng.random() < 0.3
        assert tiers._finite_floats(nbytes, size, stride, topo)
        _both(
            lambda k, nb, sz, st, tp, f: tiers._ring_or_tree_floats(
                k, nb, sz, st, tp.tier_gpus, tp.tier_bytes_s, tp.tier_latency_s, f
            ),
            tiers._collective_ops,
            *(kind, nbytes, size, stride, topo, flat),
        )
    # the example's own island: NVLink nodes of 8 inside an island whose outer tier is inf GPUs
    assert base.tier_gpus[-1] == math.inf
    for kind in ("ag", "rs", "ar"):
        for size, stride in ((8.0, 1.0), (16.0, 8.0), (128.0, 1.0)):
            assert tiers._finite_floats(5.6e9, size, stride, base)
            _both(
                lambda k, nb, sz, st, tp, f: tiers._ring_or_tree_floats(
                    k, nb, sz, st, tp.tier_gpus, tp.tier_bytes_s, tp.tier_latency_s, f
                ),
                tiers._collective_ops,
                *(kind, 5.6e9, size, stride, base, False),
            )


def test_one_plans_optimizer_state_is_the_arrays_to_the_bit():
    """optimizer_bytes_per_param of plain numbers (only the plan's own optimizer's branch) is
    the batch's value, every code (and an unknown one: Adam's) at edge dimensions and shares."""
    import numpy as np

    from shardmeter.inputs.bundles import Optimizer
    from shardmeter.model.optimizers import optimizer_bytes_per_param

    rng = random.Random(7)
    codes = [float(c) for c in Optimizer] + [99.0]
    for _ in range(2000):
        code = rng.choice(codes)
        wb = rng.choice((1.0, 2.0, 4.0))
        hidden = rng.choice((1.0, 7.0, 4096.0, 12288.0, math.inf))
        other = rng.choice((0.0, 0.5, 1.0, 4096.0, 49152.0, math.inf))
        share = rng.choice((0.0, 0.013, 0.5, 1.0, 1.5, -0.1, rng.random()))
        one = optimizer_bytes_per_param(code, wb, hidden, other, share)
        arr = optimizer_bytes_per_param(*(np.asarray([x]) for x in (code, wb, hidden, other, share)))
        assert type(one) is float
        assert _same(one, float(arr[0])), (code, wb, hidden, other, share, one, arr)


def test_one_plans_stage_layers_are_the_arrays_to_the_bit():
    """stage_layers of plain numbers (its conditions as plain ifs, one split worked out) gives
    the batch's first, middle and last layers and ``bad``, even and uneven splits, the embedding
    and loss in the split or not."""
    import numpy as np

    from shardmeter.model.stages import stage_layers

    rng = random.Random(11)
    for _ in range(3000):
        layers = float(rng.choice((1, 2, 7, 24, 32, 61, 96, 126, 127)))
        pp = float(rng.choice((1, 2, 3, 4, 8, 16)))
        v = float(rng.choice((1, 1, 2, 3, 4)))
        first = float(rng.choice((0, 0, 0, 1, 2, 3, 4, 6, 8, 13)))
        last = float(rng.choice((0, 0, 0, 1, 2, 3, 4, 6, 8, 13)))
        emb, loss = float(rng.random() < 0.3), float(rng.random() < 0.3)
        args = (layers, pp, v, first, last, emb, loss)
        one = stage_layers(*args)
        arr = stage_layers(*(np.asarray([x]) for x in args))
        for name in ("first", "middle", "last"):
            a, b = getattr(one, name), getattr(arr, name)
            assert type(a) is float, (args, name)
            assert _same(a, float(np.asarray(b)[0])), (args, name, a, b)
        assert bool(one.bad) == bool(np.asarray(arr.bad)[0]), args


def test_one_plans_exposed_traffic_is_the_general_codes_to_the_bit():
    """exposed_traffic of plain numbers (:func:`~shardmeter.model.comm._exposed_floats`) gives
    the general code's three figures on random and edge traffic, windows and overlap."""
    from shardmeter.model import comm

    vals = (0.0, -0.0, 1e-6, 0.003, 0.5, 1.0, 7.0, 1e9, math.inf, -math.inf, math.nan, -1.0)
    rng = random.Random(5)
    for _ in range(5000):

        def x():
            return rng.choice(vals) if rng.random() < 0.3 else rng.uniform(0.0, 2.0)

        pt = comm.PricedTraffic(
            micro_batch_s=x(),
            micro_batch_fixed_s=x(),
            step_s=x(),
            bucket_s=x(),
            forward_s=x(),
            recompute_s=x(),
            backward_s=x(),
            forward_paired_s=x(),
            recompute_paired_s=x(),
            backward_paired_s=x(),
        )
        args = (pt, x(), x(), rng.random() < 0.7, (x(), x(), x()))
        a = comm._exposed_floats(*args)
        b = comm._exposed_ops(*args)
        assert all(_same(u, v) for u, v in zip(a, b, strict=True)), (args, a, b)
        assert comm.exposed_traffic(*args) == a or any(math.isnan(u) for u in a)


def test_one_plans_channels_communicators_and_recompute_share_are_the_arrays():
    """nccl_channels, the communicators' count and the full-recompute share of plain numbers
    (their conditions as plain ifs) are the batch's values."""
    import attrs
    import numpy as np

    from shardmeter.inputs.bundles import Recompute
    from shardmeter.model.interference import nccl_channels
    from shardmeter.model.overheads import communicators
    from shardmeter.model.recompute import full_recompute_share

    for cc in (0.0, -1.0, 7.0, 7.5, 8.0, 8.6, 8.9, 9.0, 9.5, 10.0, 10.3, 12.0, math.inf, math.nan):
        for multi in (False, True):
            arr = nccl_channels(np.asarray([cc]), np.asarray([multi]))
            assert _same(nccl_channels(cc, multi), float(arr[0])), (cc, multi)
    rng = random.Random(3)
    for _ in range(500):
        degs = [float(rng.choice((0, 1, 2, 3, 8, 64))) for _ in range(5)]
        arr = communicators(*(np.asarray([d]) for d in degs))
        assert communicators(*degs) == float(arr[0]), degs

    @attrs.frozen
    class Tr:
        recompute: object
        recompute_layers: object

    @attrs.frozen
    class Sh:
        layers_per_stage: object
        virtual_stages: object

    modes = [float(m) for m in Recompute]
    for _ in range(2000):
        tr = (rng.choice(modes), float(rng.choice((0, 0, 1, 2, 3, 5, 12, 96))))
        sh = (float(rng.choice((1, 2, 3, 6, 12, 24, 96))), float(rng.choice((1, 2, 3, 4))))
        one = full_recompute_share(Tr(*tr), Sh(*sh))
        arr = full_recompute_share(Tr(*map(np.asarray, tr)), Sh(*map(np.asarray, sh)))
        assert type(one) is float and _same(one, float(arr)), (tr, sh, one, arr)


def test_one_plans_attention_params_are_the_arrays_to_the_bit():
    """attention_params of plain numbers (MLA's low ranks as plain ifs) is the batch's value,
    with and without the low-rank projections, at edge widths."""
    import numpy as np

    rng = random.Random(13)
    dims = (0.0, 1.0, 128.0, 1024.0, 4096.0, 12288.0, 1e9, math.inf, math.nan)
    for _ in range(3000):
        h, q, kv, v, o = (
            rng.choice(dims) if rng.random() < 0.2 else float(rng.randint(1, 20000)) for _ in range(5)
        )
        qr, kvr = (rng.choice((0, 0.0, 512.0, 1536.0, -1.0, math.nan)) for _ in range(2))
        one = formulas.attention_params(h, q, kv, v, o, qr, kvr)
        with np.errstate(invalid="ignore", over="ignore"):  # inf x 0: nan, as the floats give
            arr = formulas.attention_params(
                *(np.asarray([x], dtype=float) for x in (h, q, kv, v, o, qr, kvr))
            )
            dflt = float(formulas.attention_params(*(np.asarray([x]) for x in (h, q, kv)))[0])
        assert _same(one, float(arr[0])), (h, q, kv, v, o, qr, kvr, one, arr)
        assert _same(formulas.attention_params(h, q, kv), dflt)


def test_one_plans_elementwise_kernels_are_the_general_codes_to_the_bit():
    """layer_elementwise of plain numbers (:func:`~shardmeter.model.elementwise._phase_floats`)
    is the general code's (:func:`~shardmeter.model.elementwise._phase_elementwise` through
    ops) and the batch's, every block family, dropout and eager or fused, at edge sizes."""
    import numpy as np

    from shardmeter.model import elementwise as el

    sizes = (0.0, 1.0, 4096.0, 1e6, 5e7, 1e12, math.inf, math.nan)
    rng = random.Random(17)
    for _ in range(3000):
        n = [rng.choice(sizes) if rng.random() < 0.2 else rng.uniform(1.0, 1e9) for _ in range(4)]
        hbm = rng.choice((1.0, 1.5e12, 2.0e12, 3.35e12, 8e12, math.inf, 0.0))
        flags = [rng.random() < 0.5 for _ in range(3)]
        args = (*n, *flags, hbm)
        try:
            one = el.layer_elementwise(*args)
        except ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                el._phase_elementwise(0, *n, flags[0], flags[1], not flags[2], hbm)
            continue
        sw, do, eager = flags[0], flags[1], not flags[2]
        ref = tuple(el._phase_elementwise(ph, *n, sw, do, eager, hbm) for ph in (0, 1))
        with np.errstate(invalid="ignore", over="ignore"):
            arr = el.layer_elementwise(*(np.asarray([x]) for x in args))
        for a, b, c in zip(one, ref, arr, strict=True):
            assert type(a) is float and _same(a, b) and _same(a, float(np.asarray(c)[0])), (args, one, ref)


def _one_and_array(fn, *args):
    """``fn`` of plain floats (its scalar twin) and of 1-element arrays (the ops code): the float
    result and the array's element (``(None, None)`` where the floats divide by zero, which
    sends one plan to the array path)."""
    import numpy as np

    try:
        one = fn(*args)
    except ZeroDivisionError:
        return None, None
    with np.errstate(all="ignore"):
        arr = fn(*(np.asarray([a]) if type(a) is float else a for a in args))
    return one, float(np.asarray(arr).ravel()[0])


def test_one_plans_offload_share_nccl_share_ring_and_shard_groups_are_the_arrays_to_the_bit():
    """offload_kept, logits_bytes_per_element, nccl_sm_share, ring_collective_time and the ZeRO
    shard groups of plain floats (ops.maximum/minimum/where written out) are the batch's
    values, at edge numbers (0, 1, negative, inf, nan)."""
    import attrs

    from shardmeter.model import interference, memory
    from shardmeter.parts import ShardInputs
    from shardmeter.strategies import zero

    vals = (0.0, -0.0, -1.0, 0.5, 1.0, 2.0, 3.0, 7.0, 8.0, 96.0, 1e9, math.inf, -math.inf, math.nan)
    rng = random.Random(29)

    def x():
        return rng.choice(vals) if rng.random() < 0.5 else rng.uniform(0.0, 200.0)

    @attrs.frozen
    class Tr:
        offload_layers: object = 0.0
        compiled_loss: object = 0.0

    @attrs.frozen
    class Sh:
        layers_per_stage: object

    cases = 0
    for _ in range(4000):
        checks = [
            (lambda o, ls: memory.offload_kept(Tr(offload_layers=o), Sh(ls)), x(), x()),
            (lambda c: memory.logits_bytes_per_element(Tr(compiled_loss=c)), x()),
            (interference.nccl_sm_share, x(), x()),
            (formulas.ring_collective_time, x(), x(), x(), x(), rng.choice((0.0, 1.0, 2.0))),
        ]
        by_domain = rng.random() < 0.5
        has_etp = rng.random() < 0.5

        def shard(tp, dp, cp, ep, etp, dom, has_etp=has_etp):
            return ShardInputs(
                params_per_gpu=1.0, params_per_layer=1.0, layers_per_stage=1.0, weight_bytes=2.0,
                grad_bytes=2.0, optimizer_bytes_per_param=12.0, tp=tp, dp=dp, cp=cp,
                domain_gpus=dom, ep=ep, expert_tp=etp if has_etp else None,
            )  # fmt: skip

        degrees = [x() for _ in range(6)]
        for group in (zero.shard_group_size, zero.expert_shard_group_size):
            checks.append((lambda *d, g=group, b=by_domain: g(shard(*d), b), *degrees))
        for fn, *args in checks:
            one, arr = _one_and_array(fn, *args)
            if one is None:
                continue
            assert type(one) is float and _same(one, arr), (fn, args, one, arr)
            cases += 1
    assert cases > 10000


def test_one_plans_model_flops_are_the_arrays_to_the_bit():
    """model_flops of one plan (its recompute mode's term only, as plain ifs) is the batch's
    value, every mode, op recompute saving the attention or not, every bundled model."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.inputs.bundles import Recompute
    from shardmeter.load.scenario import model_presets
    from shardmeter.model.evaluate import _as_arrays
    from shardmeter.model.flops import model_flops

    est = Estimator()
    rng = random.Random(31)
    for preset in sorted(model_presets()):
        sc = {"model": {"preset": preset}, "training": {"global_batch": 64, "micro_batch": 1}}
        sc["island"] = [{"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 8}]
        inp, _ = build_inputs(est.resolve(est.load(sc)), scalar=True)
        for mode in (*(float(m) for m in Recompute), math.nan):
            for saves in (0.0, 1.0):
                tr = attrs.evolve(inp.training, recompute=mode, op_saves_attention=saves)
                one_inp = attrs.evolve(inp, training=tr)
                arr_inp = _as_arrays(one_inp)
                share = rng.choice((0.0, 0.25, 1.0))
                one = model_flops(one_inp.model, one_inp.training, share)
                arr = model_flops(arr_inp.model, arr_inp.training, np.asarray([[share]]))
                for f in attrs.fields(type(one)):
                    a, b = getattr(one, f.name), float(np.asarray(getattr(arr, f.name)).ravel()[0])
                    assert type(a) is float and _same(a, b), (preset, mode, saves, f.name, a, b)


def test_one_islands_details_are_the_general_codes_to_the_bit():
    """The report's figures of one plan on one island (:func:`~shardmeter.model.islands._details_floats`)
    are the general code's (:func:`~shardmeter.model.islands._details_ops`, its scalar branch),
    every figure and record field, at random and edge numbers (a zero step, zero GPUs: the
    same ZeroDivisionError)."""
    import attrs

    import shardmeter.model.evaluate as ev
    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import islands
    from shardmeter.model.outputs import field_values

    est = Estimator()
    inp, table = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)
    seen = []
    real = islands._details
    try:  # the arguments combine_islands gives it for the example
        islands._details = lambda *a: (seen.append(a), real(*a))[1]
        ev.evaluate(inp, table, fallback=False)
    finally:
        islands._details = real
    inp0, st0, island0, full, slow0, step0, wan0 = seen[0]
    assert full == ()
    vals = (0.0, -0.0, 1.0, 3.5, 1e-9, 1e12, math.inf, math.nan)
    rng = random.Random(37)

    def x(v):
        return rng.choice(vals) if rng.random() < 0.2 else v * rng.uniform(0.5, 2.0)

    def flat(v):
        if attrs.has(type(v)):
            return [y for f in field_values(v).values() for y in flat(f)]
        return [v]

    for _ in range(500):
        st = attrs.evolve(
            st0,
            terms=attrs.evolve(st0.terms, **{k: x(v) for k, v in field_values(st0.terms).items()}),
            hidden=attrs.evolve(st0.hidden, **{k: x(v) for k, v in field_values(st0.hidden).items()}),
            **{
                k: x(getattr(st0, k)) for k in ("model_flops_per_token", "peak_flops", "gpus", "island_batch")
            },
        )
        island = {**island0, **{k: x(island0[k]) for k in ("step_s", "gpus", "memory_bytes")}}
        wan = attrs.evolve(wan0, wan_s=x(1.0), round_s=x(1.0))
        args = (inp0, st, x(slow0), x(step0), wan)
        assert islands._all_floats(inp0, st, island, args[2], args[3], wan)
        a_isl, b_isl = dict(island), dict(island)
        try:
            a = islands._details_floats(inp0, st, a_isl, *args[2:])
        except ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                islands._details_ops(inp0, st, b_isl, (), *args[2:])
            continue
        b = islands._details_ops(inp0, st, b_isl, (), *args[2:])
        for got, want in ((a, b), (a_isl, b_isl)):
            assert got.keys() == want.keys()
            for k in got:
                ga, gb = flat(got[k]), flat(want[k])
                assert len(ga) == len(gb) and all(_same(u, v) for u, v in zip(ga, gb, strict=True)), k


def test_one_plans_layer_activations_are_the_arrays_to_the_bit():
    """layer_activations of one plan (:func:`~shardmeter.model.memory._layer_activations_floats`:
    plain ifs, the recompute mode's bytes only) is the batch's value, every bundled model, every
    recompute mode and random flags, modules, layouts and edge widths (0, inf, nan)."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.inputs.bundles import Recompute
    from shardmeter.load.scenario import model_presets
    from shardmeter.model import memory
    from shardmeter.model.shapes import local_shapes

    est = Estimator()
    rng = random.Random(41)
    flags = ("compile", "materialized", "op_saves_attention", "fp8", "fp8_te", "rc_moe", "rc_moe_act")
    flags += ("rc_shared_experts", "rc_layernorm", "rc_mlp", "rc_mla_up_proj")
    cases = 0
    for preset in sorted(model_presets()):
        sc = {"model": {"preset": preset}, "training": {"global_batch": 64, "micro_batch": 1}}
        sc["island"] = [{"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 8}]
        inp, _ = build_inputs(est.resolve(est.load(sc)), scalar=True)
        for mode in (*(float(m) for m in Recompute), math.nan):
            for _ in range(6):
                tr = attrs.evolve(
                    inp.training,
                    recompute=mode,
                    recompute_layers=rng.choice((0.0, 1.0, 3.0)),
                    micro_batch=rng.choice((1.0, 2.0, 0.0, math.inf)),
                    **{f: rng.random() < 0.5 for f in flags},
                )
                ms = attrs.evolve(
                    inp.model, dropout=rng.random() < 0.5, dense_layers=rng.choice((0.0, 1.0, 3.0))
                )
                if rng.random() < 0.2:
                    ms = attrs.evolve(ms, q_rank=rng.choice((0.0, 512.0)), kv_rank=rng.choice((0.0, 256.0)))
                tp, sp = rng.choice((1.0, 2.0, 8.0)), rng.random() < 0.5
                pp, cp, v = rng.choice((1.0, 4.0)), rng.choice((1.0, 2.0)), rng.choice((1.0, 2.0))
                sh = local_shapes(ms, tr, tp, pp, cp, v, layers=rng.choice((None, 0.0, 5.0)))
                assert memory._plain_layer(ms, tr, sh, tp, sp)
                try:
                    one = memory.layer_activations(ms, tr, sh, tp, sp)
                except ZeroDivisionError:
                    continue

                with np.errstate(all="ignore"):
                    ref = memory.layer_activations(
                        _as_batch(ms), _as_batch(tr), _as_batch(sh), np.asarray([tp]), np.asarray([sp])
                    )
                for a, b in zip(one, ref, strict=True):
                    b = float(np.asarray(b).ravel()[0])
                    assert type(a) is float and _same(a, b), (preset, mode, a, b)
                cases += 1
    assert cases > 300


def _as_batch(rec):
    """An attrs record of plain numbers as the same record of 1-element arrays."""
    import attrs
    import numpy as np

    return type(rec)(**{f.name: np.asarray([getattr(rec, f.name)]) for f in attrs.fields(type(rec))})


def test_one_plans_micro_batch_compute_is_the_arrays_to_the_bit():
    """micro_batch_compute of one plan (:func:`~shardmeter.model.compute._micro_batch_floats`:
    the GEMMs, attention, recompute and head written out) is the batch's value, every field,
    every bundled model, recompute mode, precision and random flags and layouts (op recompute
    and MLA take the general code on both paths)."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.inputs.bundles import Recompute
    from shardmeter.load.scenario import model_presets
    from shardmeter.model import compute
    from shardmeter.model.shapes import local_shapes

    est = Estimator()
    rng = random.Random(43)
    flags = ("fp8", "materialized", "compile", "rc_core_attn", "rc_mlp", "rc_moe", "rc_shared_experts")
    cases = 0
    for preset in sorted(model_presets()):
        sc = {"model": {"preset": preset}, "training": {"global_batch": 64, "micro_batch": 1}}
        sc["island"] = [{"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 8}]
        inp, _ = build_inputs(est.resolve(est.load(sc)), scalar=True)
        for mode in (*(float(m) for m in Recompute), math.nan):
            for _ in range(5):
                tr = attrs.evolve(
                    inp.training,
                    recompute=mode,
                    recompute_layers=rng.choice((0.0, 1.0, 3.0)),
                    micro_batch=rng.choice((1.0, 2.0, 4.0)),
                    lora_rank=rng.choice((0.0, 0.0, 16.0)),
                    **{f: rng.random() < 0.5 for f in flags},
                )
                ms = attrs.evolve(
                    inp.model,
                    dropout=rng.random() < 0.5,
                    causal=rng.random() < 0.8,
                    dense_layers=rng.choice((0.0, 1.0, 3.0)),
                    capacity_factor=rng.choice((1.0, 1.25, 0.0)),
                )
                hw = attrs.evolve(inp.hardware, sm_count=rng.choice((108.0, 132.0, 0.0)))
                tp, ep, sp = rng.choice((1.0, 2.0, 8.0)), rng.choice((1.0, 2.0)), rng.random() < 0.5
                pp, cp, v = rng.choice((1.0, 4.0)), rng.choice((1.0, 2.0)), rng.choice((1.0, 2.0))
                sh = local_shapes(ms, tr, tp, pp, cp, v, layers=rng.choice((None, 5.0)))
                peak, peak16 = hw.peak_flops, hw.peak16_flops
                plain = compute._plain_compute(ms, tr, hw, sh, tp, ep, sp, peak, peak16)
                assert plain == (mode != Recompute.OP and not ms.kv_rank > 0)
                try:
                    one = compute.micro_batch_compute(ms, tr, hw, sh, tp, ep, sp, peak, peak16)
                except ZeroDivisionError:
                    continue
                args = (_as_batch(ms), _as_batch(tr), _as_batch(hw), _as_batch(sh))
                with np.errstate(all="ignore"):
                    ref = compute.micro_batch_compute(
                        *args, *(np.asarray([x]) for x in (tp, ep, sp, peak, peak16))
                    )
                for f in attrs.fields(type(one)):
                    a, b = getattr(one, f.name), float(np.asarray(getattr(ref, f.name)).ravel()[0])
                    assert type(a) is float and _same(a, b), (preset, mode, f.name, a, b)
                cases += plain
    assert cases > 150


def test_one_plans_layer_comm_is_the_arrays_to_the_bit():
    """layer_comm of one plan (:func:`~shardmeter.model.comm._layer_comm_floats`: tp_comm,
    cp_comm and ep_exposed_s written out) is the batch's value, every field, every bundled
    model and recompute mode, random degrees (tp, cp, ep of 1 or more), overlap and async TP."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.inputs.bundles import Recompute
    from shardmeter.load.scenario import model_presets
    from shardmeter.model import comm
    from shardmeter.model.compute import micro_batch_compute
    from shardmeter.model.evaluate import _as_arrays
    from shardmeter.model.shapes import local_shapes

    def grid(rec):  # a record of plain numbers as (1, 1) arrays (one row, one island)
        return type(rec)(**{f.name: np.asarray([[getattr(rec, f.name)]]) for f in attrs.fields(type(rec))})

    est = Estimator()
    rng = random.Random(47)
    cases = 0
    for preset in sorted(model_presets()):
        sc = {"model": {"preset": preset}, "training": {"global_batch": 64, "micro_batch": 1}}
        sc["island"] = [{"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 8}]
        inp, _ = build_inputs(est.resolve(est.load(sc)), scalar=True)
        arr = _as_arrays(inp)
        for mode in (*(float(m) for m in Recompute), math.nan):
            for _ in range(6):
                tp, cp, ep = (rng.choice((1.0, 2.0, 8.0, 16.0)) for _ in range(3))
                sp, overlap, async_tp = (rng.random() < 0.5 for _ in range(3))
                share = rng.choice((1.0, 0.5))
                ms, tr, hw, topo = inp.model, inp.training, inp.hardware, inp.topology
                sh = local_shapes(ms, tr, tp, 2.0, cp, 1.0)
                ct = micro_batch_compute(ms, tr, hw, sh, tp, ep, sp, hw.peak_flops, hw.peak16_flops)
                kw = {"hbm_bytes_s": hw.hbm_bytes_s, "etp": rng.choice((None, 1.0, 2.0))}
                args = (tp, cp, ep, overlap, mode, sp, share, async_tp)
                try:
                    one = comm.layer_comm(ms, sh, ct, topo, *args, **kw)
                except ZeroDivisionError:
                    continue
                with np.errstate(all="ignore"):
                    ref = comm.layer_comm(
                        arr.model, grid(sh), grid(ct), arr.topology, *(np.asarray([[x]]) for x in args), **kw
                    )
                for f in attrs.fields(type(one)):
                    a, b = getattr(one, f.name), float(np.asarray(getattr(ref, f.name)).ravel()[0])
                    assert type(a) is float and _same(a, b), (preset, mode, args, f.name, a, b)
                cases += 1
    assert cases > 300


def test_one_plans_stage_invariants_are_the_arrays_to_the_bit():
    """What shard_inputs computes of a stage once (:func:`~shardmeter.model.sharding._invariants_floats`
    of one plan in full training) is the batch's value, every entry, every bundled model,
    random degrees, recompute modes, precisions and stage shapes."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.inputs.bundles import Recompute
    from shardmeter.load.scenario import model_presets
    from shardmeter.model import sharding
    from shardmeter.model.degrees import Degrees
    from shardmeter.model.shapes import local_shapes

    est = Estimator()
    rng = random.Random(53)
    cases = 0
    for preset in sorted(model_presets()):
        sc = {"model": {"preset": preset}, "training": {"global_batch": 64, "micro_batch": 1}}
        sc["island"] = [{"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 8}]
        inp, _ = build_inputs(est.resolve(est.load(sc)), scalar=True)
        for _ in range(20):
            tr = attrs.evolve(
                inp.training,
                recompute=float(rng.choice(list(Recompute))),
                recompute_layers=rng.choice((0.0, 1.0, 3.0, 100.0)),
                weight_bytes=rng.choice((2.0, 4.0, 1.0, 3.0)),
                fp8_params=rng.random() < 0.3,
            )
            ms = attrs.evolve(inp.model, dense_layers=rng.choice((0.0, 1.0, 3.0)))
            tp, ep, etp, pp = (rng.choice((1.0, 2.0, 8.0)) for _ in range(4))
            deg = Degrees(tp=tp, etp=etp, pp=pp, dp=4.0, cp=1.0, ep=ep, v=1.0, sp=True)
            sh = local_shapes(ms, tr, tp, pp, 1.0, 1.0, layers=rng.choice((None, 0.0, 5.0)))
            assert sharding._plain_stage(ms, tr, sh, deg)
            try:
                one = sharding._invariants_floats(ms, tr, sh, deg)
            except ZeroDivisionError:
                continue
            batch = [_as_batch(r) for r in (ms, tr, sh, deg)]
            with np.errstate(all="ignore"):
                ref = sharding._invariants(*batch)
            assert one.keys() == ref.keys()
            for k in one:
                a, b = one[k], ref[k]
                for x, y in zip(a, b, strict=True) if isinstance(a, tuple) else ((a, b),):
                    y = float(np.asarray(y).ravel()[0])
                    assert type(x) in (float, bool) and _same(float(x), y), (preset, k, x, y)
            cases += 1
    assert cases > 150


def test_one_plans_layout_and_batch_reasons_are_the_arrays():
    """layout_reasons and batch_reasons of plain numbers (each where the bit it picks, the
    experts' divisibility only with experts) give the batch's bits, at random and edge numbers
    (0, inf, nan; heads, sequences and experts that do or do not divide)."""
    import numpy as np

    from shardmeter.model import feasibility
    from shardmeter.model.stages import stage_layers

    vals = (0.0, 1.0, 2.0, 3.0, 4.0, 8.0, 12.0, 16.0, 64.0, 96.0, math.inf, math.nan)
    rng = random.Random(59)
    for _ in range(4000):
        layout = [rng.choice(vals) for _ in range(10)]  # heads, seq, experts, tp, pp, cp, dp, ep, gpus, etp
        with np.errstate(all="ignore"):
            one = feasibility.layout_reasons(*layout)
            arr = feasibility.layout_reasons(*(np.asarray([x]) for x in layout))
        assert type(one) is int and one == int(np.asarray(arr)[0]), (layout, one, arr)
        m = rng.choice((*vals, 0.5, 1.5, 2.0000000001, 7.0))
        layers, pp, v = (
            rng.choice((1.0, 24.0, 96.0)),
            rng.choice((1.0, 2.0, 8.0)),
            rng.choice((1.0, 2.0, 3.0)),
        )
        split = stage_layers(layers, pp, v, rng.choice((0.0, 3.0)), 0.0)
        with np.errstate(all="ignore"):
            one = feasibility.batch_reasons(m, pp, v, layers, split=split)
            arr = feasibility.batch_reasons(*(np.asarray([x]) for x in (m, pp, v, layers)), split=split)
        assert type(one) is int and one == int(np.asarray(arr)[0]), (m, pp, v, layers, one, arr)


def test_one_plans_layer_params_and_flops_are_the_arrays_to_the_bit():
    """params_per_layer, model_params and layers_forward_flops of plain numbers (plain ifs; a
    dense model's dense layer taken as its MoE layer, not computed again) are the batch's
    values, at edge numbers (0, -0, inf, nan) and expert counts at and around 1."""
    import numpy as np

    vals = (0.0, -0.0, 1.0, 2.0, 3.0, 64.0, 4096.0, math.inf, math.nan)
    rng = random.Random(61)

    def x():
        return rng.choice(vals) if rng.random() < 0.3 else float(rng.randint(1, 9000))

    for _ in range(3000):
        h, q, kv, ffn = x(), x(), x(), x()
        moe_ffn = ffn if rng.random() < 0.6 else x()
        experts, shared, ktop = (
            rng.choice((0.0, 1.0, 2.0, 8.0)),
            rng.choice((0.0, 0.0, 1.0)),
            rng.choice((1.0, 2.0)),
        )
        sw, tied = rng.random() < 0.5, rng.random() < 0.5
        layers, vocab, seq, dense = x(), x(), x(), rng.choice((0.0, 1.0, 3.0))
        checks = (
            (
                lambda *a: formulas.params_per_layer(*a[:5], a[5], shared_experts=a[6]),
                (h, q, kv, ffn, sw, experts, shared),
            ),
            (
                lambda *a: formulas.model_params(
                    *a[:8], a[8], moe_ffn=a[9], shared_experts=a[10], dense_layers=a[11]
                ),
                (layers, h, q, kv, ffn, sw, vocab, tied, experts, moe_ffn, shared, dense),
            ),
            (
                lambda *a: formulas.layers_forward_flops(
                    *a[:9], moe_ffn=a[9], shared_experts=a[10], dense_layers=a[11]
                ),
                (layers, h, q, kv, ffn, sw, seq, ktop, experts, moe_ffn, shared, dense),
            ),
        )
        for fn, args in checks:
            one = fn(*args)
            with np.errstate(all="ignore"):
                arr = fn(*(np.asarray([a]) for a in args))
            for a, b in zip(*((one, arr) if isinstance(one, tuple) else ((one,), (arr,))), strict=True):
                assert type(a) is float and _same(a, float(np.asarray(b)[0])), (args, a, b)


def _classic_schedules():
    """The bundled classic schedules (GPipe, 1F1B, interleaved) with their options, and a
    bubble fraction that is not 1."""
    import attrs

    from shardmeter.strategies.builtin import shardmeter_pipeline_schedules
    from shardmeter.strategies.schedules import ClassicSchedule, InterleavedOptions

    out = []
    for p in shardmeter_pipeline_schedules():
        if type(p) is ClassicSchedule:
            opts = (InterleavedOptions(), InterleavedOptions(microbatch_rule="pytorch"))
            out.extend((p, o) for o in (opts if p.bubble_over_virtual else (None,)))
            out.append((attrs.evolve(p, bubble_fraction=0.5), opts[0] if p.bubble_over_virtual else None))
    assert len(out) >= 6
    return out


def test_one_plans_classic_schedule_terms_are_the_arrays_to_the_bit():
    """ClassicSchedule's terms, in_flight_at, loss_in_flight and infeasible of plain floats (the
    minimum and where written out, the needs as plain bools) are the batch's values at random
    and edge stages, micro-batches, chunks and ranks, or raise where the floats divide by 0."""
    import numpy as np

    from shardmeter.parts import PipeInputs

    rng = random.Random(5)
    pick = (0.0, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0, 7.0, -1.0, 0.5, math.inf, math.nan)
    cases = 0
    for part, opts in _classic_schedules():
        for _ in range(600):
            pp, m, v = (
                rng.choice(pick) if rng.random() < 0.3 else float(rng.randint(1, 12)) for _ in range(3)
            )
            vals = dict(pp=pp, micro_batches=m, virtual_stages=v, stage_s=rng.choice((0.0, 0.25, 1.5)))
            vals.update(forward_s=0.1, weight_grad_s=0.05)
            one = PipeInputs(**vals)
            arr = PipeInputs(**{k: np.asarray([x]) for k, x in vals.items()})
            with np.errstate(all="ignore"):
                try:
                    t = part.terms(one, opts)
                except ZeroDivisionError:
                    t = None
                ta = part.terms(arr, opts)
                if t is not None:
                    for name in ("bubble_s", "in_flight", "p2p_transfers"):
                        a, b = getattr(t, name), getattr(ta, name)
                        assert type(a) is float and _same(a, float(np.asarray(b)[0])), (part.name, vals, name)
                bad, bad_a = part.infeasible(one, opts), part.infeasible(arr, opts)
                assert bool(bad) == bool(np.asarray(bad_a)[0]), (part.name, opts, vals)
                if type(pp) is float and pp and math.isfinite(pp) and math.isfinite(m):
                    assert type(bad) is bool, (part.name, opts, vals)
                for rank in (0.0 * pp, min(1.0, pp - 1.0) if pp == pp else pp, pp - 1.0, 2.0):
                    try:
                        h = part.in_flight_at(one, opts, rank)
                    except ZeroDivisionError:
                        continue
                    ha = part.in_flight_at(arr, opts, np.asarray([rank]))
                    assert type(h) is float and _same(h, float(np.asarray(ha)[0])), (part.name, vals, rank)
                    cases += 1
                lo, lo_a = part.loss_in_flight(one, opts), part.loss_in_flight(arr, opts)
                assert type(lo) is float and _same(lo, float(np.asarray(lo_a)[0])), (part.name, vals)
    assert cases > 10000


def test_one_plans_span_link_is_the_arrays_to_the_bit():
    """span_link of plain floats (:func:`~shardmeter.model.tiers._span_floats`: the members per
    tier written out, the first tier that holds the group) is the batch's link, at random and
    edge group sizes, strides and tiers (inf and nan among them)."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import tiers

    est = Estimator()
    inp, _ = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)
    base = inp.topology
    rng = random.Random(9)
    edges = (0.0, 0.5, 1.0, 2.0, 8.0, 64.0, 1024.0, -1.0, math.inf, math.nan)
    for _ in range(3000):
        n_t = rng.choice((1, 2, 3))
        gpus = tuple(sorted(rng.choice((1.0, 2.0, 4.0, 8.0, 72.0, 256.0, 1024.0)) for _ in range(n_t - 1)))
        gpus = (*gpus, rng.choice((math.inf, 4096.0, math.nan)))
        bw = tuple(rng.choice((25e9, 50e9, 300e9, 450e9)) + t for t in range(n_t))
        lat = tuple(rng.choice((1e-6, 5e-6, 2e-5)) + t * 1e-9 for t in range(n_t))
        size, stride = (
            rng.choice(edges) if rng.random() < 0.3 else float(rng.randint(1, 64)) for _ in range(2)
        )
        one = tiers.span_link(
            size, stride, attrs.evolve(base, tier_gpus=gpus, tier_bytes_s=bw, tier_latency_s=lat)
        )
        arr_topo = attrs.evolve(
            base,
            tier_gpus=np.asarray([gpus]),
            tier_bytes_s=np.asarray([bw]),
            tier_latency_s=np.asarray([lat]),
        )
        with np.errstate(all="ignore"):
            arr = tiers.span_link(np.asarray([size]), np.asarray([stride]), arr_topo)
        for a, b in zip(one, arr, strict=True):
            assert type(a) is float and _same(a, float(np.asarray(b)[0])), (size, stride, gpus, one, arr)


def test_unpaired_traffic_is_priced_as_the_general_code_to_the_bit():
    """price_traffic of events no window pairs (:func:`~shardmeter.model.comm._price_unpaired`:
    each pass's sum a local, the last bucket's maximum written out) gives the general code's
    record, every field, on random events, windows and edge numbers, plain floats and arrays;
    a paired event in a pass window goes to the general code."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import comm
    from shardmeter.parts import CommEvent

    est = Estimator()
    topo = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)[0].topology
    rng = random.Random(13)
    vals = (0.0, 1.0, 3.0, 1e6, 2.5e9, math.inf, math.nan)

    def x(lo: float, hi: float) -> float:
        return rng.choice(vals) if rng.random() < 0.15 else rng.uniform(lo, hi)

    def event(arrays: bool) -> CommEvent:
        per = rng.choice(("micro_batch", "step"))
        num = (lambda v: np.asarray([v])) if arrays else (lambda v: v)
        return CommEvent(
            collective=rng.choice(("all_gather", "reduce_scatter", "all_reduce", "all_to_all")),
            bytes=num(x(1e3, 1e10)),
            group_size=num(float(rng.choice((1, 2, 8, 16, 64, 128)))),
            group_stride=num(float(rng.choice((1, 8, 64)))),
            count=num(x(0.0, 96.0)),
            flat=rng.random() < 0.2,
            per=per,
            window=rng.choice(("micro_batch", "forward", "recompute", "backward"))
            if per == "micro_batch"
            else "micro_batch",
            exposed_fraction=num(x(0.0, 1.0)),
            bucket_bytes=rng.choice((None, x(1e6, 1e9))),
            bucket_ranks=num(float(rng.choice((1, 16, 128)))),
            paired=((0.5, 0.4), (0.5, 0.6)) if rng.random() < 0.2 else (),
        )

    general = 0
    for i in range(3000):
        arrays = i % 10 == 0
        events = [event(arrays) for _ in range(rng.choice((0, 1, 2, 3, 4)))]
        if events and rng.random() < 0.4:  # events sharing the last one's bucket objects (ZeRO-1/2's two)
            last = events[-1]
            shared = dict(bucket_bytes=last.bucket_bytes, bucket_ranks=last.bucket_ranks, per="step")
            events += [attrs.evolve(event(arrays), **shared) for _ in range(rng.choice((1, 2)))]
        windows = None if rng.random() < 0.3 else (x(0.0, 2.0), x(0.0, 2.0), x(0.0, 2.0))
        with np.errstate(all="ignore"):
            want = comm._price_general(events, topo, windows)
            got = comm._price_unpaired(events, topo, windows)
            if got is None:
                assert windows and any(e.paired and e.window != "micro_batch" for e in events)
                general += 1
                continue
            for f in attrs.fields(comm.PricedTraffic):
                a, b = getattr(got, f.name), getattr(want, f.name)
                if arrays:
                    assert np.array_equal(a, b, equal_nan=True) and np.shape(a) == np.shape(b), (f.name, a, b)
                else:
                    assert type(a) is float and _same(a, b), (events, windows, f.name, a, b)
    assert 100 < general < 1500


def test_one_plans_even_stage_layers_are_the_arrays_to_the_bit():
    """even_stage_layers of plain floats (:func:`~shardmeter.model.stages._even_floats`: floor,
    maximum and minimum written out) is what its ops give plain floats, and the batch's value,
    at random and edge layers, stages, chunks and ranks, or raises where the floats divide by 0."""
    from shardmeter.model import stages

    rng = random.Random(17)
    edges = (0.0, -0.0, 1.0, 2.0, 3.0, 0.5, -1.0, 96.0, 1e18, math.inf, -math.inf, math.nan)
    cases = 0
    for _ in range(5000):
        args = tuple(
            rng.choice(edges) if rng.random() < 0.25 else float(rng.randint(0, 130)) for _ in range(4)
        )
        one, arr = _one_and_array(stages.even_stage_layers, *args)
        try:
            twin = stages._even_floats(*args)
        except ZeroDivisionError:
            assert one is None, args
            continue
        # the ops of plain floats to the bit (math.floor drops a zero's sign, numpy's keeps it)
        assert one is not None and type(twin) is float and _same(twin, one), (args, twin, one)
        assert twin == arr or (math.isnan(twin) and math.isnan(arr)), (args, twin, arr)
        cases += 1
    assert cases > 4000


def test_one_plans_zero_state_is_the_arrays_to_the_bit():
    """ZeroSharding.state of plain floats (:meth:`~shardmeter.strategies.zero.ZeroSharding._state_floats`
    where parameters are not sharded over the whole group: the shard groups inline, maximum and
    minimum written out) is the batch's record, every field, every bundled strategy, at random
    and edge parameters, bytes and degrees."""
    import attrs

    from shardmeter.parts import ShardInputs
    from shardmeter.strategies import zero
    from shardmeter.strategies.builtin import shardmeter_sharding_strategies

    parts = [p for p in shardmeter_sharding_strategies() if isinstance(p, zero.ZeroSharding)]
    parts.append(attrs.evolve(parts[0], reduce_bucket_elements=5e8))
    assert sum(not p.shard_parameters and p.shard_group == "dp" for p in parts) >= 3
    vals = (0.0, -0.0, -1.0, 0.5, 1.0, 2.0, 3.0, 8.0, 1e9, math.inf, -math.inf, math.nan)
    rng = random.Random(31)

    def x(lo, hi):
        return rng.choice(vals) if rng.random() < 0.2 else rng.uniform(lo, hi)

    cases = 0
    for _ in range(1500):
        has_etp = rng.random() < 0.5
        fields = dict(
            params_per_gpu=x(0.0, 1e10), params_per_layer=x(0.0, 1e9), layers_per_stage=x(1.0, 96.0),
            weight_bytes=rng.choice((1.0, 2.0, 4.0)), grad_bytes=rng.choice((2.0, 4.0)),
            optimizer_bytes_per_param=x(0.0, 16.0), expert_params_per_gpu=x(-1.0, 1e10), tp=x(1.0, 8.0),
            dp=x(1.0, 64.0), cp=x(1.0, 4.0), ep=x(1.0, 16.0), expert_tp=x(1.0, 8.0) if has_etp else None,
            pp=x(1.0, 8.0), trainable_fraction=x(0.0, 1.0), param_gather_bytes=2.0, domain_gpus=8.0,
        )  # fmt: skip
        one_in = ShardInputs(**fields)
        arr_in = ShardInputs(**{k: _as_array(v) for k, v in fields.items()})
        for part in parts:
            one, arr = _records_one_and_array(lambda s, p=part: p.state(s, None), one_in, arr_in)
            if one is None:
                continue
            for name, a, b in zip(attrs.fields_dict(type(one)), attrs.astuple(one), arr, strict=True):
                assert type(a) is float and _same(a, b), (part.name, fields, name, a, b)
            cases += 1
    assert cases > 5000


def _as_array(v):
    """A plain float as a 1-element array (None and the rest as they are)."""
    import numpy as np

    return np.asarray([v]) if type(v) is float else v


def _records_one_and_array(fn, one_in, arr_in):
    """``fn`` of a record of plain floats and of the same record of 1-element arrays: the float
    record and the array record's fields' elements, in field order (``(None, None)`` where the
    floats divide by zero, which sends one plan to the array path)."""
    import attrs
    import numpy as np

    try:
        one = fn(one_in)
    except ZeroDivisionError:
        return None, None
    with np.errstate(all="ignore"):
        arr = fn(arr_in)
    return one, [float(np.asarray(getattr(arr, f.name)).ravel()[0]) for f in attrs.fields(type(arr))]


def test_one_plans_stage_terms_are_the_arrays_to_the_bit():
    """stage_terms of one plan (the head taken out, the work's scale and the hidden traffic's
    maximum written out for plain floats) is the batch's stage, at random and edge compute,
    communication and offload seconds, the head held or not, under ZeRO-1, DeepSpeed ZeRO-3 and
    FSDP."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model.degrees import degrees
    from shardmeter.model.stage import peaks, stage_compute, stage_terms

    pub = "shardmeter/validation_data/published/"
    vals = (0.0, -0.0, 1e-31, 1e-30, 0.25, 1.0, 3.0, math.inf, math.nan, -0.5)
    rng = random.Random(37)
    est = Estimator()
    cases = 0
    for path in (
        "examples/gpt3-175b-a100.toml",
        pub + "narayanan2021/narayanan2021-t2-zero3-gpt174.6b-n1536.toml",
        pub + "torchao-float8/torchao-float8-llama3-8b-h100-fp8-rowwise-n8.toml",
    ):
        res = est.resolve(est.load(path))
        built = [build_inputs(res, scalar=s) for s in (True, False)]
        for _ in range(100):
            secs = [rng.choice(vals) if rng.random() < 0.3 else rng.uniform(0.0, 2.0) for _ in range(11)]
            head, emb = rng.random() < 0.5, rng.random() < 0.5
            got = []
            for inp, table in built:
                shape = None if isinstance(inp.layout.tp, float) else np.shape(inp.layout.tp)
                deg, pk = degrees(inp.layout), peaks(inp.hardware)
                core = stage_compute(inp, deg, pk, deg.pp * 0.0 + 12.0)
                x = [v if shape is None else np.full(shape, v) for v in secs]
                names = ("forward", "backward", "recompute", "head", "compute", "memory_ops")
                ct = attrs.evolve(core.compute, **dict(zip(names, x, strict=False)))
                lc = attrs.evolve(core.comm, tp_exposed=x[6], cp_exposed=x[7], ep_exposed=x[8])
                core = attrs.evolve(
                    core, compute=ct, comm=lc, offload_forward_s=x[9], offload_backward_s=x[10]
                )
                h = head if shape is None else np.full(shape, head)
                with np.errstate(all="ignore"):
                    got.append(
                        stage_terms(
                            inp, table, deg, pk, core.shapes.layers_per_stage, emb=emb, head=h, compute=core
                        )
                    )
            one, batch = got
            for name in (
                "fsdp_exposed_s", "dp_exposed_s", "fsdp_slowdown_s", "dp_slowdown_s", "ar_window_s",
                "offload_exposed_s", "micro_batch_s",
            ):  # fmt: skip
                a, b = getattr(one, name), float(np.ravel(getattr(batch, name))[0])
                assert type(a) is float and _same(a, b), (path, secs, head, name, a, b)
            for name in ("compute", "head"):
                a, b = getattr(one.compute, name), float(np.ravel(getattr(batch.compute, name))[0])
                assert _same(a, b), (path, secs, head, name, a, b)
            cases += 1
    assert cases == 300


def test_the_plain_compute_check_reads_each_calls_shapes_and_degrees():
    """_plain_compute checks the model, training and hardware records once for the last three
    it saw, and every call's shapes, degrees and peaks: the same records with a batch's shapes
    or an array degree, or other records, are answered for themselves."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import compute
    from shardmeter.model.shapes import local_shapes

    est = Estimator()
    inp, _ = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)
    ms, tr, hw = inp.model, inp.training, inp.hardware
    sh = local_shapes(ms, tr, 8.0, 8.0, 1.0, 1.0)
    args = (8.0, 1.0, True, hw.peak_flops, hw.peak16_flops)
    assert compute._plain_compute(ms, tr, hw, sh, *args)
    assert not compute._plain_compute(ms, tr, hw, _as_batch(sh), *args)
    assert not compute._plain_compute(ms, tr, hw, sh, np.asarray([8.0]), *args[1:])
    assert not compute._plain_compute(ms, tr, hw, sh, 8.0, 1.0, 1.0, *args[3:])  # sp not a bool
    assert compute._plain_compute(ms, tr, hw, sh, *args)
    op = attrs.evolve(tr, recompute=3.0)  # op recompute: the general code
    assert not compute._plain_compute(ms, op, hw, sh, *args)
    assert not compute._plain_compute(ms, tr, _as_batch(hw), sh, *args)
    assert compute._plain_compute(ms, tr, hw, sh, *args)


def test_one_plans_peaks_middle_rank_and_trained_share_are_the_arrays_to_the_bit():
    """peaks, the pipeline's middle rank and the trained share of plain floats (the sides
    ops.where picks, ops.minimum/maximum written out) are the batch's values at edge numbers."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import pipeline, sharding
    from shardmeter.model.lora import trainable_fraction
    from shardmeter.model.stage import peaks

    est = Estimator()
    hw = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)[0].hardware
    vals = (0.0, -0.0, -1.0, 0.5, 1.0, 1.5, 2.0, 8.0, 312e12, math.inf, -math.inf, math.nan)
    cases = 0
    for a in vals:
        one, arr = _one_and_array(pipeline._rank_one, a)
        assert type(one) is float and _same(one, arr), (a, one, arr)
        for b in vals:
            one, arr = _one_and_array(sharding._trainable_floats, a, b)
            assert _same(one, _one_and_array(trainable_fraction, a, b)[1]), (a, b, one)
            pk = peaks(attrs.evolve(hw, peak_flops=a, peak16_flops=b))
            with np.errstate(all="ignore"):
                pa = peaks(attrs.evolve(hw, peak_flops=np.asarray([a]), peak16_flops=np.asarray([b])))
            for x, y in ((pk.flops, pa.flops), (pk.flops16, pa.flops16)):
                assert type(x) is float and _same(x, float(np.asarray(y)[0])), (a, b, x, y)
            cases += 1
    assert cases == len(vals) ** 2


def test_a_repeated_collective_is_the_last_ones_only_where_it_is_the_same():
    """collective_time of plain floats answers a call the same as the last (an all-gather after
    a reduce-scatter of as many bytes over one group) with the last's seconds, and any other
    with its own: every call of a random sequence with many repeats, signed zeros and other
    tiers among them, is _ring_or_tree_floats' own answer to the bit."""
    import attrs

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model import tiers

    est = Estimator()
    base = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)[0].topology
    other = attrs.evolve(base, tier_gpus=(4.0, 32.0, math.inf), tier_bytes_s=(450e9, 50e9, 25e9))
    other = attrs.evolve(other, tier_latency_s=(1e-6, 5e-6, 2e-5))
    rng = random.Random(41)
    hits = 0
    topo, kind, args, flat = base, "all_gather", (1e6, 8.0, 1.0), False
    for i in range(4000):
        if i % 4 == 1:  # the last call again, over the other tiers
            topo = other if topo is base else base
        elif i % 4 == 3:  # the last call again, an all-gather for a reduce-scatter and back
            kind = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather"}.get(kind, kind)
        else:
            topo = rng.choice((base, base, other))
            kind = rng.choice(("all_gather", "reduce_scatter", "all_reduce"))
            nbytes = rng.choice((0.0, -0.0, 5.6e9, 1e6))
            args = (nbytes, rng.choice((8.0, 16.0, 1.0, 0.5)), rng.choice((1.0, 8.0)))
            flat = rng.random() < 0.2
        was = tiers._LAST_RING
        got = tiers.collective_time(kind, *args, topo, flat=flat)
        hits += tiers._LAST_RING is was and args[0] != 0.0
        want = tiers._ring_or_tree_floats(
            tiers._KIND[kind], *args, topo.tier_gpus, topo.tier_bytes_s, topo.tier_latency_s, flat
        )
        assert _same(got, want), (kind, args, flat, got, want)
    assert hits > 200


def test_one_plans_exposed_traffic_from_its_figures_is_the_general_codes_to_the_bit():
    """exposed_traffic of plain numbers reads the record's figures once and hands them to
    :func:`~shardmeter.model.comm._exposed_figures`: the general code's three figures on random
    and edge traffic, windows and overlap (each bit, nan where it gives nan)."""
    import attrs

    from shardmeter.model import comm

    vals = (0.0, -0.0, 1e-6, 0.003, 0.5, 1.0, 7.0, 1e9, math.inf, -math.inf, math.nan, -1.0)
    rng = random.Random(57)
    names = [f.name for f in attrs.fields(comm.PricedTraffic)]
    for _ in range(5000):

        def x():
            return rng.choice(vals) if rng.random() < 0.3 else rng.uniform(0.0, 2.0)

        pt = comm.PricedTraffic(**{n: x() for n in names})
        args = (pt, x(), x(), rng.random() < 0.7, (x(), x(), x()))
        got = comm.exposed_traffic(*args[:4], pass_windows=args[4])
        want = comm._exposed_ops(*args)
        assert all(_same(u, v) for u, v in zip(got, want, strict=True)), (args, got, want)


def test_one_plans_weight_grad_share_is_the_arrays():
    """weight_grad_share of a plain LoRA rank (the side ops.where picks) is the batch's value,
    on ranks that do and do not fine-tune and on edge numbers (0, -0, inf, nan)."""
    import attrs
    import numpy as np

    from shardmeter.estimator import Estimator
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model.lora import weight_grad_share

    est = Estimator()
    tr = build_inputs(est.resolve(est.load("examples/gpt3-175b-a100.toml")), scalar=True)[0].training
    for r in (0.0, -0.0, 1.0, 8.0, 0.5, -1.0, math.inf, -math.inf, math.nan, 1e-300):
        one = weight_grad_share(attrs.evolve(tr, lora_rank=r))
        arr = weight_grad_share(attrs.evolve(tr, lora_rank=np.array([r])))
        assert type(one) is float and _same(one, float(np.asarray(arr).ravel()[0])), r
