"""Write pdcalc/data/whatif_plans.csv: `pdcalc plan --json` over the grid the "What to run" and plan chapters offer.

    .venv/bin/python tools/whatif_grid.py [--jobs N]

Each row is one setting (card, cluster size, prompt and output tokens, sequences in flight) and the answers to both
objectives as the pages print them, taken from the command line's own JSON, so a page that picks a row shows what
`pdcalc plan` prints for the same inputs (tests/test_whatif.py re-runs a sample of rows). Re-run it when the planner
or the served terms change (`make refresh` does not).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdcalc.book.whatif import PLAN_GRID, PLAN_GRID_PATH, plan_argv, plan_fields  # noqa: E402


def one(setting: dict) -> dict:
    from pdcalc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(plan_argv(setting))
    if rc != 0:
        raise SystemExit(f"pdcalc plan failed for {setting}")
    return {**setting, **plan_fields(json.loads(out.getvalue()))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    keys = list(PLAN_GRID)
    settings = [dict(zip(keys, values)) for values in itertools.product(*PLAN_GRID.values())]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, settings))
    import pandas as pd

    pd.DataFrame(rows).to_csv(PLAN_GRID_PATH, index=False)
    print(f"wrote {PLAN_GRID_PATH.relative_to(ROOT)}: {len(rows)} settings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
