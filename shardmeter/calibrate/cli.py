"""``shardmeter calibrate MEASUREMENTS... --out CATALOG.toml``: measurements -> a catalog overlay.

Each MEASUREMENT is told by its name: ``*.csv`` a GEMM timing CSV (:mod:`.gemm`), ``*.toml``
(or a folder of them) a scenario with ``[measured]`` (:mod:`.steps`), anything else an
nccl-tests log (:mod:`.nccl`). Links first, then GEMMs, then the steps with both applied.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
from typing import Any

import attrs

from shardmeter import __version__
from shardmeter.calibrate import gemm, nccl, steps
from shardmeter.calibrate.overlay_out import overlay_text
from shardmeter.errors import ScenarioError
from shardmeter.io import atomic_write, check_output
from shardmeter.numbers import number_argument
from shardmeter.reading import read_input_bytes
from shardmeter.records import HardwareProfile, Interconnect
from shardmeter.registry.manager import get_registry
from shardmeter.render.json import dump_json
from shardmeter.tables import safe_text

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
        "--nics-per-node",
        type=number_argument(integer=True, minimum=1, maximum=2**40, noun="NICs"),
        metavar="N",
        help="NICs per node (default: the GPU's, else its GPUs)",
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
    warnings = [ln for ln in result["lines"] if ln.startswith("warning: ")]
    if warnings:  # what a user must see goes to stderr, out of --json's way
        print("\n".join(safe_text(ln, limit=2000) for ln in warnings), file=sys.stderr)
    if args.json:
        print(dump_json(result))
    else:
        print("\n".join(safe_text(ln, limit=2000) for ln in result["lines"] if ln not in warnings))
    return 0


def _flag(fits: _Fits, entry: dict, what: str, error: float, rows: int, unit: str) -> None:
    """Flag a written fit whose mean error is above :data:`.nccl.FLAG_MEAN_ERROR`: a warning
    with its figures and ``flagged`` in the entry's ``source``."""
    if error <= nccl.FLAG_MEAN_ERROR:
        return
    text = f"mean |error| {error:.1%} over {rows} {unit}, above {nccl.FLAG_MEAN_ERROR:.0%}"
    fits.lines.append(f"warning: {what}: {text}: written, flagged in its source; check the measurements")
    _add_source(entry, f"flagged: {text}")


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
            raise ScenarioError("no such file", file=safe_text(p, limit=400))
    return logs, csvs, scen


def _measured_files(paths: list[str]) -> list[str]:
    """The measured scenarios of ``paths`` (files, and the ``*.toml`` under folders). A folder
    entry that cannot be read as a file (a FIFO, a device; never opened) or a folder holding no
    scenario is an error naming it: a fit must not quietly leave out a measurement."""
    from shardmeter.validate.run import _collect

    if not paths:
        return []
    files, special, _ = _collect(paths)
    if special:
        path, why = min(special.items())
        raise ScenarioError(why, file=safe_text(path, limit=400))
    for p in paths:
        if os.path.isdir(p) and not any(_inside(f, p) for f in files):
            raise ScenarioError(
                "is a folder holding no measured scenario (*.toml); give nccl-tests logs or CSVs by name",
                file=safe_text(p, limit=400),
            )
    return files


def _inside(file: str, folder: str) -> bool:
    real = os.path.realpath(folder)
    return os.path.commonpath([os.path.realpath(file), real]) == real


def _sha256(path: str) -> str:
    """The SHA-256 of an input, read again through the one reader (a regular file, bounded)."""
    return hashlib.sha256(read_input_bytes(path, what="measurement")).hexdigest()


def _link_name(flag: str | None, gpu, attr: str, option: str) -> str:
    name = flag or (getattr(gpu, attr) if gpu is not None else None)
    if not name:
        raise ScenarioError(
            f"say which link these logs measure: give {option} (or --gpu with a default link)"
        )
    return name


@attrs.frozen(kw_only=True)
class _Inputs:
    """What the command reads: the nccl-tests ``logs``, the GEMM ``csvs``, the measured
    ``scenarios`` (folders expanded), the ``gpu`` measured (``--gpu``), the NICs per node and the
    ``tag`` that starts every entry's ``source``."""

    logs: tuple[str, ...]
    csvs: tuple[str, ...]
    scenarios: tuple[str, ...]
    gpu: HardwareProfile | None
    nics_per_node: int | None
    today: str
    tag: str


