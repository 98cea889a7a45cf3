"""Command line: ``pdcalc params | claims | list | rerun``. JSON output is a stable contract.

User errors (unknown names, bad files, impossible layouts) exit with status 2 and one line on stderr;
``rerun`` exits with status 1 when a cell of the re-run chapter raises.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from pdcalc.errors import PdcalcError


def _jsonable(x):
    if isinstance(x, tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x


def cmd_params(args) -> int:
    from pdcalc.inventory import get_inventory

    inv = get_inventory(args.model)
    c = inv.counts()
    out = {
        "model": inv.name, "source": inv.source, "total": c.total, "activated": c.activated, "mtp": c.mtp,
        "total_with_mtp": c.total + c.mtp, "by_category": c.by_category,
        "mtp_by_category": {k: int(v) for k, v in inv.by_category(part="mtp").items()},
        "conventions": {
            "total": "main model, MTP module excluded (the official headline convention)",
            "activated": "per token: every non-routed tensor except lookup tables (embedding, hash routing), "
                         "plus top-k / n_routed of the routed experts",
            "mtp": "the MTP module's own tensors; the embedding and output head it shares are not counted again",
        },
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{inv.name}  ({inv.source})")
    print(f"  total (main, MTP excluded): {c.total:>20,}")
    print(f"  activated per token:        {c.activated:>20,}")
    print(f"  MTP module:                 {c.mtp:>20,}")
    for k, v in c.by_category.items():
        print(f"    {k:<24}{v:>20,}")
    return 0


def cmd_claims(args) -> int:
    from pdcalc import claims

    rows = claims.frame(args.article)
    if args.verdict:
        rows = rows[rows["verdict"] == args.verdict] if not rows.empty else rows
    if args.json:
        recs = []
        for r in rows.to_dict("records"):
            recs.append({k: _jsonable(r[k]) for k in (
                "id", "article", "section", "quantity", "printed", "article_value", "article_unit",
                "recomputed_value", "delta", "verdict", "explanation", "method", "where", "kind")})
        print(json.dumps(recs, ensure_ascii=False, indent=1))
        return 0
    if rows.empty:
        print("no claims")
        return 0
    counts = rows["verdict"].value_counts()
    print("  ".join(f"{v}: {counts.get(v, 0)}" for v in claims.VERDICTS))
    for r in rows.itertuples():
        rec = "" if r.recomputed_value is None else f" -> {r.recomputed_value}"
        print(f"{r.id:<44} {r.section:<8} {r.printed:<22}{rec}  [{r.verdict}]")
    return 0


def cmd_memory(args) -> int:
    from pdcalc.memory import budget, card_weights
    from pdcalc.units import GB, GiB

    w = card_weights(args.model, args.quant, ep=args.ep, tp=args.tp, mtp=args.mtp, redundant=args.redundant)
    b = budget(args.card, w.total_bytes, utilization=args.utilization)
    out = {
        "model": w.model, "card": b.card, "quant": w.scheme, "ep": w.ep, "tp": w.tp, "mtp": w.mtp,
        "experts_per_card": w.experts_per_card,
        "weights_bytes": w.total_bytes, "weights_by_category_bytes": w.by_category,
        "class_i_bytes": w.class_i_bytes, "class_ii_bytes": w.class_ii_bytes,
        "usable_bytes": b.usable_bytes, "usable_basis": f"{b.utilization} x {b.base_bytes:.0f} B visible",
        "left_for_kv_bytes": b.kv_bytes, "fits": b.fits, "verdict": b.verdict(),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{w.model} on {b.card}, {w.scheme}, EP{w.ep} x TP{w.tp}, MTP {'loaded' if w.mtp else 'not loaded'}")
    print(f"  routed experts per layer on the fullest card: {w.experts_per_card}")
    for k, v in w.by_category.items():
        print(f"    {k:<24}{v / GB:>10.3f} GB {v / GiB:>10.3f} GiB")
    print(f"  weights                     {w.total_bytes / GB:>10.3f} GB {w.total_bytes / GiB:>10.3f} GiB")
    print(f"  usable ({b.utilization} x visible) {b.usable_bytes / GB:>10.3f} GB {b.usable_bytes / GiB:>10.3f} GiB")
    print(f"  {b.verdict()}")
    return 0


def cmd_kv(args) -> int:
    from pdcalc.kv_cache import kv_bytes

    r = kv_bytes(args.model, args.context, args.engine, include_mtp=args.mtp)
    out = {
        "model": r.model, "engine": r.engine, "context_tokens": int(r.context_tokens), "include_mtp": r.include_mtp,
        "block_size": r.block_size, "fixed_bytes": float(r.fixed_bytes),
        "per_token_bytes_asymptotic": float(r.per_token_bytes_asymptotic), "total_bytes": float(r.total_bytes),
        "per_token_bytes_average": float(r.per_token_bytes_average),
        "by_layer_kind_bytes": {k: float(v) for k, v in r.by_layer_kind.items()},
        "by_cache_bytes": {k: float(v) for k, v in r.by_cache.items()},
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{r.model}, {r.engine}, {out['context_tokens']:,} tokens, MTP {'included' if r.include_mtp else 'excluded'}")
    print(f"  per sequence:        {out['total_bytes']:>16,.0f} B")
    print(f"  fixed part:          {out['fixed_bytes']:>16,.0f} B")
    print(f"  per token (slope):   {out['per_token_bytes_asymptotic']:>16,.1f} B")
    print(f"  per token (average): {out['per_token_bytes_average']:>16,.1f} B")
    return 0


def cmd_list(args) -> int:
    from pdcalc.hardware import card_names, get_card
    from pdcalc.inventory import MODEL_NAMES, get_inventory
    from pdcalc.quant import SCHEMES

    out = {
        "models": {m: get_inventory(m).source for m in MODEL_NAMES},
        "cards": {c: get_card(c).label for c in card_names()},
        "quantization": {k: s.description for k, s in SCHEMES.items()},
    }
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    for kind, items in out.items():
        print(f"{kind}:")
        for k, v in items.items():
            print(f"  {k:<28} {v[:100]}")
    return 0


def cmd_rerun(args) -> int:
    from pdcalc.rerun import ChapterFailed, ParameterError, chapter_parameters, parse_value, rerun

    declared = chapter_parameters(args.chapter)
    params: dict = {}
    for name, text in args.parameter or []:
        if name in params:
            raise ParameterError(f"parameter {name!r} given twice")
        params[name] = parse_value(text, declared[name].type if name in declared else None)
    try:
        result = rerun(args.chapter, params, outdir=args.outdir, html=args.html)
    except ChapterFailed as exc:
        print(f"pdcalc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    for path, note in ((result.notebook_path, f" ({result.seconds:.1f} s)"), (result.html_path, "")):
        if path is not None:
            shown = path.relative_to(Path.cwd().resolve()) if path.is_relative_to(Path.cwd().resolve()) else path
            print(f"wrote {shown}{note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdcalc", description="DeepSeek MoE deployment arithmetic, recomputed.")
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("params", help="parameter counts of a model (preset name or config.json path)")
    sp.add_argument("model")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_params)

    sc = sub.add_parser("claims", help="the articles' numbers, recomputed, with verdicts")
    sc.add_argument("--article", choices=["v4", "v3"])
    sc.add_argument("--verdict", choices=["match", "rounding", "erratum", "input", "pending"])
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_claims)

    sm = sub.add_parser("memory", help="per-card weights and what is left for the KV cache")
    sm.add_argument("model")
    sm.add_argument("--card", required=True)
    sm.add_argument("--ep", type=int, required=True, help="cards in the EP group")
    sm.add_argument("--tp", type=int, default=1)
    sm.add_argument("--quant", default="w8a8")
    sm.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=True,
                    help="load the MTP module (speculative decoding); default: yes")
    sm.add_argument("--redundant", type=int, default=0, help="redundant expert copies per EP group")
    sm.add_argument("--utilization", type=float, default=0.9, help="gpu-memory-utilization")
    sm.add_argument("--json", action="store_true")
    sm.set_defaults(func=cmd_memory)

    sk = sub.add_parser("kv", help="KV cache bytes per sequence as an engine stores it")
    sk.add_argument("model")
    sk.add_argument("--context", type=int, required=True, help="tokens in the cache")
    sk.add_argument("--engine", default="vllm-ascend", help="reference, vllm or vllm-ascend")
    sk.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=True, help="count the MTP layer's cache")
    sk.add_argument("--json", action="store_true")
    sk.set_defaults(func=cmd_kv)

    sl = sub.add_parser("list", help="model presets, card presets and quantization schemes")
    sl.add_argument("--json", action="store_true")
    sl.set_defaults(func=cmd_list)

    sr = sub.add_parser("rerun", help="execute a copy of a book chapter with other parameter values",
                        description="Execute a copy of a book chapter with other parameter values (papermill); "
                                    "parameters are checked before anything runs.")
    sr.add_argument("chapter", help="chapter name (per_card, kv_memory, ...) or path to a notebook")
    sr.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                    help="a new value (YAML: 16, 0.85, true, null, [4, 8]); repeatable")
    sr.add_argument("-o", "--outdir", default="pdcalc-runs",
                    help="output folder, never inside book/ (default: pdcalc-runs)")
    sr.add_argument("--html", action="store_true", help="also write a standalone HTML page (charts work offline)")
    sr.set_defaults(func=cmd_rerun)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except PdcalcError as exc:
        print(f"pdcalc: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0


if __name__ == "__main__":
    sys.exit(main())
