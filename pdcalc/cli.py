"""Command line: ``pdcalc params | claims | memory | kv | throughput | plan | predict | calibrate | validate |
list | rerun``. JSON output
is a stable contract.

Every flag is checked when it is parsed, by the same rules the package and chapter re-runs use
(:mod:`pdcalc.core.checks`). User errors (a bad flag, name, file or layout) exit with status 2 and one line on
stderr that names what was wrong and what is allowed; a deployment that does not fit is a result, not an
error. ``rerun`` exits with status 1 when a cell of the re-run chapter raises.

In every JSON result, ``model`` is the model as given on the command line (a preset name, or the path
to a ``config.json`` as typed) and ``card`` likewise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from pathlib import Path


from pdcalc.core import checks
from pdcalc.core.checks import BANDWIDTH_GB_S, LATENCY_MS, MAX_CARDS, MAX_SEQUENCES, MAX_TOKENS, RATE_PER_S
from pdcalc.core.errors import PdcalcError

#: KV cache layouts and formats the commands accept (pdcalc.model.kv_layout checks the pair for each model).
ENGINE_CHOICES = ("reference", "vllm", "vllm-ascend")
#: Serving engines whose served terms the planner may take (pdcalc.layout.served.SERVING_ENGINES).
SERVING_ENGINE_CHOICES = ("vllm", "vllm-ascend", "sglang", "trtllm", "mindie", "omni-infer")
KV_DTYPES = ("auto", "bf16", "fp8", "fp8_ds_mla")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit with status 2."""

    def error(self, message):
        message = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {message}\n")

    def add_argument(self, *args, **kw):
        """Every flag with help text that states its default (the common ones described once here)."""
        name = args[0] if args else kw.get("dest", "")
        if not kw.get("help"):
            kw["help"] = _COMMON_HELP.get(name, kw.get("help"))
        default = kw.get("default")
        if (kw.get("help") and default not in (None, False, argparse.SUPPRESS) and str(name).startswith("-")
                and "default" not in kw["help"]):
            shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
            kw["help"] = f"{kw['help']} (default: {shown})"
        return super().add_argument(*args, **kw)


#: Help text of the arguments several commands share.
_COMMON_HELP = {"--json": "print the result as JSON (a stable contract) instead of text",
                "model": "model preset (pdcalc list) or the path of a config.json",
                "--card": "card preset (pdcalc list) or the path of a hardware TOML file",
                "--article": "the article: v4 or v3 (default: both)", "--verdict": "only claims with this verdict"}


def _flag_type(check, **bounds):
    """An argparse ``type`` that parses a number and checks it with :mod:`pdcalc.core.checks`."""

    def parse(text: str):
        try:
            value = int(text) if check is checks.integer else float(text)
        except (ValueError, OverflowError):
            what = "an integer" if check is checks.integer else "a number"
            raise argparse.ArgumentTypeError(f"must be {what}, got {checks.show(text)}") from None
        try:
            return check("", value, **bounds)
        except checks.InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "integer" if check is checks.integer else "number"
    return parse


def _int(low=1, high=None):
    return _flag_type(checks.integer, low=low, high=high)


def _num(low=0.0, high=None, *, low_open=True):
    return _flag_type(checks.number, low=low, high=high, low_open=low_open)


_FRACTION = _num(0.0, 1.0)


def _name(text: str) -> str:
    """A preset name or a path: not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (a preset name, see `pdcalc list`, or a file path)")
    return text


def _clean(x):
    """``x`` made JSON-safe: numpy scalars as Python numbers, tuples as lists, NaN and infinities as null."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _sig(x: float, sig: int = 3) -> str:
    """``x`` to ``sig`` significant figures, with thousands separators."""
    from pdcalc.book.display import figure_text

    return figure_text(float(x), sig)


def _print_json(out, **kw) -> int:
    print(json.dumps(_clean(out), allow_nan=False, **kw))
    return 0