@attrs.define
class _Fits:
    """The fits so far: the registry with them applied (each fit sees the ones before it), the
    overlay ``entries`` by ``(table, name)``, the printed ``lines`` and the ``--json`` ``doc``."""

    reg: Any
    entries: dict[tuple[str, str], dict] = attrs.Factory(dict)
    lines: list[str] = attrs.Factory(list)
    doc: dict = attrs.Factory(dict)

    def entry(self, table: str, name: str) -> dict:
        """The overlay entry of ``name`` in ``[[table]]``, started empty."""
        return self.entries.setdefault((table, name), {"name": name})


def run_calibrate(paths, *, out, gpu=None, intra=None, inter=None, nics_per_node=None) -> dict:
    """Fit everything ``paths`` hold, write the overlay ``out``; returns the ``--json`` document
    (with ``lines``: the printed summary)."""
    reg = get_registry()
    inputs = _read_inputs(paths, out, reg, gpu, nics_per_node)
    fits = _Fits(reg=reg, doc={"links": [], "gemm": [], "steps": None, "out": out})
    _fit_links(fits, inputs, intra, inter)
    fixed = _fit_gemms(fits, inputs)
    if inputs.scenarios:
        _fit_measured_steps(fits, inputs, fixed)
    if not fits.entries:
        raise ScenarioError("nothing to calibrate: give nccl-tests logs, a GEMM CSV or measured scenarios")
    _write_overlay(out, fits.entries, _provenance(inputs))
    fits.lines.append(f"wrote {out}")
    fits.doc["lines"] = fits.lines
    return fits.doc


def _read_inputs(paths, out: str, reg, gpu: str | None, nics_per_node: int | None) -> _Inputs:
    """The measurements ``paths`` sorted by kind, ``--out`` checked against them, ``--gpu``
    looked up."""
    logs, csvs, scen = _classify(paths)
    scenarios = _measured_files(scen)
    check_output(out, label="--out", inputs=[*paths, *scenarios])
    gpu_rec = reg.get("hardware", gpu, path="--gpu") if gpu else None
    today = datetime.date.today().isoformat()
    return _Inputs(
        logs=tuple(logs),
        csvs=tuple(csvs),
        scenarios=tuple(scenarios),
        gpu=gpu_rec,
        nics_per_node=nics_per_node or (gpu_rec.nics_per_node if gpu_rec else None),
        today=today,
        tag=f"calibrated {today} by shardmeter calibrate",
    )


def _add_source(entry: dict, text: str) -> None:
    """Append ``text`` to the entry's ``source`` ("; " between the fits that wrote it)."""
    entry["source"] = (entry["source"] + "; " if "source" in entry else "") + text


def _per_gpu(link) -> tuple[float, float]:
    """A link's ``(latency s, achieved bytes/s per GPU)``, as :func:`.nccl.fit_tier` prices an inner tier."""
    return (link.latency_us * 1e-6, link.bandwidth_gb_s * 1e9 * link.efficiency)


def _fit_links(fits: _Fits, inputs: _Inputs, intra: str | None, inter: str | None) -> None:
    """The one-node logs fit the intra-node link, then the multi-node logs the inter-node link,
    its inner tier priced by the same collective's one-node fit, else the intra-node link (just
    fitted, else the catalog's)."""
    parsed = [lg for p in inputs.logs for lg in nccl.read_nccl_logs(p)]
    for lg in parsed:
        fits.lines += [f"warning: {w}" for w in lg.warnings]
    one = [lg for lg in parsed if lg.nodes == 1]
    multi = [lg for lg in parsed if lg.nodes > 1]
    inner: dict[str, tuple[float, float]] = {}
    if one:
        name = _link_name(intra, inputs.gpu, "intra_node", "--intra")
        link = fits.reg.get("interconnect", name, path="--intra")
        res = _fit_link(fits, inputs, one, name, link, inner_link=None)
        inner = {c.collective: _fit_per_gpu(c.fit) for c in res.collectives if c.applied}
        inner["*"] = _per_gpu(fits.reg.get("interconnect", name))
    if multi:
        name = _link_name(inter, inputs.gpu, "inter_node", "--inter")
        link = fits.reg.get("interconnect", name, path="--inter")
        if not inner:  # the catalog's intra-node link prices the inner tier
            in_name = _link_name(intra, inputs.gpu, "intra_node", "--intra")
            inner["*"] = _per_gpu(fits.reg.get("interconnect", in_name, path="--intra"))
        _fit_link(fits, inputs, multi, name, link, inner_link=inner)


def _fit_per_gpu(fit: nccl.TierFit) -> tuple[float, float]:
    return (fit.latency_us * 1e-6, fit.bandwidth_gb_s * 1e9)


def _where(log_where: str) -> str:
    """``file:line`` of a run as the overlay records it: the file's base name."""
    file, _, line = log_where.rpartition(":")
    return f"{os.path.basename(file)}:{line}"


