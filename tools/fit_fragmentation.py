"""Fit the caching allocator's fragmentation share (``shardmeter.model.allocator.FRAGMENTATION``)
once, over the bundled runs that report ``[measured] memory_reserved_gb`` (PyTorch's
``max_memory_reserved``), and print its leave-one-source-group-out errors.

The model's reserved peak is linear in the share: ``required + FRAGMENTATION x churn`` (capped at
the GPU's memory), with ``required`` the allocated peak plus its blocks' rounding and ``churn``
the bytes a step allocates and frees (shardmeter/model/allocator.py). Both are read from the
model itself: the reserved prediction at a share of 0 is ``required``, and its slope in the share
(at a share of 1e-3, far from any cap) is ``churn``. Compared as ``validate`` compares them,
without what is outside the allocator (``memory_outside_allocator_gb``). The fit minimises the
squared relative error, ``f = sum((m - r) c / m^2) / sum(c^2 / m^2)``.

    python tools/fit_fragmentation.py          # the fit, per-run errors, leave-one-group-out
    python tools/fit_fragmentation.py --check  # exit 1 unless the bundled constant is the fit
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shardmeter.estimator import Estimator  # noqa: E402
from shardmeter.model import allocator  # noqa: E402
from shardmeter.validate.run import bundled_validation_dir, collect_files  # noqa: E402

#: The share the slope is read at: small enough that no bundled run reaches its GPU's memory.
_SLOPE_AT = 1e-3
#: The bundled constant is the fit rounded to this many decimals.
DECIMALS = 3


def _reserved_gb(est: Estimator, sc, share: float) -> tuple[float, float]:
    """(reserved prediction less what is outside the allocator, GB; capacity GB) at ``share``."""
    saved = allocator.FRAGMENTATION
    allocator.FRAGMENTATION = share
    try:
        r = est.estimate(sc)
    finally:
        allocator.FRAGMENTATION = saved
    assert r.memory_reserved_gb is not None
    return r.memory_reserved_gb - (r.memory_outside_allocator_gb or 0.0), r.memory_per_gpu_gb


def points(paths: list[str] | None = None) -> list[tuple[str, str, float, float, float]]:
    """``(run id, source group, measured, required, churn)`` in GB for every bundled run (or the
    runs under ``paths``) with a measured reserved peak."""
    est = Estimator()
    out = []
    for f in collect_files(paths or [bundled_validation_dir()]):
        sc = est.load(f)
        measured = sc.measured.get("memory_reserved_gb")
        if measured is None:
            continue
        required, _ = _reserved_gb(est, sc, 0.0)
        sloped, _ = _reserved_gb(est, sc, _SLOPE_AT)
        src = sc.source
        churn = (sloped - required) / _SLOPE_AT
        out.append((str(src.get("id", f)), str(src.get("group", "")), float(measured), required, churn))
    return out


def fit(pts) -> float:
    """The share minimising the squared relative error of ``required + share x churn``."""
    num = sum((m - r) * c / m**2 for _, _, m, r, c in pts)
    den = sum(c**2 / m**2 for _, _, m, r, c in pts)
    return num / den if den > 0 else 0.0


def errors(pts, share: float) -> list[float]:
    """Relative errors of ``required + share x churn`` against the measured peaks."""
    return [(r + share * c) / m - 1.0 for _, _, m, r, c in pts]


def leave_one_group_out(pts) -> dict[str, tuple[float, list[float]]]:
    """For each source group: the share fitted without it and its runs' errors under that share."""
    out = {}
    for g in sorted({p[1] for p in pts}):
        rest = [p for p in pts if p[1] != g]
        share = fit(rest)
        out[g] = (share, errors([p for p in pts if p[1] == g], share))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 unless the bundled constant is the fit")
    args = ap.parse_args(argv)
    pts = points()
    share = fit(pts)
    errs = errors(pts, share)
    print(f"{len(pts)} runs with a measured reserved peak; fitted FRAGMENTATION = {share:.4f}")
    for (run, group, m, r, c), e in zip(pts, errs, strict=True):
        print(f"  {run:58s} {group:15s} measured {m:6.1f}  required {r:6.1f}  churn {c:6.1f}  error {e:+.1%}")
    within = sum(abs(e) <= 0.10 for e in errs)
    print(
        f"in-sample: {within} of {len(pts)} within 10 %, mean |error| {sum(map(abs, errs)) / len(errs):.1%}"
    )
    print("leave-one-source-group-out:")
    logo = leave_one_group_out(pts)
    for g, (s, es) in logo.items():
        w = sum(abs(e) <= 0.10 for e in es)
        print(
            f"  without {g:15s} share {s:.4f}: its {len(es)} runs {w} within 10 %, mean |error| {sum(map(abs, es)) / len(es):.1%}"
        )
    if args.check and round(share, DECIMALS) != allocator.FRAGMENTATION:
        print(f"bundled FRAGMENTATION = {allocator.FRAGMENTATION} is not the fit {round(share, DECIMALS)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