def cmd_params(args) -> int:
    from pdcalc.model.inventory import get_inventory

    inv = get_inventory(args.model)
    c = inv.counts()
    out = {
        "model": args.model, "name": inv.name, "source": inv.source, "total": c.total, "activated": c.activated, "mtp": c.mtp,
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
        return _print_json(out, indent=2)
    print(f"{inv.name}  ({inv.source})")
    print(f"  total (main, MTP excluded): {c.total:>20,}")
    print(f"  activated per token:        {c.activated:>20,}")
    print(f"  MTP module:                 {c.mtp:>20,}")
    for k, v in c.by_category.items():
        print(f"    {k:<24}{v:>20,}")
    return 0


def cmd_claims(args) -> int:
    from pdcalc.audit import claims
    from pdcalc.audit.registry import VERDICTS
    from pdcalc.book.display import figure_text, terminal_pad

    rows = claims.frame(args.article)
    if args.verdict:
        rows = rows[rows["verdict"] == args.verdict]
    if args.severity:
        rows = rows[rows["severity"].isin(args.severity)]
    if args.json:
        recs = []
        for r in rows.to_dict("records"):
            recs.append({k: _clean(r[k]) for k in (
                "id", "article", "section", "quantity", "printed", "article_value", "article_unit",
                "recomputed_value", "delta", "verdict", "severity", "severity_reason", "explanation", "method",
                "where", "kind", "same_as")})
        return _print_json(recs, ensure_ascii=False, indent=1)
    if rows.empty:
        print("no claims")
        return 0
    counts = rows["verdict"].value_counts()
    print("  ".join(f"{v}: {counts.get(v, 0)}" for v in VERDICTS))
    for r in rows.itertuples():
        unit = f" {r.article_unit}" if isinstance(r.article_unit, str) and r.article_unit not in ("", "count") else ""
        rec = "" if r.recomputed_value is None else f" -> {figure_text(r.recomputed_value)}{unit}"
        sev = f", {r.severity}" if r.severity else ""
        print(f"{r.id:<44} {r.section:<8} {terminal_pad(r.printed, 22)}{rec}  [{r.verdict}{sev}]")
    return 0



def cmd_memory(args) -> int:
    from pdcalc.core.units import GB, GiB
    from pdcalc.layout.memory import budget, card_weights, memory_report

    out = memory_report(args.model, args.card, quant=args.quant, ep=args.ep, tp=args.tp, mtp=args.mtp,
                        redundant=args.redundant, utilization=args.utilization, overhead_bytes=args.overhead_gb * GB,
                        max_num_batched_tokens=args.max_num_batched_tokens, context=args.context,
                        engine=args.engine, kv_dtype=args.kv_dtype)
    w = card_weights(args.model, args.quant, ep=args.ep, tp=args.tp, mtp=args.mtp, redundant=args.redundant)
    buffers, loaded = out["load_buffers_bytes"], out["loaded_bytes"]
    b = budget(args.card, loaded, utilization=args.utilization, overhead_bytes=args.overhead_gb * GB)
    if args.json:
        return _print_json(out, indent=2)
    layout = f"EP{w.ep} x TP{w.tp}" if w.ep else f"TP{w.tp}, no EP (every expert split over TP)"
    print(f"{w.model} on {b.card}, {w.scheme}, {layout}, MTP {'loaded' if w.mtp else 'not loaded'}")
    print(f"  routed experts per layer on the fullest card: {w.experts_per_card}"
          f"{'' if w.ep else f' (1/{w.tp} of each)'}")
    for k, v in w.by_category.items():
        print(f"    {k:<24}{v / GB:>10.3f} GB {v / GiB:>10.3f} GiB")
    print(f"  {'weights':<26}{w.total_bytes / GB:>10.3f} GB {w.total_bytes / GiB:>10.3f} GiB")
    if args.max_num_batched_tokens is not None:
        if buffers:
            for k, v in buffers.items():
                print(f"    + {k:<22}{v / GB:>10.3f} GB {v / GiB:>10.3f} GiB")
            print(f"  {'as the engine logs it':<26}{loaded / GB:>10.3f} GB {loaded / GiB:>10.3f} GiB")
        else:
            print("  (no load buffers are modelled for this model on this card's engine)")
    print(f"  {f'usable ({b.utilization} x visible)':<26}{b.usable_bytes / GB:>10.3f} GB {b.usable_bytes / GiB:>10.3f} GiB")
    print(f"  {'activations and framework':<26}{b.overhead_bytes / GB:>10.3f} GB {b.overhead_bytes / GiB:>10.3f} GiB")
    print(f"  {b.verdict()}")
    if "kv" in out:
        kv = out["kv"]
        print(f"  KV cache ({kv['engine']}, {kv['kv_cache_dtype']}): {kv['bytes_per_sequence'] / GiB:.3f} GiB per "
              f"sequence of {kv['context_tokens']:,} tokens; {kv['sequences_that_fit']:,} such sequences fit")
    return 0


def cmd_kv(args) -> int:
    from pdcalc.model.kv_cache import kv_bytes
    from pdcalc.model.kv_layout import default_engine

    engine = args.engine or (default_engine(args.card) if args.card else "vllm-ascend")
    r = kv_bytes(args.model, args.context, engine, include_mtp=args.mtp, kv_cache_dtype=args.kv_dtype)
    out = {
        "model": args.model, "engine": r.engine, "kv_cache_dtype": args.kv_dtype or "auto",
        "context_tokens": int(r.context_tokens), "include_mtp": r.include_mtp,
        "block_size": r.block_size, "fixed_bytes": float(r.fixed_bytes),
        "per_token_bytes_asymptotic": float(r.per_token_bytes_asymptotic), "total_bytes": float(r.total_bytes),
        "per_token_bytes_average": float(r.per_token_bytes_average),
        "by_layer_kind_bytes": {k: float(v) for k, v in r.by_layer_kind.items()},
        "by_cache_bytes": {k: float(v) for k, v in r.by_cache.items()},
    }
    if args.json:
        return _print_json(out, indent=2)
    print(f"{r.model}, {r.engine}, {out['context_tokens']:,} tokens, MTP {'included' if r.include_mtp else 'excluded'}")
    print(f"  per sequence:        {out['total_bytes']:>16,.0f} B")
    print(f"  fixed part:          {out['fixed_bytes']:>16,.0f} B")
    print(f"  per token (slope):   {out['per_token_bytes_asymptotic']:>16,.1f} B")
    print(f"  per token (average): {out['per_token_bytes_average']:>16,.1f} B")
    return 0


def cmd_throughput(args) -> int:
    from pdcalc.core.units import GiB
    from pdcalc.layout.memory import budget, card_weights
    from pdcalc.model.kv_cache import kv_bytes
    from pdcalc.model.kv_layout import default_engine
    from pdcalc.perf import step as tput
    from pdcalc.perf.traffic import kv_step_kwargs

    if args.kernels_only and args.costs != "published":
        from pdcalc.core.checks import InputError

        raise InputError("--kernels-only", "applies to --costs published only (the roofline has no profiled step)")
    engine = args.engine or default_engine(args.card)
    kv = kv_step_kwargs(args.model, engine, args.kv_dtype)   # refuses a format the engine does not store
    seq = kv_bytes(args.model, args.context, engine, include_mtp=args.mtp, kv_cache_dtype=args.kv_dtype)
    w = card_weights(args.model, args.quant, ep=args.ep, tp=args.tp, mtp=args.mtp)
    per_card_kv = float(seq.total_bytes) * args.concurrency / args.dp      # a rank's sequences, whole on each TP card
    b = budget(args.card, w.total_bytes + per_card_kv, utilization=args.utilization)
    terms = None
    if args.costs == "served":
        from pdcalc.layout.served import SERVING_ENGINES  # noqa: F401  (the engines the terms are fitted for)
        from pdcalc.reality.predict import family_of, stored_terms, vendor_of

        terms = stored_terms((vendor_of(args.card), "vllm-ascend" if vendor_of(args.card) == "ascend" else "vllm",
                              family_of(args.model)))
    out = {"model": args.model, "card": args.card, "quant": args.quant, "tp": args.tp, "dp": args.dp,
           "ep": args.ep, "context": args.context, "concurrency": args.concurrency, "costs": args.costs,
           "kernels_only": args.kernels_only, "mtp": args.mtp,
           "kv": {"engine": engine, "kv_cache_dtype": args.kv_dtype or "auto",
                  "bytes_per_sequence": float(seq.total_bytes)},
           "efficiencies": {"mfu": args.mfu, "mbu": args.mbu, "comm_eff": args.comm_eff, "overlap": args.overlap},
           "served_terms": None if terms is None else terms.as_dict(),
           "memory": {"weights_bytes": w.total_bytes, "kv_cache_bytes": per_card_kv, "usable_bytes": b.usable_bytes,
                      "fits": b.fits, "verdict": b.verdict(),
                      "rule": "weights (MTP draft as given) + the KV cache of a rank's sequences <= utilization x "
                              "the memory the card exposes: the rule of pdcalc memory"},
           "phases": {}}
    costs = "published" if args.costs == "served" else args.costs
    for phase in ("prefill", "decode"):
        st = tput.step(args.model, args.card, tp=args.tp, dp=args.dp, ep=args.ep, context=args.context,
                       concurrency=args.concurrency, phase=phase, quant=args.quant, mfu=args.mfu, mbu=args.mbu,
                       comm_eff=args.comm_eff, overlap=args.overlap, costs=costs,
                       beyond=not args.kernels_only, **kv)
        step_s, tokens_s = float(st.time_s), float(st.tokens_per_s)
        if terms is not None:
            k = terms.k_decode if phase == "decode" else terms.k_prefill
            step_s = k * step_s + terms.host_for(args.dp)
            tokens_s = float(st.tokens_per_s) * float(st.time_s) / step_s
        out["phases"][phase] = {
            "step_s": step_s, "tokens_per_s": tokens_s, "tokens_per_s_per_card": tokens_s / (args.tp * args.dp),
            "bound": str(st.bound), "kernels_s": float(st.time_s),
            "compute_s": float(st.compute_s), "memory_s": float(st.memory_s), "comm_s": float(st.comm_s),
            "beyond_kernels": (tput.beyond_kernels(phase)[0] if costs == "published" and not args.kernels_only
                               else 1.0)}
    if args.json:
        return _print_json(out, indent=2)
    print(f"{out['model']} on {args.tp * args.dp} x {out['card']} (TP{args.tp} x DP{args.dp}"
          f"{f', EP{args.ep}' if args.ep else ''}), {args.quant}, context {args.context}, "
          f"concurrency {args.concurrency}")
    if terms is not None:
        print(f"  step model: served (published kernels x {terms.k_decode:.3g} decode, x {terms.k_prefill:.3g} "
              f"prefill, + {terms.host_text()}; {terms.label})")
    for phase, r in out["phases"].items():
        what = "prompts" if phase == "prefill" else "sequences, one token each"
        print(f"  {phase:<8} step {r['step_s'] * 1e3:9.2f} ms  {r['tokens_per_s']:>12,.0f} tokens/s "
              f"({r['tokens_per_s_per_card']:,.0f} per card)  kernels bound by {r['bound']}  [{what}]")
    print(f"  weights {w.total_bytes / GiB:.2f} GiB + KV {per_card_kv / GiB:.2f} GiB per card against "
          f"{b.usable_bytes / GiB:.2f} GiB usable ({args.utilization} x visible): {b.verdict()}")
    return 0


def cmd_plan(args) -> int:
    from pdcalc.plan.labels import SPLIT_KEYS
    from pdcalc.plan.search import plan
    from pdcalc.plan.workload import Setup, Workload

    def tps(values):
        return None if values is None else tuple(dict.fromkeys(values))

    own = None
    if args.calibration:
        from pdcalc.core.checks import InputError
        from pdcalc.reality.predict import load_calibration

        if args.costs != "served":
            raise InputError("--calibration", "applies to --costs served only")
        own = load_calibration(args.calibration)

    setup = Setup(model=args.model, quant=args.quant, card=args.card, cards=args.cards, mtp=args.mtp,
                  engine=args.engine, kv_cache_dtype=args.kv_dtype, utilization=args.utilization,
                  bandwidth_bytes_per_s=args.bandwidth_gb_s * 1e9, tp_options=tps(args.tp),
                  p_tp_options=tps(args.p_tp), d_tp_options=tps(args.d_tp), frontier_points=args.frontier_points,
                  costs=args.costs, serving_engine=args.serving_engine, draft_tokens=args.draft_tokens,
                  dataset=args.dataset, served_terms=own)
    work = Workload(prompt_tokens=args.prompt, output_tokens=args.output, rate_per_s=args.rate,
                    concurrency=args.concurrency, ttft_s=args.ttft_ms and args.ttft_ms / 1e3,
                    tpot_s=args.tpot_ms and args.tpot_ms / 1e3)
    p = plan(setup, work)
    moves = None
    if own is not None:                       # the same plan at the corpus's terms, to show what yours change
        from dataclasses import replace

        from pdcalc.plan.search import calibration_moves

        moves = calibration_moves(p, plan(replace(setup, served_terms=None, frontier_points=0), work))
    keys = [*SPLIT_KEYS, "cards", "concurrency", "kv_capacity_seqs", "prefill_load", "ttft_s", "tpot_s", "output_tokens_per_s", "tokens_per_s_per_card",
            "binding"]
    keys += [c for c in p.ranked.columns if c.endswith(("_low", "_high"))]
    rows = [{k: _clean(v) for k, v in r.items()}
            for r in p.ranked[keys].head(args.top).to_dict("records")]
    from pdcalc.plan.objectives import answer_lines, out_of_reach_dict
    from pdcalc.plan.objectives import answers as objective_answers

    goals = objective_answers(p)
    out = {"model": args.model, "card": args.card, "cards": args.cards, "costs": args.costs,
           "objectives": {k: (None if a is None else a.as_dict()) for k, a in goals.items()},
           "ttft_out_of_reach": out_of_reach_dict(p),
           "served_terms": setup.terms.as_dict() if args.costs == "served" else None,
           "ranges": ("80 %: the 10th to 90th percentile of held-out errors of the served model's class"
                      if args.costs == "served" else
                      "none: the roofline is the hardware's bound" if args.costs == "roofline" else
                      "none: the published kernel costs alone"),
           "splits": p.splits,
           "evaluated": p.evaluated, "feasible": len(p.ranked), "result": p.reason or "fits", "ranked": rows,
           "evaluated_means": "for each P layout, D layout and number of D instances, the fewest P instances that "
                              "meet the prefill load limit and the TTFT target (more are dominated)",
           "aggregated_evaluated": p.aggregated_evaluated,
           "aggregated_feasible": 0 if p.aggregated_ranked is None else len(p.aggregated_ranked),
           **p.answer()}
    if moves is not None:
        out["calibration_moves"] = moves
    if args.json:
        return _print_json(out, indent=2)
    t = p.targets
    print(f"{out['model']} on {args.cards} x {out['card']}: {out['splits']:,} P/D splits, {out['evaluated']:,} "
          f"evaluated (the fewest P instances for each D side), {out['feasible']:,} feasible; "
          f"{out['aggregated_evaluated']:,} co-located options, {out['aggregated_feasible']:,} feasible")
    for k in ("TPOT", "TTFT"):
        print(f"  {k} target: {t.stated(k)} ({t.short_source(k)}{'; the source in --json' if t.short_source(k) != 'given' else ''})")
    for line in answer_lines(p):
        print(f"  {line}")
    print(f"  {p.why}")
    if args.costs == "served":
        tm = setup.terms
        print(f"  step model: served (decode kernels x {tm.k_decode:.3g}, prefill x {tm.k_prefill:.3g}, host "
              f"{tm.host_text()}, {tm.request_text()}; {tm.label}); ranges: 80 % of held-out errors")
    else:
        print(f"  step model: {'the roofline, the hardware bound' if args.costs == 'roofline' else 'published kernel costs alone'}"
              f" (no range)")
    if not p.reason:
        ranged = "tpot_s_low" in p.ranked.columns
        print(f"  {'P':>9} {'D':>9} {'TP P/D':>7} {'cards':>5} {'TTFT ms':>9} {'TPOT ms':>8}{' (likely)':>16} "
              f"{'tok/s':>10} {'tok/s/card':>10}  binds")
        for r in rows:
            likely = f"{r['tpot_s_low'] * 1e3:>7.1f}-{r['tpot_s_high'] * 1e3:<7.1f}" if ranged else " " * 15
            tps = f"{r['p_tp']}/{r['d_tp']}"
            print(f"  {r['p_instances']:>3} x {r['p_size']:<3}{r['d_instances']:>3} x {r['d_size']:<3}{tps:>7} {r['cards']:>5} "
                  f"{r['ttft_s'] * 1e3:>9.1f} {r['tpot_s'] * 1e3:>8.2f} {likely} {r['output_tokens_per_s']:>10,.0f} "
                  f"{r['tokens_per_s_per_card']:>10,.1f}  {r['binding']}")
    else:
        print(f"  disaggregated: {p.reason}")
    a = out["aggregated"]
    if a.get("option") and a.get("meets_targets"):
        print(f"  co-located: {a['option']} on {a['cards']:,} cards, TTFT {a['ttft_s'] * 1e3:,.1f} ms, TPOT "
              f"{a['tpot_s'] * 1e3:,.2f} ms, {a['tokens_per_s_per_card']:,.1f} tok/s/card, chunk "
              f"{a['chunk_tokens']:,.0f} tokens, prompts {a['prefill_share']:.0%} of each step, binds {a['binding']}")
    else:
        print(f"  co-located: {a['result']}")
    if moves is not None:
        for line in _moves_lines(moves):
            print(f"  {line}")
    return 0


def _moves_lines(moves: dict) -> list[str]:
    """What a calibration changes in a plan, in words (``pdcalc plan --calibration``)."""
    lines = []
    for mode, name in (("disaggregated", "P/D answer"), ("aggregated", "co-located answer")):
        m = moves[mode]
        if not m["option"]:
            continue
        same = "the same" if m["option"] == m["corpus_option"] else m["corpus_option"] or "none"
        moved = [f"{k} {m[key]:+.0f} %" for k, key in (("TTFT", "ttft_moves_pct"), ("TPOT", "tpot_moves_pct"),
                                                       ("output", "output_moves_pct")) if m[key] is not None]
        figs = (f"; on that layout your calibration moves {', '.join(moved)}" if moved
                else "; the corpus's plan takes that split with another number of P instances")
        lines.append(f"{name} with your calibration: {m['option']} (with the corpus's terms: {same}){figs}")
    w = moves["winner"]
    lines.append(f"winner with your calibration: {w['calibrated']} (with the corpus's terms: {w['corpus']})")
    return lines


def cmd_list(args) -> int:
    from pdcalc.hardware.cards import card_names, get_card
    from pdcalc.model.config import MODEL_NAMES
    from pdcalc.model.inventory import get_inventory
    from pdcalc.model.quant import SCHEMES

    out = {
        "models": {m: get_inventory(m).source for m in MODEL_NAMES},
        "cards": {c: get_card(c).label for c in card_names()},
        "quantization": {k: s.description for k, s in SCHEMES.items()},
    }
    if args.json:
        return _print_json(out, indent=2, ensure_ascii=False)
    for kind, items in out.items():
        print(f"{kind}:")
        for k, v in items.items():
            print(f"  {k:<28} {textwrap.shorten(v, 100, placeholder=' ...')}")
    return 0


def cmd_rerun(args) -> int:
    from pdcalc.book.parameters import ParameterError, chapter_parameters, parse_value
    from pdcalc.book.rerun import ChapterFailed, rerun

    declared = chapter_parameters(args.chapter)
    params: dict = {}
    for name, text in args.parameter or []:
        if name in params:
            raise ParameterError(f"parameter {name!r} given twice")
        params[name] = parse_value(text, declared[name].type if name in declared else None, name=name)
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


def _spec(path):
    from pdcalc.layout.served import load_spec

    return load_spec(path)


def _ranged_text(r, unit: str, scale: float = 1.0) -> str:
    return (f"{_sig(r.value * scale)} {unit} (likely {_sig(r.low * scale)} to {_sig(r.high * scale)})").replace(
        "  ", " ")


def cmd_predict(args) -> int:
    from pdcalc.reality.predict import load_calibration, predict

    spec = _spec(args.spec)
    own = load_calibration(args.calibration) if args.calibration else None
    p = predict(spec, terms=own)
    out = {"spec": args.spec, **p.as_dict()}
    if own is not None and p.fits:
        corpus = predict(spec)
        out["corpus"] = {k: getattr(corpus, k).as_dict() for k in ("output_tokens_per_s", "tpot_ms", "ttft_ms")}
        out["calibration_moves_pct"] = {k: 100 * (getattr(p, k).value / getattr(corpus, k).value - 1)
                                        for k in ("output_tokens_per_s", "tpot_ms", "ttft_ms")}
    if args.json:
        return _print_json(out, indent=2)
    print(spec.describe())
    if not p.fits:
        from pdcalc.perf.served import sizes_sglang_v4_pool
        held = ("weights, runtime and SGLang's KV reserve for its request slots" if sizes_sglang_v4_pool(spec)
                else "weights and runtime")
        print(f"  does not fit: a card is short by {p.short_gib:.2f} GiB ({held} under the memory cap)")
        return 0
    print(f"  output        {_ranged_text(p.output_tokens_per_s, 'tokens/s')}; per card "
          f"{_ranged_text(p.output_tokens_per_s_per_card, 'tokens/s')}")
    print(f"  TPOT          {_ranged_text(p.tpot_ms, 'ms')}")
    print(f"  TTFT          {_ranged_text(p.ttft_ms, 's', 1e-3) if p.ttft_ms.value >= 1e4 else _ranged_text(p.ttft_ms, 'ms')}")
    print(f"  binds: {p.binds}; ranges: 80 % of held-out errors ({p.tpot_ms.range_from})")
    print(f"  the hardware's bound (published kernels, no host or request time): {_sig(p.bound_output_tokens_per_s)} "
          f"tokens/s, TPOT {_sig(p.bound_tpot_ms)} ms")
    print(f"  terms: decode kernels x {p.terms.k_decode:.3g}, prefill x {p.terms.k_prefill:.3g}, host "
          f"{p.terms.host_text()}, {p.terms.request_text()} ({p.terms.label})")
    if "calibration_moves_pct" in out:
        mv = out["calibration_moves_pct"]
        print(f"  your calibration moves the corpus prediction: output {mv['output_tokens_per_s']:+.0f} %, "
              f"TPOT {mv['tpot_ms']:+.0f} %, TTFT {mv['ttft_ms']:+.0f} %")
    return 0


def cmd_calibrate(args) -> int:
    from pdcalc.core.errors import ConfigError
    from pdcalc.reality.own_run import calibration_file, calibrate_run, other_loads, result_metrics
    from pdcalc.reality.predict import class_of, stored_terms
    from pdcalc.reality.results import read_result

    spec = _spec(args.spec)
    res = read_result(args.result, client=args.client, run=args.run)
    measured = result_metrics(res, spec, args.result)
    if not measured:
        raise ConfigError(args.result, "metrics", "no output throughput, mean TPOT or mean TTFT in the file")
    prior = stored_terms(class_of(spec))
    c = calibrate_run(spec, measured, prior, label=args.result)
    text = calibration_file(c, spec_path=args.spec, result_path=args.result)
    out_path = Path(args.output)
    if out_path.resolve().is_relative_to(Path("book").resolve()):
        raise ConfigError(args.output, "-o", "write the calibration outside book/")
    out_path.write_text(text)
    moves = other_loads(spec, prior, c.terms)
    terms = {k: v for k, v in c.terms.as_dict().items() if k != "from"}
    out = {"output": args.output, "terms": terms, "corpus_terms": prior.as_dict(),
           "measured": c.measured, "before": {k: c.before[k] for k in c.measured},
           "after": {k: c.after[k] for k in c.measured}, "other_loads": moves}
    if args.json:
        return _print_json(out, indent=2)
    print(f"{args.output}: decode kernels x {c.terms.k_decode:.3g}, prefill x {c.terms.k_prefill:.3g}, host "
          f"{c.terms.host_text()}, {c.terms.request_text()} (corpus: x {prior.k_decode:.3g}, x {prior.k_prefill:.3g}, "
          f"{prior.host_text()}, {prior.request_text()})")
    names = {"output_tokens_per_s": ("output", "tokens/s", 1.0), "tpot_s": ("TPOT", "ms", 1e3),
             "ttft_s": ("TTFT", "ms", 1e3)}
    for k, v in c.measured.items():
        n, unit, f = names[k]
        print(f"  {n:<7} measured {_sig(v * f)} {unit}; predicted {_sig(c.before[k] * f)} with the corpus's terms, "
              f"{_sig(c.after[k] * f)} with yours")
    print("  how far it moves this deployment's predictions at other loads (output tokens/s, TPOT):")
    for m in moves:
        print(f"    {m['load']:<24} output {m['output_moves_pct']:+.0f} %, TPOT {m['tpot_moves_pct']:+.0f} %")
    print(f"  use it: pdcalc predict SPEC.toml --calibration {args.output}")
    return 0


def cmd_validate(args) -> int:
    from pdcalc.book.report import served_validation

    report = served_validation()
    if args.json:
        return _print_json(report["json"], indent=2)
    print("\n".join(report["lines"]))
    return 0


def _add_params(sub) -> None:
    sp = sub.add_parser("params", help="parameter counts of a model (preset name or config.json path)")
    sp.add_argument("model", type=_name)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_params)


