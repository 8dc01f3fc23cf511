"""Print the memory table of the bundled published runs: for every run with a memory figure
(``[measured] memory_per_gpu_gb`` or ``memory_reserved_gb``), the predicted allocated peak
(``memory_per_gpu_gb``) by part, the predicted reserved peak (``memory_reserved_gb``), the
measured figure and its kind, and the ratios. The ratios are taken as ``validate`` takes them:
both predictions less what the process holds outside PyTorch's caching allocator
(``memory_outside_allocator_gb``, the CUDA context and NCCL's buffers), which
``max_memory_allocated`` and ``max_memory_reserved`` leave out. Issue 22's closing note shows it
before and after.

    python tools/memory_table.py              # text table
    python tools/memory_table.py --markdown   # a Markdown table
    python tools/memory_table.py PATH...      # other runs (files or folders)

A model without ``memory_reserved_gb`` (an older checkout) prints "-" in its columns.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shardmeter.estimator import Estimator  # noqa: E402
from shardmeter.validate.run import bundled_validation_dir, collect_files  # noqa: E402

FIELDS = ("memory_per_gpu_gb", "memory_reserved_gb")
PARTS = ("weights", "gradients", "optimizer", "activations", "transient", "other")
HEAD = (
    "run",
    "kind",
    "measured",
    "alloc",
    "reserved",
    "alloc/meas",
    "res/meas",
    *PARTS,
)


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def rows(paths: list[str]) -> list[tuple[str, ...]]:
    """One row per measured memory figure of the runs under ``paths``."""
    est = Estimator()
    out = []
    for f in collect_files(paths):
        sc = est.load(f)
        figures = {k: v for k, v in sc.measured.items() if k in FIELDS}
        if not figures:
            continue
        rep = est.estimate(sc).to_dict()
        alloc, res = rep.get("memory_per_gpu_gb"), rep.get("memory_reserved_gb")
        outside = rep.get("memory_outside_allocator_gb") or 0.0
        alloc_in = alloc - outside if alloc is not None else None
        res_in = res - outside if res is not None else None
        parts = rep.get("memory_breakdown_gb") or {}
        for field, measured in figures.items():
            kind = "allocated" if field == "memory_per_gpu_gb" else "reserved"
            out.append(
                (
                    f"{os.path.basename(os.path.dirname(f))}/{os.path.basename(f)[:-5]}",
                    kind,
                    _f(measured),
                    _f(alloc),
                    _f(res),
                    _f(alloc_in / measured if alloc_in is not None else None, "{:.2f}"),
                    _f(res_in / measured if res_in is not None else None, "{:.2f}"),
                    *(_f(parts.get(p)) for p in PARTS),
                )
            )
    return out


def summary(table: list[tuple[str, ...]]) -> str:
    """How many reserved figures the reserved prediction meets within 10 %, and how many the
    allocated prediction exceeds."""
    res = [r for r in table if r[1] == "reserved"]
    within = sum(1 for r in res if r[6] != "-" and abs(float(r[6]) - 1.0) <= 0.10)
    over = sum(1 for r in res if float(r[5]) > 1.0)
    return (
        f"{len(res)} reserved figures: reserved prediction within 10 % on {within}; "
        f"allocated prediction above the reserved figure on {over}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="scenario files or folders (default: the bundled runs)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    table = rows(args.paths or [bundled_validation_dir()])
    if args.markdown:
        print("| " + " | ".join(HEAD) + " |")
        print("|" + "---|" * len(HEAD))
        for r in table:
            print("| " + " | ".join(r) + " |")
    else:
        from shardmeter.tables import render_table

        print(render_table(HEAD, table))
    print()
    print(summary(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
