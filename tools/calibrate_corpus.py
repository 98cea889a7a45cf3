"""Fit the served model on the served corpus and store the fit (``pdcalc.reality.calibration``).

Usage: ``python tools/calibrate_corpus.py [--from-design] [--jobs N]``.

Writes, under ``pdcalc/data``:

- ``served_design.csv``: every predictable run of ``served.toml`` simulated on its design points (the slow part:
  a few minutes on two cores; ``--from-design`` keeps the stored one and only refits);
- ``served_held_out.csv``: leave one source out, every run simulated at terms fitted without its document, with
  its out-of-sample 80 % range;
- ``served_calibration.toml``: the terms of every pool fitted on the whole corpus (what ``pdcalc predict`` takes),
  the held-out error quantiles of every error class (its ranges) and the held-out summary.

Run it whenever the corpus, the step model or the simulation changes; the test suite re-simulates a sample of
the stored design and refits from it, and fails when the stored files are stale.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "pdcalc" / "data"


def _design_of(run_id: str) -> list[dict]:
    from pdcalc.reality.calibration import design_points
    from pdcalc.reality.served_runs import get

    return design_points(get(run_id))


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    from pdcalc.core.precision import round_sig
    from pdcalc.reality import calibration as cal

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-design", action="store_true", help="refit from the stored design (no simulation)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the design")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    runs = cal.predictable_runs()
    design_path = DATA / cal.DESIGN_FILE
    if not args.from_design:
        with Pool(max(1, args.jobs)) as pool:
            rows = [row for part in pool.map(_design_of, [r.id for r in runs], chunksize=1) for row in part]
        design = pd.DataFrame(rows)
        design.to_csv(design_path, index=False, lineterminator="\n")
        print(f"{cal.DESIGN_FILE}: {len(design)} points of {len(runs)} runs ({time.perf_counter() - t0:.0f} s)")
    design = pd.read_csv(design_path)
    held, fit = cal.build(runs, design)
    for col in ("measured", "predicted", "before", "low", "high", "log_error", "before_log_error", "host_ms"):
        held[col] = [round_sig(float(v), cal.DIGITS) for v in held[col]]
    held.to_csv(DATA / cal.HELD_OUT_FILE, index=False, lineterminator="\n")
    (DATA / cal.CALIBRATION_FILE).write_text(cal.calibration_toml(fit))
    s = fit["summary"]["all"]
    print(f"held out over output tokens/s and TPOT: median {s['median_abs_err_pct']} %, 90th percentile "
          f"{s['p90_abs_err_pct']} %, 80 % ranges cover {s['coverage_pct']} % "
          f"(kernels alone: {s['before_median_abs_err_pct']} %, {s['before_p90_abs_err_pct']} %); "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