def _add_claims(sub) -> None:
    from pdcalc.audit.registry import SEVERITIES, VERDICTS

    sc = sub.add_parser("claims", help="the articles' numbers, recomputed, with verdicts")
    sc.add_argument("--article", choices=["v4", "v3"])
    sc.add_argument("--verdict", choices=list(VERDICTS))
    sc.add_argument("--severity", action="append", choices=list(SEVERITIES),
                    help="keep the errata of this severity (repeat the flag for several)")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_claims)


def _add_memory(sub) -> None:
    from pdcalc.core.units import GB
    from pdcalc.layout.memory import D_OVERHEAD_BYTES

    sm = sub.add_parser("memory", help="per-card weights and what is left for the KV cache")
    sm.add_argument("model", type=_name)
    sm.add_argument("--card", required=True, type=_name)
    sm.add_argument("--ep", type=_int(1, MAX_CARDS), default=None,
                    help="cards in the EP group (default: no expert parallelism, experts split over TP)")
    sm.add_argument("--tp", type=_int(1, MAX_CARDS), default=1, help="TP degree (must divide the attention heads)")
    sm.add_argument("--quant", default=None,
                    help="quantization scheme (pdcalc list); default: the official release on NVIDIA cards, "
                         "the W8A8 checkpoint on Ascend (w8a8-msmodelslim for DeepSeek-V4, w8a8 otherwise)")
    sm.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=True,
                    help="load the MTP module (speculative decoding); default: yes")
    sm.add_argument("--redundant", type=_int(0, MAX_CARDS), default=0, help="redundant expert copies per EP group")
    sm.add_argument("--utilization", type=_FRACTION, default=0.9, help="gpu-memory-utilization")
    sm.add_argument("--overhead-gb", type=_num(0.0, 1e4, low_open=False), default=D_OVERHEAD_BYTES / GB,
                    help=f"activations and framework per card, GB (default: {D_OVERHEAD_BYTES / GB:g}, the V4 "
                         "article's D card, as the planner and the book count it)")
    sm.add_argument("--context", type=_int(1, MAX_TOKENS), default=None,
                    help="also say how many sequences of this many tokens the KV room holds")
    sm.add_argument("--max-num-batched-tokens", type=_int(1, MAX_TOKENS), default=None,
                    help="add the buffers the engine builds with the model at this scheduler setting, which "
                         "vllm-ascend counts in the weights it logs (DeepSeek-V4; pdcalc.layout.memory.load_buffers)")
    sm.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                    help="KV layout for --context (default: the card's family: vllm on NVIDIA, vllm-ascend on Ascend)")
    sm.add_argument("--kv-dtype", choices=KV_DTYPES, default=None, help="KV cache format (default: the engine's)")
    sm.add_argument("--json", action="store_true")
    sm.set_defaults(func=cmd_memory)


