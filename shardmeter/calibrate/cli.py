"""``shardmeter calibrate MEASUREMENTS... --out CATALOG.toml``: measurements -> a catalog overlay.

Each MEASUREMENT is told by its name: ``*.csv`` a GEMM timing CSV (:mod:`.gemm`), ``*.toml``
(or a folder of them) a scenario with ``[measured]`` (:mod:`.steps`), anything else an
nccl-tests log (:mod:`.nccl`). Links first, then GEMMs, then the steps with both applied.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os

import attrs

from shardmeter import __version__
from shardmeter.calibrate import gemm, nccl, steps
from shardmeter.calibrate.overlay_out import overlay_text
from shardmeter.errors import ScenarioError
from shardmeter.io import atomic_write, check_output
from shardmeter.registry.manager import get_registry

__all__ = ["add_calibrate_parser", "run_calibrate"]

_EPILOG = """\
example:
  shardmeter calibrate all_reduce_1node.txt all_reduce_2nodes.txt gemm.csv --gpu h100-sxm --out cal.toml
  shardmeter calibrate my_runs/ --out cal.toml       # fit efficiencies to measured steps
  then, in a scenario:  catalog = "cal.toml"

A one-node nccl-tests log calibrates the intra-node link (--intra, else the GPU's), a
multi-node log the inter-node link (--inter, else the GPU's). See docs/calibration.md."""


def add_calibrate_parser(sub) -> None:
    """Add ``calibrate`` to the sub-command parsers ``sub``."""
    p = sub.add_parser(
        "calibrate",
        help="fit link and GPU efficiencies to nccl-tests logs, GEMM timings and measured steps",
        description="Fit the catalog figures the model uses (link latency and efficiency, matmul and "
        "attention efficiency) to measurements of your own cluster, and write them as a catalog "
        'overlay that scenarios load with catalog = "FILE".',
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "measurements", nargs="+", metavar="MEASUREMENT", help="nccl-tests logs, GEMM CSVs, scenarios"
    )
    p.add_argument("--out", required=True, metavar="CATALOG.toml", help="the overlay to write")
    p.add_argument("--gpu", metavar="NAME", help="the GPU measured (required with a GEMM CSV)")
    p.add_argument("--intra", metavar="LINK", help="the link one-node logs measure (default: the GPU's)")
    p.add_argument("--inter", metavar="LINK", help="the link multi-node logs measure (default: the GPU's)")
    p.add_argument(
        "--nics-per-node", type=int, metavar="N", help="NICs per node (default: the GPU's, else its GPUs)"
    )
    p.add_argument("--json", action="store_true", help="print the fits as one JSON document")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    result = run_calibrate(
        args.measurements,
        out=args.out,
        gpu=args.gpu,
        intra=args.intra,
        inter=args.inter,
        nics_per_node=args.nics_per_node,
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(result["lines"]))
    return 0


def _classify(paths):
    logs, csvs, scen = [], [], []
    for p in paths:
        if os.path.isdir(p) or p.endswith(".toml"):
            scen.append(p)
        elif p.endswith(".csv"):
            csvs.append(p)
        else:
            logs.append(p)
        if not os.path.exists(p):
            raise ScenarioError("no such file", file=p)
    return logs, csvs, scen


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _link_name(flag: str | None, gpu, attr: str, option: str) -> str:
    name = flag or (getattr(gpu, attr) if gpu is not None else None)
    if not name:
        raise ScenarioError(
            f"say which link these logs measure: give {option} (or --gpu with a default link)"
        )
    return name


def run_calibrate(paths, *, out, gpu=None, intra=None, inter=None, nics_per_node=None) -> dict:
    """Fit everything ``paths`` hold, write the overlay ``out``; returns the ``--json`` document
    (with ``lines``: the printed summary)."""
    from shardmeter.validate.run import collect_files

    logs_p, csvs, scen_p = _classify(paths)
    scen_files = collect_files(scen_p) if scen_p else []
    check_output(out, label="--out", inputs=[*paths, *scen_files])
    reg = get_registry()
    gpu_rec = reg.get("hardware", gpu, path="--gpu") if gpu else None
    nics = nics_per_node or (gpu_rec.nics_per_node if gpu_rec else None)
    today = datetime.date.today().isoformat()
    tag = f"calibrated {today} by shardmeter calibrate"
    lines: list[str] = []
    doc: dict = {"links": [], "gemm": [], "steps": None, "out": out}
    entries: dict[tuple[str, str], dict] = {}

    # -- links --------------------------------------------------------------------------------
    parsed = [nccl.read_nccl_log(p) for p in logs_p]
    one = [lg for lg in parsed if lg.nodes == 1]
    multi = [lg for lg in parsed if lg.nodes > 1]
    inner = None
    for group, flag, attr, option in (
        (one, intra, "intra_node", "--intra"),
        (multi, inter, "inter_node", "--inter"),
    ):
        if not group:
            continue
        name = _link_name(flag, gpu_rec, attr, option)
        link = reg.get("interconnect", name, path=option)
        if group is multi and inner is None:  # the catalog's intra-node link prices the inner tier
            in_name = _link_name(intra, gpu_rec, "intra_node", "--intra")
            il = reg.get("interconnect", in_name, path="--intra")
            inner = (il.latency_us * 1e-6, il.bandwidth_gb_s * 1e9 * il.efficiency)
        fit = nccl.fit_tier(link, group, nics_per_node=nics, inner_link=inner if group is multi else None)
        fields = nccl.overlay_fields(fit, link)
        new = attrs.evolve(link, **fields)
        reg = reg.override("interconnect", new, plugin="calibrate")
        if group is one:
            inner = (new.latency_us * 1e-6, new.bandwidth_gb_s * 1e9 * new.efficiency)
        files = ", ".join(os.path.basename(f) for f in fit.logs)
        src = (
            f"{tag} from nccl-tests {files} ({fit.points} sizes): latency {fit.latency_us:.3g} us, "
            f"{fit.bandwidth_gb_s:.4g} GB/s per GPU = {fit.efficiency:.3f} of {fit.nominal_gb_s:.4g}; "
            f"fit mean |error| {fit.mean_abs_error:.1%}"
        )
        entries[("link", name)] = {"name": name, **fields, "source": src}
        doc["links"].append({**attrs.asdict(fit), "fields": fields})
        lines.append(
            f"link {name}: latency {fit.latency_us:.3g} us (was {link.latency_us:.3g}), efficiency "
            f"{fit.efficiency:.3f} (was {link.efficiency:.3f}) of {fit.nominal_gb_s:.4g} GB/s per GPU; "
            f"{fit.points} rows, mean |error| {fit.mean_abs_error:.1%}"
        )

    # -- GEMMs --------------------------------------------------------------------------------
    fixed = set()
    for path in csvs:
        if gpu_rec is None:
            raise ScenarioError("give --gpu: the GPU the GEMMs were timed on", file=path)
        gpu_now = reg.get("hardware", gpu_rec.name)
        fits = gemm.fit_gemm(gpu_now, gemm.read_gemm_csv(path), path)
        vals = {f.field: round(f.efficiency, 4) for f in fits}
        reg = reg.override("hardware", attrs.evolve(gpu_now, **vals), plugin="calibrate")
        entry = entries.setdefault(("gpu", gpu_rec.name), {"name": gpu_rec.name})
        entry.update(vals)
        for f in fits:
            fixed.add((gpu_rec.name, f.field))
            entry["source"] = (entry.get("source", "") + "; " if "source" in entry else "") + (
                f"{tag}: {f.field} from {os.path.basename(path)} ({f.rows} GEMMs; "
                f"mean |error| {f.error_before:.1%} -> {f.error_after:.1%})"
            )
            doc["gemm"].append(attrs.asdict(f))
            lines.append(
                f"gpu {gpu_rec.name}: {f.field} {f.efficiency:.3f} (was {getattr(gpu_now, f.field) or gpu_now.matmul_efficiency:.3f})"
                f" from {f.rows} GEMMs; mean |error| {f.error_before:.1%} -> {f.error_after:.1%}"
            )
            lines.append("  GEMM FLOPs   achieved/peak   model/peak")
            lines += [f"  {fl:10.0e}   {a:13.3f}   {m:10.3f}" for fl, a, m in f.curve]

    # -- measured steps -----------------------------------------------------------------------
    if scen_files:
        sf = steps.fit_steps(scen_files, reg, fixed=fixed)
        for (g, field), v in sf.values.items():
            entry = entries.setdefault(("gpu", g), {"name": g})
            entry[field] = round(v, 4)
            lines.append(f"gpu {g}: {field} {v:.3f} from measured steps")
        fitted = ", ".join(f"{f}" for _, f in sf.values) or "nothing"
        for g in {g for g, _ in sf.values}:
            entry = entries[("gpu", g)]
            entry["source"] = (entry.get("source", "") + "; " if "source" in entry else "") + (
                f"{tag}: {fitted} from {len(scen_files)} measured runs (mean |error| "
                f"{sf.error_before:.1%} -> {sf.error_after:.1%})"
            )
        for g, field in sf.unused:
            lines.append(f"gpu {g}: {field} kept (no measured run depends on it)")
        lines += list(sf.left_out)
        lines.append(
            f"measured steps: mean |error| {sf.error_before:.2%} before, {sf.error_after:.2%} after "
            f"({len(sf.cases)} fields of {len(scen_files) - len(sf.left_out)} runs)"
        )
        doc["steps"] = {
            "values": [{"gpu": g, "field": f, "value": v} for (g, f), v in sf.values.items()],
            "unused": [{"gpu": g, "field": f} for g, f in sf.unused],
            "error_before": sf.error_before,
            "error_after": sf.error_after,
            "cases": [attrs.asdict(c) for c in sf.cases],
            "left_out": list(sf.left_out),
        }

    if not entries:
        raise ScenarioError("nothing to calibrate: give nccl-tests logs, a GEMM CSV or measured scenarios")
    provenance = {
        "tool": f"shardmeter calibrate {__version__}",
        "date": today,
        "method": "docs/calibration.md",
        "inputs": [
            {"file": os.path.basename(p), "sha256": _sha256(p)} for p in [*logs_p, *csvs, *scen_files]
        ],
    }
    header = (
        "Catalog overlay written by `shardmeter calibrate`; load it from a scenario with\n"
        f'catalog = "{os.path.basename(out)}". Each entry replaces the fields it gives of the\n'
        "bundled record of that name, for the scenarios that load it only."
    )
    text = overlay_text(((t, e) for (t, _), e in entries.items()), provenance, header)
    with atomic_write(out, label="--out") as fh:
        fh.write(text)
    lines.append(f"wrote {out}")
    doc["lines"] = lines
    return doc
