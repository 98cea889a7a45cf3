"""Wall-time benchmark of the project's own workflows.

Usage: ``python tools/benchmark.py [--only NAME ...] [--list]``; ``make bench`` runs all.
Prints a table and writes ``_build/benchmark.json``.

To add a measurement, decorate a function that does the work once and returns a short detail
string (or raises on failure)::

    @measurement("name", "what is timed")
    def _name() -> str:
        ...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbrun import REPO  # noqa: E402

OUT = REPO / "_build" / "benchmark.json"


@dataclass(frozen=True)
class Measurement:
    name: str
    description: str
    run: Callable[[], str]


@dataclass
class Result:
    name: str
    description: str
    wall_s: float
    ok: bool
    detail: str


MEASUREMENTS: list[Measurement] = []


def measurement(name: str, description: str):
    """Register ``fn`` as a measurement; it is timed once, wall clock, by ``main``."""

    def register(fn: Callable[[], str]) -> Callable[[], str]:
        MEASUREMENTS.append(Measurement(name, description, fn))
        return fn

    return register


def _make(target: str) -> str:
    log = REPO / "_build" / f"benchmark-make-{target}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.run(["make", target], cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise RuntimeError(f"make {target} exited {proc.returncode}; log: {log.relative_to(REPO)}")
    return f"log: {log.relative_to(REPO)}"


@measurement("unit tests", "make test-unit: pytest tests/ (property-based tests and the precision scan included)")
def _unit_tests() -> str:
    return _make("test-unit")


@measurement("nbval", "make test-nbval: every chapter re-executed and compared with its committed outputs")
def _nbval() -> str:
    return _make("test-nbval")


@measurement("book build (strict)", "make book: jupyter-book build --all -W --keep-going . (executes chapters)")
def _book() -> str:
    return _make("book")


@measurement("chapter: architecture", "execute book/architecture.ipynb with nbclient (kernel start included)")
def _chapter_architecture() -> str:
    from nbrun import execute

    nb = execute(REPO / "book" / "architecture.ipynb")
    cells = sum(1 for c in nb.cells if c.cell_type == "code")
    return f"{cells} code cells"


@measurement("chapters", "execute every chapter in _toc.yml with nbclient, one at a time (kernel start included)")
def _chapters() -> str:
    from nbrun import execute, toc_notebooks

    times = []
    for path in toc_notebooks():
        t0 = time.perf_counter()
        execute(path)
        times.append(f"{path.stem} {time.perf_counter() - t0:.1f} s")
    return "; ".join(times)


#: Most memory the planner may take at 8,192 cards.
PLAN_MEMORY_BUDGET_BYTES = 2 * 2**30


def _plan_in_fresh_process(cards: int, concurrency: int) -> dict:
    """``pdcalc plan --json`` for V4-Flash on ascend-910b2 in a fresh process: wall time in the planner and
    peak resident memory."""
    code = (
        "import contextlib, io, json, resource, time\n"
        "from pdcalc.cli import main\n"
        "t0 = time.perf_counter(); out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    rc = main(['plan', '--card', 'ascend-910b2', '--cards', '{cards}', '--prompt', '24576', '--output', "
        f"'8192', '--concurrency', '{concurrency}', '--json'])\n"
        "res = json.loads(out.getvalue())\n"
        "print(json.dumps({'rc': rc, 's': time.perf_counter() - t0, 'peak_kib': resource.getrusage(resource.RUSAGE_SELF)"
        ".ru_maxrss, 'splits': res['splits'], 'evaluated': res['evaluated'], 'feasible': res['feasible']}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r["peak_bytes"] = r["peak_kib"] * 1024
    r["detail"] = (f"{r['s']:.2f} s in the planner, peak {r['peak_bytes'] / 2**30:.2f} GiB; {r['splits']:,} splits, "
                   f"{r['evaluated']:,} evaluated, {r['feasible']:,} feasible")
    return r


@measurement("plan at 64 cards", "pdcalc plan --cards 64 (the V4 article's cluster: V4-Flash on ascend-910b2, 24,576 "
             "+ 8,192 tokens, 960 sequences) in a fresh process: wall time and peak resident memory")
def _plan_64() -> str:
    r = _plan_in_fresh_process(64, 960)
    if r["rc"] != 0:
        raise RuntimeError(r["detail"])
    return r["detail"]


@measurement("plan at 8,192 cards", "pdcalc plan --cards 8192 (V4-Flash on ascend-910b2, 24,576 + 8,192 tokens, "
             "122,880 sequences) in a fresh process: wall time and peak resident memory (budget 2 GiB)")
def _plan_8192() -> str:
    r = _plan_in_fresh_process(8192, 122880)
    if r["rc"] != 0 or r["peak_bytes"] > PLAN_MEMORY_BUDGET_BYTES:
        raise RuntimeError(f"over the {PLAN_MEMORY_BUDGET_BYTES / 2**30:.0f} GiB budget or failed: {r['detail']}")
    return r["detail"]


def _served_in_fresh_process(argv: list[str]) -> dict:
    """``pdcalc ARGV --json`` in a fresh process: wall time of the command (imports excluded)."""
    code = (
        "import contextlib, io, json, time\n"
        "import pdcalc.cli, pdcalc.reality.predict, pdcalc.plan.search\n"
        "from pdcalc.cli import main\n"
        "t0 = time.perf_counter(); out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    rc = main({argv!r} + ['--json'])\n"
        "print(json.dumps({'rc': rc, 's': time.perf_counter() - t0}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@measurement("predict", "pdcalc predict examples/v4-flash-a3-pd.toml (the served model: tables, the client's run "
             "simulated at the corpus's terms and at the kernels alone) in a fresh process, imports excluded")
def _predict() -> str:
    r = _served_in_fresh_process(["predict", "examples/v4-flash-a3-pd.toml"])
    if r["rc"] != 0:
        raise RuntimeError(f"exit {r['rc']}")
    return f"{r['s']:.2f} s"


@measurement("plan (served) at 64 cards", "pdcalc plan --costs served --cards 64 (V4-Flash on ascend-910b2, 24,576 + "
             "8,192 tokens, 960 sequences) in a fresh process, imports excluded")
def _plan_served_64() -> str:
    r = _served_in_fresh_process(["plan", "--costs", "served", "--card", "ascend-910b2", "--cards", "64", "--prompt",
                                  "24576", "--output", "8192", "--concurrency", "960"])
    if r["rc"] != 0:
        raise RuntimeError(f"exit {r['rc']}")
    return f"{r['s']:.2f} s"


@measurement("plan (served) at 8,192 cards", "pdcalc plan --costs served --cards 8192 (V4-Flash on ascend-910b2, "
             "24,576 + 8,192 tokens, 122,880 sequences) in a fresh process, imports excluded")
def _plan_served_8192() -> str:
    r = _served_in_fresh_process(["plan", "--costs", "served", "--card", "ascend-910b2", "--cards", "8192", "--prompt",
                                  "24576", "--output", "8192", "--concurrency", "122880"])
    if r["rc"] != 0:
        raise RuntimeError(f"exit {r['rc']}")
    return f"{r['s']:.2f} s"


@measurement("throughput.step over 8,192 contexts", "one vectorized decode step of DeepSeek-V3 on 32 cards at every "
             "context from 1 to 8,192 tokens (mean of 20 calls)")
def _step_vectorized() -> str:
    import numpy as np

    from pdcalc.perf.step import step

    L = np.arange(1, 8193)
    step("deepseek-v3", "ascend-910b2", tp=8, dp=4, context=2048, concurrency=80, phase="decode")  # warm caches
    t0 = time.perf_counter()
    for _ in range(20):
        step("deepseek-v3", "ascend-910b2", tp=8, dp=4, context=L, concurrency=80, phase="decode")
    return f"{(time.perf_counter() - t0) / 20 * 1e3:.1f} ms per call"


@measurement("prefill FLOPs of a 1M-token prompt", "pdcalc.perf.flops.prefill_flops(V4-Flash, 1,048,576) (mean of 100 calls)")
def _prefill_flops() -> str:
    from pdcalc.perf.flops import prefill_flops

    prefill_flops("deepseek-v4-flash", 10)
    t0 = time.perf_counter()
    for _ in range(100):
        prefill_flops("deepseek-v4-flash", 1_048_576)
    return f"{(time.perf_counter() - t0) / 100 * 1e3:.2f} ms per call"


def _planner_case():
    from pdcalc.plan.roles import sides
    from pdcalc.plan.workload import Setup, Workload

    setup = Setup(model="deepseek-v3", quant="w8a8", card="ascend-910b2", cards=128, mtp=False, engine="vllm",
                  tp_options=(1, 2, 4, 8))
    work = Workload(prompt_tokens=2048, output_tokens=512, concurrency=80, ttft_s=2.0, tpot_s=0.05)
    return setup, work, *sides(setup, work)


@measurement("planner: vectorized vs loop", "pdcalc.plan.splits.evaluate (numpy over the grid) and evaluate_loop "
             "(plain Python) on the same 128-card V3 grid, layouts precomputed")
def _planner() -> str:
    from pdcalc.plan.splits import evaluate, evaluate_loop

    setup, work, p, d = _planner_case()
    out = []
    for name, fn, reps in (("vectorized", evaluate, 5), ("loop", evaluate_loop, 1)):
        t0 = time.perf_counter()
        for _ in range(reps):
            n = len(fn(setup, work, p, d))
        dt = (time.perf_counter() - t0) / reps
        out.append(f"{name} {n / dt:,.0f} candidates/s ({n:,} in {dt * 1e3:.0f} ms)")
    return "; ".join(out)


@measurement("chapter rerun: per_card", "pdcalc rerun per_card with a new card and D-side dp (papermill, into a "
             "temporary directory)")
def _rerun() -> str:
    import tempfile

    from pdcalc.book.rerun import rerun

    with tempfile.TemporaryDirectory() as tmp:
        res = rerun("per_card", {"card": "ascend-910b4-32g", "d_ep": 16}, outdir=tmp)
    return f"{res.seconds:.1f} s inside rerun()"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the measurements and exit")
    parser.add_argument("--out", type=Path, default=OUT, help=f"JSON output (default {OUT.relative_to(REPO)})")
    args = parser.parse_args(argv)
    if args.list:
        for m in MEASUREMENTS:
            print(f"{m.name:28}  {m.description}")
        return 0
    unknown = set(args.only) - {m.name for m in MEASUREMENTS}
    if unknown:
        parser.error(f"unknown measurement(s) {sorted(unknown)}; see --list")
    chosen = [m for m in MEASUREMENTS if not args.only or m.name in args.only]

    # Set-up outside the timings: the venv must be current, so `make` does no install.
    subprocess.run(["make", "venv"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    results = []
    for m in chosen:
        print(f"bench: {m.name} ...", flush=True)
        t0 = time.perf_counter()
        try:
            detail, ok = m.run(), True
        except Exception as exc:  # noqa: BLE001 - a failed measurement is reported, not hidden
            detail, ok = f"{type(exc).__name__}: {exc}", False
        results.append(Result(m.name, m.description, round(time.perf_counter() - t0, 2), ok, detail))

    width = max(len(r.name) for r in results)
    print(f"\n{'measurement':<{width}}  {'wall s':>7}  status  detail")
    for r in results:
        print(f"{r.name:<{width}}  {r.wall_s:7.1f}  {'ok' if r.ok else 'FAILED':6}  {r.detail}")

    report = {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "ci": os.environ.get("CI", ""),
        },
        "results": [asdict(r) for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nbench: wrote {args.out}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
