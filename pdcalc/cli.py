"""Command line: ``pdcalc params | claims | list``. JSON output is a stable contract.

User errors (unknown names, bad files, impossible layouts) exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

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

    sl = sub.add_parser("list", help="model presets, card presets and quantization schemes")
    sl.add_argument("--json", action="store_true")
    sl.set_defaults(func=cmd_list)
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