def _add_kv(sub) -> None:
    sk = sub.add_parser("kv", help="KV cache bytes per sequence as an engine stores it")
    sk.add_argument("model", type=_name)
    sk.add_argument("--context", type=_int(1, MAX_TOKENS), required=True, help="tokens in the cache")
    sk.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                    help="KV layout (default: the --card's family's engine, else vllm-ascend)")
    sk.add_argument("--card", type=_name, default=None, help="card whose family picks the engine")
    sk.add_argument("--kv-dtype", choices=KV_DTYPES, default=None, help="KV cache format (default: the engine's)")
    sk.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=True, help="count the MTP layer's cache")
    sk.add_argument("--json", action="store_true")
    sk.set_defaults(func=cmd_kv)


def _add_throughput(sub) -> None:
    st = sub.add_parser("throughput", help="prefill and decode step time and tokens/s of a TP x DP (x EP) layout")
    st.add_argument("model", type=_name)
    st.add_argument("--card", required=True, type=_name)
    st.add_argument("--tp", type=_int(1, MAX_CARDS), required=True, help="TP degree (must divide the attention heads)")
    st.add_argument("--dp", type=_int(1, MAX_CARDS), required=True, help="DP ranks")
    st.add_argument("--ep", type=_int(1, MAX_CARDS), default=None, help="EP group in cards (default: no expert parallelism)")
    st.add_argument("--context", type=_int(1, MAX_TOKENS), required=True, help="prompt length (prefill) and KV length (decode)")
    st.add_argument("--concurrency", type=_int(1, MAX_SEQUENCES), required=True, help="prompts (prefill) and sequences (decode) per step")
    st.add_argument("--quant", default=None,
                    help="quantization scheme (pdcalc list); default: the official release on NVIDIA cards, "
                         "the W8A8 checkpoint on Ascend (w8a8-msmodelslim for DeepSeek-V4, w8a8 otherwise)")
    st.add_argument("--mfu", type=_FRACTION, default=0.5, help="share of peak FLOP/s reached (assumption)")
    st.add_argument("--mbu", type=_FRACTION, default=0.7, help="share of HBM bandwidth reached (assumption)")
    st.add_argument("--comm-eff", type=_FRACTION, default=0.7, help="share of link bandwidth reached (assumption)")
    st.add_argument("--overlap", action="store_true", help="communication hidden under compute")
    st.add_argument("--costs", choices=("served", "published", "roofline"), default="served",
                    help="served: the published kernel costs times the served corpus's terms for the card's vendor "
                         "and engine, plus host time per step (the default); published: the kernel costs alone "
                         "(pdcalc/data/costs.toml), the prefill step scaled as DeepSeek's profiled prefill step is to "
                         "its kernel sum; roofline: the flat efficiencies above, the hardware's bound")
    st.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=True,
                    help="MTP draft loaded (its weights and cache count, as in pdcalc memory)")
    st.add_argument("--utilization", type=_FRACTION, default=0.9, help="gpu-memory-utilization")
    st.add_argument("--kernels-only", action="store_true",
                    help="with --costs published: the kernel sum alone, not scaled by DeepSeek's profiled step")
    st.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                    help="KV layout (default: the card's family: vllm on NVIDIA, vllm-ascend on Ascend)")
    st.add_argument("--kv-dtype", choices=KV_DTYPES, default=None, help="KV cache format (default: the engine's)")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_throughput)