def _fit_link(
    fits: _Fits, inputs: _Inputs, logs, name: str, link: Interconnect, *, inner_link
) -> nccl.LinkFits:
    """Fit ``link`` (``name``, as the flag or the GPU gives it) to one tier's ``logs``, each
    collective to its own rate; the joint fit of the ring collectives replaces the link in
    ``fits.reg``; each collective's fit is recorded in ``[[collective]]``."""
    res = nccl.fit_link(link, logs, nics_per_node=inputs.nics_per_node, inner_link=inner_link)
    lines: list[str] = []
    warnings: list[str] = []
    for c in res.collectives:
        f = c.fit
        wheres = [_where(w) for w in f.logs]
        fits.entries[("collective", f"{name} {c.collective}")] = {
            "link": name,
            "collective": c.collective,
            "algorithm": c.algorithm,
            "latency_us": round(f.latency_us, 4),
            "bandwidth_gb_s": round(f.bandwidth_gb_s, 4),
            "efficiency": round(f.efficiency, 4),
            "rows": f.points,
            "mean_abs_error": round(f.mean_abs_error, 4),
            "logs": wheres,
            "applied": c.applied,
            "source": f"{inputs.tag} from nccl-tests {', '.join(wheres)}",
        }
        lines.append(
            f"  {c.collective} ({c.algorithm}) on {name}: latency {f.latency_us:.3g} us, "
            f"{f.bandwidth_gb_s:.4g} GB/s per GPU = {f.efficiency:.3f} of {f.nominal_gb_s:.4g}; "
            f"{f.points} rows, mean |error| {f.mean_abs_error:.1%}{'' if c.applied else ' (recorded, not applied)'}"
        )
        if not c.applied:
            warnings.append(
                f"warning: {c.collective} on {name} runs {f.efficiency:.2f} x the wire rate (in-network "
                "reduction): recorded in [[collective]], not applied to the link, which prices every "
                "collective; give all_gather / reduce_scatter logs (or NCCL_ALGO=Ring) to calibrate it"
            )
    fits.doc["links"].append(
        {
            "link": name,
            "joint": None if res.joint is None else attrs.asdict(res.joint),
            "collectives": [
                {**attrs.asdict(c, recurse=False), "fit": attrs.asdict(c.fit)} for c in res.collectives
            ],
        }
    )
    fit = res.joint
    if fit is None:
        fits.lines += lines + warnings
        return res
    fields: dict[str, Any] = nccl.overlay_fields(fit)
    fits.reg = fits.reg.override("interconnect", attrs.evolve(link, **fields), plugin="calibrate")
    used = ", ".join(c.collective for c in res.collectives if c.applied)
    runs = ", ".join(_where(w) for w in fit.logs)
    lat = "latency kept (not determined)" if fit.latency_pinned else f"latency {fit.latency_us:.3g} us"
    fits.entries[("link", name)] = {
        "name": name,
        **fields,
        "source": (
            f"{inputs.tag} from nccl-tests {used} ({runs}; {fit.points} rows): {lat}, "
            f"{fit.bandwidth_gb_s:.4g} GB/s per GPU = {fit.efficiency:.3f} of {fit.nominal_gb_s:.4g}; "
            f"fit mean |error| {fit.mean_abs_error:.1%}"
        ),
    }
    if fit.latency_pinned:
        warnings.append(
            f"warning: link {name}: the logs do not determine a latency (it fits below 0; their smallest "
            f"sizes are bandwidth-bound): latency_us kept at {link.latency_us:.3g}"
        )
    _flag(fits, fits.entries[("link", name)], f"link {name}", fit.mean_abs_error, fit.points, "rows")
    was = f" (was {link.latency_us:.3g})" if not fit.latency_pinned else ""
    fits.lines.append(
        f"link {name}: {lat}{was}, efficiency {fit.efficiency:.3f} (was {link.efficiency:.3f}) of "
        f"{fit.nominal_gb_s:.4g} GB/s per GPU from {used}; {fit.points} rows, mean |error| {fit.mean_abs_error:.1%}"
    )
    fits.lines += lines + warnings
    return res


