"""Write (or check) ``shardmeter/validation_data/residuals.json``: the validated runs the report's
``confidence`` object is built from (``shardmeter/report/confidence.py``).

Every bundled published run is predicted once; per run the table stores its features (stack,
GPU generation, model family, layout family, precision class, GPUs, parameters), the field
compared, the signed residual ``predicted / measured - 1`` and the measured MFU; and, with the
efficiencies fitted without the run's source group (the table's ``holdout.fits``, kept as
stored: ``tools/fit_efficiency.py --holdout --write-residuals`` writes them), its out-of-sample
``logo_residual``. Regenerate after any change
to the model or to the bundled runs (``tests/test_confidence.py`` fails until then):

    python tools/confidence_table.py --write
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shardmeter.report.confidence import REGENERATE, TABLE_FILE  # noqa: E402
from shardmeter.validate.confidence_table import compute_runs  # noqa: E402

OUT = ROOT / "shardmeter" / "validation_data" / TABLE_FILE


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def document() -> dict:
    """The table's JSON document, computed now: the runs predicted with the model as it is,
    and again with each stored leave-one-group-out fit (``holdout``, kept as stored)."""
    holdout = json.loads(OUT.read_text(encoding="utf-8")).get("holdout") if OUT.exists() else None
    doc = {
        "generated": datetime.date.today().isoformat(),
        "commit": _commit(),
        "command": REGENERATE,
        "runs": compute_runs(fits=holdout["fits"] if holdout else None),
    }
    if holdout:
        doc["holdout"] = holdout
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    doc = document()
    if args.write:
        OUT.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {len(doc['runs'])} runs to {OUT.relative_to(ROOT)}")
        return 0
    stored = json.loads(OUT.read_text(encoding="utf-8"))
    same = stored["runs"] == doc["runs"]
    print("up to date" if same else f"stale: run {REGENERATE}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