def _add_plan(sub) -> None:
    spl = sub.add_parser("plan", help="rank every P/D split of a cluster for a workload, against co-located "
                                      "instances on the same cards")
    spl.add_argument("--model", default="deepseek-v4-flash", type=_name,
                     help="model preset (pdcalc list) or a config.json (default: deepseek-v4-flash)")
    spl.add_argument("--card", required=True, type=_name)
    spl.add_argument("--cards", type=_int(2, MAX_CARDS), required=True, help="cluster size")
    spl.add_argument("--prompt", type=_int(1, MAX_TOKENS), required=True, help="prompt tokens per request")
    spl.add_argument("--output", type=_int(1, MAX_TOKENS), required=True, help="output tokens per request")
    load = spl.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=_num(*RATE_PER_S, low_open=False), help="requests per second")
    load.add_argument("--concurrency", type=_int(1, MAX_SEQUENCES), help="sequences decoding at once")
    spl.add_argument("--ttft-ms", type=_num(*LATENCY_MS, low_open=False), default=None, help="target time to first token (default: the published service level)")
    spl.add_argument("--tpot-ms", type=_num(*LATENCY_MS, low_open=False), default=None, help="target time per output token (default: the published service level)")
    spl.add_argument("--quant", default=None,
                    help="quantization scheme (pdcalc list); default: the official release on NVIDIA cards, "
                         "the W8A8 checkpoint on Ascend (w8a8-msmodelslim for DeepSeek-V4, w8a8 otherwise)")
    spl.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                     help="KV layout (default: the card's family: vllm on NVIDIA, vllm-ascend on Ascend)")
    spl.add_argument("--kv-dtype", choices=KV_DTYPES, default=None, help="KV cache format (default: the engine's)")
    spl.add_argument("--costs", choices=("served", "published", "roofline"), default="served",
                     help="step time: the served model (published kernel costs x the served corpus's terms, with "
                          "80 %% ranges; the default), the published kernel costs alone, or the roofline with flat "
                          "efficiencies (the hardware's bound)")
    spl.add_argument("--calibration", help="a calibration file from `pdcalc calibrate` (served model)")
    spl.add_argument("--serving-engine", choices=tuple(SERVING_ENGINE_CHOICES), default=None,
                     help="the engine whose served terms apply (default: vllm-ascend on Ascend, vllm elsewhere)")
    spl.add_argument("--draft-tokens", type=_int(0, 16), default=0, help="MTP draft tokens per decode step")
    spl.add_argument("--dataset", default="random", help="what the prompts are (MTP acceptance depends on it)")
    spl.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=True, help="MTP module loaded")
    spl.add_argument("--utilization", type=_FRACTION, default=0.9, help="gpu-memory-utilization")
    spl.add_argument("--bandwidth-gb-s", type=_num(*BANDWIDTH_GB_S, low_open=False), default=18.0, help="P -> D bandwidth per request, GB/s")
    spl.add_argument("--tp", type=_int(1, MAX_CARDS), nargs="+", default=[1], help="TP degrees to try (repeats ignored)")
    spl.add_argument("--p-tp", type=_int(1, MAX_CARDS), nargs="+", default=None,
                     help="TP degrees to try on the P side (repeats ignored; default: --tp)")
    spl.add_argument("--d-tp", type=_int(1, MAX_CARDS), nargs="+", default=None,
                     help="TP degrees to try on the D side (repeats ignored; default: --tp)")
    spl.add_argument("--frontier-points", type=_int(0, 256), default=16,
                     help="concurrency levels of the throughput-latency frontier (0: none)")
    spl.add_argument("--top", type=_int(1, MAX_CARDS), default=10, help="how many ranked plans to print")
    spl.add_argument("--json", action="store_true")
    spl.set_defaults(func=cmd_plan)