def _fit_gemms(fits: _Fits, inputs: _Inputs) -> set[tuple[str, str]]:
    """Each GEMM CSV fits the ``--gpu``'s matmul efficiencies (links applied); returns the
    ``(gpu, field)`` pairs fitted, which the measured steps then keep."""
    fixed: set[tuple[str, str]] = set()
    for path in inputs.csvs:
        if inputs.gpu is None:
            raise ScenarioError("give --gpu: the GPU the GEMMs were timed on", file=path)
        name = inputs.gpu.name
        gpu_now = fits.reg.get("hardware", name)
        found = gemm.fit_gemm(gpu_now, gemm.read_gemm_csv(path), path)
        vals = {f.field: round(f.efficiency, 4) for f in found}
        fits.reg = fits.reg.override("hardware", attrs.evolve(gpu_now, **vals), plugin="calibrate")
        entry = fits.entry("gpu", name)
        entry.update(vals)
        for f in found:
            fixed.add((name, f.field))
            _add_source(
                entry,
                f"{inputs.tag}: {f.field} from {os.path.basename(path)} ({f.rows} GEMMs; "
                f"mean |error| {f.error_before:.1%} -> {f.error_after:.1%})",
            )
            fits.doc["gemm"].append(attrs.asdict(f))
            fits.lines += _gemm_lines(name, gpu_now, f)
            _flag(fits, entry, f"gpu {name}: {f.field}", f.error_after, f.rows, "GEMMs")
    return fixed


def _gemm_lines(name: str, gpu_now: HardwareProfile, f) -> list[str]:
    """The summary of one GEMM field's fit: the new value, then its efficiency curve."""
    was = getattr(gpu_now, f.field) or gpu_now.matmul_efficiency
    return [
        f"gpu {name}: {f.field} {f.efficiency:.3f} (was {was:.3f})"
        f" from {f.rows} GEMMs; mean |error| {f.error_before:.1%} -> {f.error_after:.1%}",
        "  GEMM FLOPs   achieved/peak   model/peak",
        *(f"  {fl:10.0e}   {a:13.3f}   {m:10.3f}" for fl, a, m in f.curve),
    ]


def _fit_measured_steps(fits: _Fits, inputs: _Inputs, fixed: set[tuple[str, str]]) -> None:
    """The measured scenarios fit the efficiencies the links and GEMMs left (``fixed`` kept)."""
    sf = steps.fit_steps(inputs.scenarios, fits.reg, fixed=fixed)
    for (g, field), v in sf.values.items():
        fits.entry("gpu", g)[field] = round(v, 4)
        fits.lines.append(f"gpu {g}: {field} {v:.3f} from measured steps")
    fitted = ", ".join(f"{f}" for _, f in sf.values) or "nothing"
    for g in {g for g, _ in sf.values}:
        _add_source(
            fits.entries[("gpu", g)],
            f"{inputs.tag}: {fitted} from {len(inputs.scenarios)} measured runs (mean |error| "
            f"{sf.error_before:.1%} -> {sf.error_after:.1%})",
        )
        _flag(
            fits,
            fits.entries[("gpu", g)],
            f"gpu {g}: measured steps",
            sf.error_after,
            len(sf.cases),
            "fields",
        )
    for g, field in sf.unused:
        fits.lines.append(f"gpu {g}: {field} kept (no measured run depends on it)")
    fits.lines += list(sf.left_out)
    fits.lines.append(
        f"measured steps: mean |error| {sf.error_before:.2%} before, {sf.error_after:.2%} after "
        f"({len(sf.cases)} fields of {len(inputs.scenarios) - len(sf.left_out)} runs)"
    )
    fits.doc["steps"] = {
        "values": [{"gpu": g, "field": f, "value": v} for (g, f), v in sf.values.items()],
        "unused": [{"gpu": g, "field": f} for g, f in sf.unused],
        "error_before": sf.error_before,
        "error_after": sf.error_after,
        "cases": [attrs.asdict(c) for c in sf.cases],
        "left_out": list(sf.left_out),
    }


def _provenance(inputs: _Inputs) -> dict:
    """The overlay's ``[provenance]``: the tool, the date, the method and each input's SHA-256."""
    return {
        "tool": f"shardmeter calibrate {__version__}",
        "date": inputs.today,
        "method": "docs/calibration.md",
        "inputs": [
            {"file": os.path.basename(p), "sha256": _sha256(p)}
            for p in [*inputs.logs, *inputs.csvs, *inputs.scenarios]
        ],
    }


def _write_overlay(out: str, entries: dict[tuple[str, str], dict], provenance: dict) -> None:
    """Write the overlay to ``out`` atomically."""
    header = (
        "Catalog overlay written by `shardmeter calibrate`; load it from a scenario with\n"
        f'catalog = "{os.path.basename(out)}". Each entry replaces the fields it gives of the\n'
        "bundled record of that name, for the scenarios that load it only."
    )
    text = overlay_text(((t, e) for (t, _), e in entries.items()), provenance, header)
    with atomic_write(out, label="--out") as fh:
        fh.write(text)
