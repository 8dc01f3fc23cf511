"""Fit ShardMeter's few physical efficiency parameters on the bundled published runs.

Usage: python tools/fit_efficiency.py [PATH ...] [--rounds 3] [--holdout [--write-residuals]]

``--holdout`` measures how the fit carries to unseen runs: each source group is
left out in turn, the parameters are fitted on the others, and the group's error
is reported (cases whose parameter only that group informs are counted apart).
``--write-residuals`` then stores the per-group fits in
``shardmeter/validation_data/residuals.json`` and each run's held-out residual (the
report's confidence band is built from them; ``tools/confidence_table.py --write``
recomputes the residuals from the stored fits after a model change).

Parameters fitted (and only these):

* per GPU and precision class (16-bit, fp8): ``matmul_efficiency`` /
  ``matmul_efficiency_fp8``, the achievable fraction of dense peak of large
  GEMMs in real training stacks;
* per GPU: ``attention_efficiency``, the fraction of the 16-bit peak fused
  attention achieves at long sequences. Where the catalogue has
  ``attention_efficiency_flash2`` (Hopper), cases with ``training.attention =
  "flash2"`` read the same parameter times the published FA2/cuDNN share
  (``shardmeter.model.attention.HOPPER_FLASH2_OVER_CUDNN``), so the FA2 and the
  cuDNN runs inform one figure; the FA2 value is printed, derived, for the
  catalogue.

Procedure: every single-island scenario with ``[measured] tokens_per_s_per_gpu``
is turned into one row of the model's input arrays; the rows are evaluated
together (one vectorised call per trial value); multi-island cases with
``[measured] compute_utilization`` (INTELLECT-1) are evaluated whole. By
default the objective has the shape of the accuracy bar: the mean absolute
relative error over all cases, plus a steep penalty for any source group
(folder) whose mean error exceeds ``--group-cap`` (10 %), so that the largest
group cannot buy its accuracy with a small group's; ``--weighting group``
weights each group equally instead. Coordinate
descent over a 0.01 grid in [0.10, 1.00], a few rounds. Infeasible cases do not
depend on these parameters and are left out; a parameter no case depends on
(attention efficiency where every run of the GPU materialises its scores) keeps
its catalogue value. The printed values are copied by
hand into ``shardmeter/hardware_catalog/gpus.toml`` with the fit's date; nothing is fitted
per case.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import numpy as np

from shardmeter.estimator import Estimator
from shardmeter.inputs.bundles import COLUMNS, PartTable
from shardmeter.model.attention import HOPPER_FLASH2_OVER_CUDNN
from shardmeter.model.evaluate import evaluate_columns
from shardmeter.validate.confidence_table import SAME_CHIP
from shardmeter.validate.run import bundled_validation_dir, collect_files


def _kernel(sc, isl):
    """Which attention kernel a case runs: "flash2" where the scenario runs the FlashAttention-2
    kernels on a GPU that has a separate figure for them, "materialized" where it computes the
    score matrix as GEMMs (it reads no attention figure), "" (the GPU's own kernel) otherwise."""
    if sc.training.attention == "materialized":
        return "materialized"
    if sc.training.attention == "flash2" and isl.gpu.attention_efficiency_flash2 is not None:
        return "flash2"
    return ""


def _scale(m, kind):
    """What a case's input column holds per unit of its parameter: the FA2 share of the native
    kernel for a "flash2" case's attention (:data:`HOPPER_FLASH2_OVER_CUDNN`), else 1."""
    return HOPPER_FLASH2_OVER_CUDNN if kind == "attention" and m["kernel"] == "flash2" else 1.0


def load_multi(paths):
    """Multi-island cases with ``[measured] compute_utilization`` (DiLoCo runs): each kept whole."""
    est = Estimator()
    out = []
    for f in collect_files(paths):
        try:
            sc = est.load(f)
            if len(sc.islands) < 2 or "compute_utilization" not in sc.measured:
                continue
            res = est.resolve(sc)
            inp, table = est.inputs(res)
            isl = res.islands[0]
        except Exception:  # noqa: BLE001
            continue
        out.append(
            (
                (inp.columns(), table),
                {
                    "file": f,
                    "group": os.path.basename(os.path.dirname(f)),
                    "gpu": isl.gpu.name,
                    "fp8": sc.training.precision == "fp8",
                    "kernel": _kernel(sc, isl),
                    "measured": sc.measured["compute_utilization"],
                },
            )
        )
    return out


def load_rows(paths):
    est = Estimator()
    rows, meta = [], []
    table = PartTable()  # one table for the stacked rows
    for f in collect_files(paths):
        try:
            sc = est.load(f)
        except Exception:  # noqa: BLE001
            continue
        if len(sc.islands) != 1 or "tokens_per_s_per_gpu" not in sc.measured:
            continue
        try:
            res = est.resolve(sc)
            inp = est.inputs(res, table)[0].columns()
            isl = res.islands[0]
        except Exception:  # noqa: BLE001
            continue
        rows.append(inp)
        meta.append(
            {
                "file": f,
                "group": os.path.basename(os.path.dirname(f)),
                "gpu": isl.gpu.name,
                "fp8": sc.training.precision == "fp8",
                "kernel": _kernel(sc, isl),
                "measured": sc.measured["tokens_per_s_per_gpu"],
            }
        )
    batch = {k: np.concatenate([np.asarray(r[k], dtype=float) for r in rows], axis=0) for k in COLUMNS}
    batch["_table"] = table
    return batch, meta


def _evaluate(batch):
    """The model on a batch of input columns that carries its part table under ``_table``."""
    cols = {k: v for k, v in batch.items() if k != "_table"}
    return evaluate_columns(cols, batch["_table"])


def objective(batch, meta, weights, multi=(), values=None, cap=None):
    """Weighted mean |relative error|: tokens/s per GPU of single-island rows, and compute
    utilisation of multi-island cases (one more group, weighted like the others)."""
    out = _evaluate(batch)
    pred = out.tokens_per_s_per_gpu
    meas = np.array([m["measured"] for m in meta])
    ok = out.feasible
    err = (pred - meas) / meas
    total = np.sum(np.where(ok, np.abs(err), 0.0) * weights)
    wsum = np.sum(np.where(ok, weights, 0.0))
    if multi:
        errs = []
        for (inp, table), m in multi:
            trial = dict(inp)
            trial["_table"] = table
            for key in _param_keys(m):
                if key in (values or {}):
                    col = _col(key)
                    trial[col] = np.full_like(inp[col], values[key] * _scale(m, key[0]))
            o = _evaluate(trial)
            if bool(o.feasible[0]):
                errs.append(abs(float(o.compute_utilization[0]) - m["measured"]) / m["measured"])
        if errs:  # one more source group: its mean error counts like a group (or like its cases)
            k = 1.0 if cap is None else float(len(errs))
            total += float(np.mean(errs)) * k
            wsum += k
    if cap is not None:  # penalise any source group whose mean error exceeds the cap
        by: dict[str, list[float]] = defaultdict(list)
        for m, e, k in zip(meta, err, ok, strict=True):
            if k:
                by[m["group"]].append(abs(e))
        return (
            float(total / wsum) + sum(10.0 * max(0.0, float(np.mean(v)) - cap) for v in by.values()),
            err,
            ok,
        )
    return float(total / wsum), err, ok


def _param_keys(m):
    """The parameters a case reads: its GPU's matmul figure of its precision class and, unless it
    materialises its scores, its GPU's one attention figure (a "flash2" case reads it through
    :func:`_scale`)."""
    gpu = SAME_CHIP.get(m["gpu"], m["gpu"])
    matmul = ("matmul", gpu, "fp8" if m["fp8"] else "16bit")
    return (matmul,) if m["kernel"] == "materialized" else (matmul, ("attention", gpu, ""))


def _flash2_gpus(meta, multi=()):
    """The fitted chips some "flash2" case reads (their catalogue FA2 figure is derived)."""
    cases = [*meta, *(m for _, m in multi)]
    return sorted({SAME_CHIP.get(m["gpu"], m["gpu"]) for m in cases if m["kernel"] == "flash2"})


def with_derived(values, flash2_gpus):
    """``values`` plus, per chip of ``flash2_gpus``, the FA2 attention figure the catalogue
    stores: the fitted one times :data:`HOPPER_FLASH2_OVER_CUDNN` (key ``attention/GPU/flash2``,
    as ``shardmeter.validate.confidence_table.param_keys`` reads it), rounded to 3 decimals."""
    out = dict(values)
    for gpu in flash2_gpus:
        if ("attention", gpu, "") in values:
            out[("attention", gpu, "flash2")] = round(
                values[("attention", gpu, "")] * HOPPER_FLASH2_OVER_CUDNN, 3
            )
    return out


def _col(key):
    return "hardware.gemm_efficiency" if key[0] == "matmul" else "hardware.attention_efficiency"


def fit(batch, meta, weights, multi, cap, rounds, verbose=True):
    """Coordinate descent over the 0.01 grid -> (values by parameter key, the cases reading each,
    the updated batch, the keys some case depends on). A key no case depends on keeps its
    catalogue value, which the catalogue's own fit may have taken from other cases: a held-out
    fit must not count it as informed (:func:`holdout`)."""
    batch = dict(batch)
    informed: set = set()
    params = {}
    for i, m in enumerate(meta):
        for key in _param_keys(m):
            params.setdefault(key, []).append(i)
    grid = np.round(np.arange(0.10, 1.0001, 0.01), 2)
    scales = {key: np.array([_scale(meta[i], key[0]) for i in idx])[:, None] for key, idx in params.items()}
    values = {
        key: float(batch[_col(key)][idx[0], 0]) / float(scales[key][0, 0]) for key, idx in params.items()
    }
    for _ in range(rounds):
        for key, idx in sorted(params.items()):
            col = _col(key)
            best_v, best_o, seen = None, None, []
            for v in grid:
                trial = dict(batch)
                arr = batch[col].copy()
                arr[idx] = v * scales[key]
                trial[col] = arr
                o, _, _ = objective(trial, meta, weights, multi, {**values, key: float(v)}, cap)
                seen.append(o)
                if best_o is None or o < best_o - 1e-12:
                    best_v, best_o = v, o
            if max(seen) - min(seen) < 1e-12:  # no case depends on it
                if verbose:
                    print(f"  {key[0]} {key[1]} {key[2]}: no case depends on it; kept at {values[key]:.2f}")
                continue
            informed.add(key)
            arr = batch[col].copy()
            arr[idx] = best_v * scales[key]
            batch[col] = arr
            values[key] = float(best_v)
    return values, params, batch, informed


def _subset(batch, idx):
    return {k: v if k == "_table" else v[idx] for k, v in batch.items()}


def holdout(batch, meta, multi, cap, rounds, groups):
    """Leave one source group out: fit on the others, predict the group. A held-out case whose
    GPU/precision/kernel parameter no other group informs keeps the catalogue value, which was
    fitted with it, so it is reported apart as not testable this way.

    Returns ``(fits, cases)``: per group the parameter values fitted without it (keys as
    :func:`_key_text` writes them), and per held-out case its file, the field compared, the
    predicted and measured values and whether every parameter it reads was informed by the
    other groups (``informed``)."""
    print("leave-one-group-out (fit on the other groups, predict this one):")
    fits, cases = {}, []
    for g in groups:
        train = [i for i, m in enumerate(meta) if m["group"] != g]
        test = [i for i, m in enumerate(meta) if m["group"] == g]
        tmulti = [c for c in multi if c[1]["group"] != g]
        tmeta = [meta[i] for i in train]
        values, _, _, informed = fit(
            _subset(batch, train), tmeta, np.ones(len(train)), tmulti, cap, rounds, verbose=False
        )
        # only what the other groups determined: a key no remaining case depends on holds the
        # catalogue's value, fitted with this group, and its cases are counted apart
        values = {k: v for k, v in values.items() if k in informed}
        fits[g] = {
            _key_text(k): v for k, v in sorted(with_derived(values, _flash2_gpus(meta, multi)).items())
        }
        if test:
            tb = _subset(batch, test)
            known = np.ones(len(test), dtype=bool)
            for j, i in enumerate(test):
                for key in _param_keys(meta[i]):
                    if key in values:
                        tb[_col(key)] = tb[_col(key)].copy()
                        tb[_col(key)][j] = values[key] * _scale(meta[i], key[0])
                    else:
                        known[j] = False
            out = _evaluate(tb)
            meas = np.array([meta[i]["measured"] for i in test])
            err = np.abs(out.tokens_per_s_per_gpu - meas) / meas
            ok = out.feasible
            sel = ok & known
            for j, i in enumerate(test):
                if ok[j]:
                    cases.append(
                        _case(meta[i], "tokens_per_s_per_gpu", out.tokens_per_s_per_gpu[j], known[j])
                    )
            held = f"{np.mean(err[sel]):.1%} over {int(sel.sum())} cases" if sel.any() else "-"
            print(
                f"  {g:22s} held-out MAPE {held}; {int((ok & ~known).sum())} cases need a parameter only "
                f"this group informs",
                flush=True,
            )
        else:  # multi-island only (compute utilisation)
            errs = []
            for (inp, table), m in multi:
                if m["group"] != g:
                    continue
                trial = dict(inp)
                trial["_table"] = table
                known1 = True
                for key in _param_keys(m):
                    if key in values:
                        trial[_col(key)] = np.full_like(inp[_col(key)], values[key] * _scale(m, key[0]))
                    else:
                        known1 = False
                o = _evaluate(trial)
                if bool(o.feasible[0]):
                    cases.append(_case(m, "compute_utilization", o.compute_utilization[0], known1))
                errs.append(abs(float(o.compute_utilization[0]) - m["measured"]))
            print(
                f"  {g:22s} held-out compute utilisation error {np.mean(errs) * 100:.1f} points "
                f"over {len(errs)} cases",
                flush=True,
            )
    return fits, cases


def _key_text(key):
    """A parameter key as the residuals table stores it: ``kind/gpu/class`` (``attention/a100-sxm4-80gb/``
    for the GPU's own attention kernel)."""
    return "/".join(key)


def _case(m, field, predicted, informed):
    return {
        "file": m["file"],
        "group": m["group"],
        "field": field,
        "predicted": float(predicted),
        "measured": float(m["measured"]),
        "informed": bool(informed),
    }


def write_holdout(fits, rounds, cap):
    """Store the leave-one-group-out fits in ``shardmeter/validation_data/residuals.json``
    (``holdout``) and rewrite its runs with them: each run's ``logo_residual`` is its
    prediction with the parameters fitted without its group (``tools/confidence_table.py
    --write`` recomputes the runs from the stored fits whenever the model changes)."""
    import datetime
    import json

    from shardmeter.validate.confidence_table import TABLE_PATH, compute_runs, stored_document

    doc = stored_document()
    doc["holdout"] = {
        "generated": datetime.date.today().isoformat(),
        "command": f"python tools/fit_efficiency.py --holdout --rounds {rounds} --group-cap {cap} "
        "--write-residuals",
        "fits": fits,
    }
    doc["runs"] = compute_runs(fits=fits)
    TABLE_PATH.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    held = sum("logo_residual" in r for r in doc["runs"])
    print(f"wrote the fits of {len(fits)} groups and {held} held-out residuals to {TABLE_PATH.name}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dump", metavar="JSON", help="write each case's fitted-model error to this file")
    ap.add_argument(
        "--weighting",
        choices=("case", "group"),
        default="case",
        help="case: every case counts once, and any source group above --group-cap is penalised "
        "(the shape of the accuracy bar: an overall mean and a per-group ceiling); "
        "group: each source group weighted equally",
    )
    ap.add_argument("--group-cap", type=float, default=0.10)
    ap.add_argument(
        "--holdout",
        action="store_true",
        help="instead of fitting once, leave each source group out in turn and report its error",
    )
    ap.add_argument(
        "--write-residuals",
        action="store_true",
        help="with --holdout: store each run's held-out residual and the per-group fits in "
        "shardmeter/validation_data/residuals.json (the confidence band is built from them)",
    )
    ap.add_argument(
        "--groups",
        nargs="+",
        metavar="GROUP",
        help="with --holdout: leave out only these source groups (a quick check of one group; "
        "--write-residuals needs every group)",
    )
    ap.add_argument(
        "--dump-holdout", metavar="JSON", help="with --holdout: write the raw per-case result here"
    )
    args = ap.parse_args(argv)
    paths = args.paths or [bundled_validation_dir()]
    batch, meta = load_rows(paths)
    multi = load_multi(paths)
    groups = defaultdict(int)
    for m in meta:
        groups[m["group"]] += 1
    if args.weighting == "group":
        weights = np.array([1.0 / groups[m["group"]] for m in meta])
    else:
        weights = np.ones(len(meta))
    cap = args.group_cap if args.weighting == "case" else None
    if args.holdout:
        every = sorted(set(groups) | {m["group"] for _, m in multi})
        if args.groups and args.write_residuals:
            ap.error("--write-residuals stores every group's held-out residual: drop --groups")
        unknown = sorted(set(args.groups or ()) - set(every))
        if unknown:
            ap.error(f"--groups: no such source group {', '.join(unknown)} (groups: {', '.join(every)})")
        fits, cases = holdout(batch, meta, multi, cap, args.rounds, args.groups or every)
        if args.dump_holdout:
            import json

            with open(args.dump_holdout, "w") as fh:
                json.dump({"fits": fits, "cases": cases}, fh, indent=1)
        if args.write_residuals:
            write_holdout(fits, args.rounds, args.group_cap)
        return 0
    values0 = {key: float(batch[_col(key)][i, 0]) for i, m in enumerate(meta) for key in _param_keys(m)}
    base, err, ok = objective(batch, meta, weights, multi, values0, cap)
    print(f"{len(meta)} single-island cases, {len(multi)} multi-island; objective before: {base:.2%}")
    values, params, batch, _ = fit(batch, meta, weights, multi, cap, args.rounds)
    final, err, ok = objective(batch, meta, weights, multi, values, cap)
    print(f"objective after: {final:.2%}")
    for key, idx in sorted(params.items()):
        print(f"  {key[0]:9s} {key[1]:16s} {key[2]:6s} = {values[key]:.2f}   ({len(idx)} cases)")
    for key, v in sorted(with_derived(values, _flash2_gpus(meta, multi)).items()):
        if key not in values:
            print(
                f"  {key[0]:9s} {key[1]:16s} {key[2]:6s} = {v:.3f}  (derived: x {HOPPER_FLASH2_OVER_CUDNN})"
            )
    by = defaultdict(list)
    for m, e, k in zip(meta, err, ok, strict=True):
        if k:
            by[m["group"]].append(abs(e))
    for g, v in sorted(by.items()):
        print(f"  group {g:22s} MAPE {np.mean(v):.1%}  ({len(v)} feasible of {groups[g]})")
    if args.dump:
        import json

        with open(args.dump, "w") as fh:
            json.dump(
                [
                    {**m, "error": float(e), "feasible": bool(k)}
                    for m, e, k in zip(meta, err, ok, strict=True)
                ],
                fh,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