def _add_list(sub) -> None:
    sl = sub.add_parser("list", help="model presets, card presets and quantization schemes")
    sl.add_argument("--json", action="store_true")
    sl.set_defaults(func=cmd_list)


def _add_rerun(sub) -> None:
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


def _add_served(sub) -> None:
    sp = sub.add_parser("predict", help="what a benchmark client will report for a served deployment (SPEC.toml), "
                                        "with its likely range")
    sp.add_argument("spec", help="a served deployment spec (TOML: model, card, engine, roles, workload)")
    sp.add_argument("--calibration", help="a calibration file from `pdcalc calibrate` (else the served corpus's)")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_predict)
    sc = sub.add_parser("calibrate", help="fit the served terms to your own benchmark result")
    sc.add_argument("result", help="a benchmark client's result file (vllm bench serve --save-result JSON, "
                                   "SGLang bench_serving JSONL, AISBench)")
    sc.add_argument("--spec", required=True, help="the served deployment spec that produced it")
    sc.add_argument("-o", "--output", required=True, help="the calibration file to write (TOML)")
    sc.add_argument("--client", choices=("vllm", "sglang", "aisbench"), help="the client (default: detected)")
    sc.add_argument("--run", type=_int(0), help="which run of a JSONL file, 0-based (default: the only one)")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_calibrate)
    sv = sub.add_parser("validate", help="every served-corpus run predicted out of sample, and the held-out errors")
    sv.add_argument("--json", action="store_true")
    sv.set_defaults(func=cmd_validate)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pdcalc", description="DeepSeek MoE deployment arithmetic, recomputed.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_params, _add_claims, _add_memory, _add_kv, _add_throughput, _add_plan, _add_served,
                _add_list, _add_rerun):
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "quant", "") is None:
            from pdcalc.model.quant import default_scheme, default_scheme_on

            card = getattr(args, "card", None)
            args.quant = default_scheme_on(args.model, card) if card is not None else default_scheme(args.model)
        if getattr(args, "model", None) is not None and getattr(args, "quant", None):
            from pdcalc.model.quant import refuse_v4_recipe
            refuse_v4_recipe(args.model, args.quant, flag="--quant ")
        return args.func(args)
    except PdcalcError as exc:
        return _fail(exc)
    except RecursionError:  # a structure nested too deep for any check to name it
        return _fail("an input is nested too deeply")
    except MemoryError:
        return _fail("an input is too large to hold in memory")
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt:
        print("pdcalc: interrupted", file=sys.stderr)
        return 130


def _fail(exc) -> int:
    """One line on stderr, exit status 2."""
    print(f"pdcalc: error: {' '.join(str(exc).split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
