"""The V3 article's tables rebuilt from the registry: every printed number beside its recomputation,
with a verdict per row; lost tables reconstructed from the prose and marked so.
"""

from __future__ import annotations

import math
from functools import cache

import pandas as pd

from pdcalc.audit.registry import evaluate as _evaluate_claims
from pdcalc.audit.registry import printed_bound, printed_decimals
from pdcalc.audit.v3_article import SECTIONS
from pdcalc.audit.v3_common import MS, PCT, TFLOPS, V3, P, v3_config
from pdcalc.audit.v3_kv import article_mla_kv_bytes_per_token, article_trad_kv_bytes_per_token, tokens_128k
from pdcalc.audit.v3_memory import CARD_TERMS, per_card_all_weights_gib
from pdcalc.audit.v3_tp import (ar_payload_bytes, article_throughput, comm_share, full_weight_gib, layer_compute_ms,
                                matched_comm_share)
from pdcalc.core.units import BYTE_UNITS, GB, MB, GiB, MiB, TiB, dtype_bytes
from pdcalc.hardware.cards import get_card
from pdcalc.model.kv_cache import mla_bytes_per_token

_RANK = ("input", "match", "rounding", "erratum")
NOT_PRINTED = "not printed"
TP_DEGREES = (4, 8, 16)


@cache
def v3_claims() -> dict:
    return {c.id: c for c in _evaluate_claims("v3")}


def recomputed_value(cid: str) -> float:
    """The registered recomputation of claim ``cid``; for an input without one, its printed value."""
    c = v3_claims()[cid]
    return float(P(cid) if c.recomputed is None else c.recomputed)


def verdict_of(cid: str) -> str:
    """The registry's verdict on claim ``cid``."""
    return v3_claims()[cid].verdict


class _Rows:
    """Rows of a rebuilt table; every printed number records the claim it comes from."""

    def __init__(self, *, wide: bool):
        self.wide = wide
        self.labels: list = []
        self.rows: list[dict] = []
        self.ids: list[list[str]] = []
        self.cells: list[tuple] = []

    def new(self, label, unit: str | None = None):
        self.labels.append(label)
        self.rows.append({} if unit is None else {"unit": unit})
        self.ids.append([])

    def _key(self, quantity, which):
        return (quantity, which) if self.wide else which

    def pair(self, cid: str | None, quantity: str | None = None, *, recomputed: float | None = None):
        """The printed value of ``cid`` beside its recomputation; without a claim the article column is
        empty and ``recomputed`` is the value computed from the article's inputs."""
        a, r = self._key(quantity, "article"), self._key(quantity, "recomputed")
        row = self.rows[-1]
        if cid is None:
            row[a], row[r] = math.nan, float(recomputed)
            return
        row[a], row[r] = float(P(cid)), recomputed_value(cid)
        self.ids[-1].append(cid)
        self.cells.append((self.labels[-1], a, r, cid))

    def printed(self, cid: str | None, column):
        """Only the printed value of ``cid`` (an input) under ``column`` (empty without a claim)."""
        self.rows[-1][column] = math.nan if cid is None else float(P(cid))
        if cid is not None:
            self.ids[-1].append(cid)
            self.cells.append((self.labels[-1], column, None, cid))

    def set(self, column, value):
        self.rows[-1][(column, "") if self.wide and not isinstance(column, tuple) else column] = value

    def frame(self, index, *, section: str, title: str, kind: str = "printed", source: str = "",
              table_id: str) -> pd.DataFrame:
        vkey = ("verdict", "") if self.wide else "verdict"
        for row, ids in zip(self.rows, self.ids):
            if kind != "consistent":
                row[vkey] = max((verdict_of(i) for i in ids), key=_RANK.index, default=NOT_PRINTED)
        if isinstance(index, tuple):
            idx = pd.MultiIndex.from_tuples(self.labels, names=index)
        else:
            idx = pd.Index(self.labels, name=index)
        df = pd.DataFrame(self.rows, index=idx)
        if self.wide:
            df.columns = pd.MultiIndex.from_tuples(df.columns)
        how = {"printed": f"as printed in §{section}",
               "reconstructed": f"reconstructed from the prose of §{source or section} (the article's table is lost)",
               "consistent": f"not a table of the article: {source}"}[kind]
        df.attrs.update(caption=f"{title}. {how[0].upper()}{how[1:]}.", section=section, kind=kind,
                        reconstructed=kind == "reconstructed", cells=list(self.cells), id=table_id)
        return df


# ---- §1.2.2 MLA KV facts and the units behind them
def mla_kv_table() -> pd.DataFrame:
    """§1.2.2: the cited KV sizes at 128k tokens, their ratio and the per-token figures."""
    t = _Rows(wide=False)
    for label, unit, cid in (
            ("traditional KV cache, 128k tokens", "GB", "v3-1.2.2-kv-traditional-128k"),
            ("MLA KV cache, 128k tokens", "GB", "v3-1.2.2-kv-mla-128k"),
            ("compression ratio", "x", "v3-1.2.2-kv-compression-ratio"),
            ("traditional KV per token", "MiB", "v3-1.2.2-kv-traditional-per-token"),
            ("MLA KV per token (7.6 / 128k)", "MiB", "v3-1.2.2-kv-mla-per-token"),
            ("KV memory saved", "%", "v3-1.2.2-kv-reduction-pct")):
        t.new(label, unit)
        t.pair(cid)
    return t.frame("quantity", section="1.2.2", table_id="v3-mla-kv",
                   title="MLA and the KV cache (1.2.2 MLA（多头潜在注意力）架构)")


def mla_latent_bytes_per_token() -> float:
    """The MLA latent alone, without the RoPE key: kv_lora_rank x layers x 2 B."""
    c = v3_config()
    return c.kv_lora_rank * c.num_hidden_layers * dtype_bytes("bf16")


def kv_units_table() -> pd.DataFrame:
    """The article's three KV sizes per token in bytes, decimal and binary units, per token, per 2,048-token
    user and per 128k tokens: where each printed figure sits and which unit it really is."""
    c = v3_config()
    ctx, t128 = P("v3-2.3.1-context-length"), tokens_128k()
    t = _Rows(wide=False)
    for label, b in ((f"traditional: 2 x {c.hidden_size} x {c.num_hidden_layers} x 2 B", article_trad_kv_bytes_per_token()),
                     (f"MLA latent only: {c.kv_lora_rank} x {c.num_hidden_layers} x 2 B", mla_latent_bytes_per_token()),
                     (f"MLA as cached: ({c.kv_lora_rank} + {c.qk_rope_head_dim}) x {c.num_hidden_layers} x 2 B",
                      mla_bytes_per_token(V3))):
        t.new(label)
        t.set("per token (B)", b)
        t.set("per token (MB)", b / MB)
        t.set("per token (MiB)", b / MiB)
        t.set(f"{ctx:,} tokens (GB)", b * ctx / GB)
        t.set(f"{ctx:,} tokens (GiB)", b * ctx / GiB)
        t.set(f"{t128:,.0f} tokens (GB)", b * t128 / GB)
        t.set(f"{t128:,.0f} tokens (GiB)", b * t128 / GiB)
    return t.frame("KV cache", section="1.2.2", kind="consistent", table_id="v3-kv-units",
                   title="KV cache sizes in bytes, decimal and binary units (1.2.2, 2.3.1)",
                   source="the article's KV sizes in both units")


# ---- §1.2 / §2.2.1 targets
def targets_table(card: str = "ascend-910b2") -> pd.DataFrame:
    """§1.2 and §2.2.1: the targets and the card, with what the targets imply per user and the ``card``
    preset's own figures (installed HBM in GiB, FP16 peak)."""
    dev = get_card(card)
    t = _Rows(wide=False)
    a12, a221, comp = "article (§1.2)", "article (§2.2.1)", f"computed / {card} preset"
    for label, unit, c12, c221 in (("concurrent users", "users", "v3-1.2-target-concurrency", "v3-2.2.1-target-concurrency"),
                                   ("context", "tokens", "v3-1.2-target-context", "v3-2.2.1-context-length"),
                                   ("throughput", "tokens/s", "v3-1.2-target-throughput", "v3-2.2.1-target-throughput")):
        t.new(label, unit)
        t.printed(c12, a12)
        t.printed(c221, a221)
        t.set(comp, math.nan)
    users, target = P("v3-2.2.1-target-concurrency"), P("v3-2.2.1-target-throughput")
    for label, unit, value in (("tokens/s per user", "tokens/s", target / users),
                               ("time between two tokens of one user", "ms", users / target / MS)):
        t.new(label, unit)
        t.printed(None, a12)
        t.printed(None, a221)
        t.set(comp, value)
    for label, unit, cid, value in (("HBM per card", "GiB", "v3-2.2.1-hbm-per-card", dev.hbm_bytes / GiB),
                                    ("FP16 peak per card", "TFLOPS", "v3-2.2.1-fp16-tflops-per-card",
                                     dev.flops("fp16") / TFLOPS)):
        t.new(label, unit)
        t.printed(None, a12)
        t.printed(cid, a221)
        t.set(comp, value)
    return t.frame("quantity", section="2.2.1", table_id="v3-targets",
                   title="Targets and card (1.2 核心目标, 2.2.1 约束条件与目标分析)")


# ---- §2.2.2 TP
def allreduce_ms(tp: int, tokens: float) -> float:
    """The article's ring all-reduce per layer for ``tokens`` tokens at TP=``tp``, from its bandwidth (ms)."""
    return (P("v3-2.2.2-ring-factor") * (tp - 1) / tp * ar_payload_bytes(tokens)
            / (P("v3-2.2.2-effective-bw") * GiB) / MS)


def compute_ms(tokens: float) -> float:
    """The article's compute per layer for ``tokens`` tokens (1.213e9 FLOPs each at 1.504e15 FLOP/s), ms."""
    return layer_compute_ms(tokens)


def tp_comparison_table() -> pd.DataFrame:
    """§2.2.2, the lost TP comparison: all-reduce volume and time, compute, their ratio and the
    communication share at TP = 4, 8, 16, on the article's own (mismatched) token counts."""
    b, s = P("v3-2.2.2-batch-size"), P("v3-2.2.2-seq-len")
    share = {8: "v3-2.2.2-tp8-overhead-pct", 16: "v3-2.2.2-tp16-overhead-pct"}
    t = _Rows(wide=True)
    for tp in TP_DEGREES:
        t.new(tp)
        t.pair("v3-2.2.2-comm-gib-per-layer", f"all-reduce, {b * s:,} tokens (GiB)")
        t.pair(f"v3-2.2.2-tp{tp}-comm-time", "all-reduce (ms)")
        t.pair("v3-2.2.2-compute-time-per-layer", f"compute, {b:g} tokens (ms)")
        t.pair(f"v3-2.2.2-tp{tp}-comm-compute-ratio", "all-reduce / compute (x)")
        t.pair(share.get(tp), "communication share (%)", recomputed=comm_share(tp))
    return t.frame("TP", section="2.2.2", kind="reconstructed", table_id="v3-tp",
                   title="TP comparison per layer (2.2.2 基础性能对比表格, 不同TP配置下的Overlap效果对比)",
                   source="2.2.2")


def tp_same_basis_table() -> pd.DataFrame:
    """The all-reduce and the compute of §2.2.2 for the same tokens: the article's bandwidth, compute rate
    and formulas, each side for 80 tokens and for 80 x 2048 tokens."""
    b, s = P("v3-2.2.2-batch-size"), P("v3-2.2.2-seq-len")
    n = b * s
    t = _Rows(wide=False)
    for tp in TP_DEGREES:
        t.new(tp)
        t.set(f"all-reduce, {n:,} tokens (ms)", allreduce_ms(tp, n))
        t.set(f"compute, {b:g} tokens (ms)", compute_ms(b))
        t.set(f"compute, {n:,} tokens (ms)", compute_ms(n))
        t.set(f"all-reduce, {b:g} tokens (ms)", allreduce_ms(tp, b))
        t.set("article's basis: all-reduce / compute (x)", allreduce_ms(tp, n) / compute_ms(b))
        t.set("same tokens: all-reduce / compute (x)", allreduce_ms(tp, n) / compute_ms(n))
        t.set("same tokens: communication share (%)", matched_comm_share(tp))
    return t.frame("TP", section="2.2.2", kind="consistent", table_id="v3-tp-basis",
                   title="All-reduce vs compute per layer on one token basis (2.2.2)",
                   source=f"the article's formulas, both sides for {b:g} and for {n:,} tokens")


def tp_chart_rows() -> pd.DataFrame:
    """Long rows ``tp, series, ms`` of :func:`tp_same_basis_table` for :func:`pdcalc.book.charts.tp_chart`."""
    b, s = P("v3-2.2.2-batch-size"), P("v3-2.2.2-seq-len")
    n = b * s
    rows = []
    for tp in TP_DEGREES:
        rows += [{"tp": tp, "series": f"compute, {n:,} tokens", "ms": compute_ms(n)},
                 {"tp": tp, "series": f"all-reduce, {n:,} tokens (article)", "ms": allreduce_ms(tp, n)},
                 {"tp": tp, "series": f"compute, {b:g} tokens (article)", "ms": compute_ms(b)},
                 {"tp": tp, "series": f"all-reduce, {b:g} tokens", "ms": allreduce_ms(tp, b)}]
    return pd.DataFrame(rows)


def article_full_weights_gib() -> float:
    """The article's own FP16 weights of the whole model: dense 46.2 + experts 1,224.4 GiB (§2.3.1)."""
    return full_weight_gib()


def comm_share_pct(tp: int) -> float:
    """The communication share of the time at TP=``tp`` with the article's printed times (80 tokens of
    compute against 80 x 2048 tokens of all-reduce), %."""
    return comm_share(tp)


def moe_layers() -> int:
    """MoE layers of DeepSeek-V3 (official config)."""
    return v3_config().n_moe_layers


def experts_all_layers_gib(n_experts: float) -> float:
    """``n_experts`` experts per MoE layer of the article's 84.0 MiB, over every MoE layer, GiB."""
    return n_experts * moe_layers() * P("v3-2.3.2-bytes-per-expert-mib") * MiB / GiB


def full_weights_min_tp() -> int:
    """The §2.2.2 memory constraint with the article's own full weights (dense + experts, §2.3.1):
    ceil(1,270.6 GiB / 53.6 GiB)."""
    return math.ceil(full_weight_gib() / P("v3-2.2.2-usable-hbm"))


# ---- §2.2.3 / §2.2.4 DP replicas
def replica_table() -> pd.DataFrame:
    """§2.2.3-2.2.4, the lost DP comparison: 1-4 replicas of TP=8, effective compute and tokens/s at
    the article's efficiency levels (peak at 50% MFU, expected at 40%, conservative at 70% of peak)."""
    target = P("v3-2.2.3-target-throughput")
    per_replica = P("v3-2.2.3-cards-per-replica")
    cards = {1: "v3-2.2.3-cards-per-replica", 3: "v3-2.2.4-cards-24", 4: "v3-2.2.4-cards-32"}
    tflops = {1: "v3-2.2.3-replica-tflops", 2: "v3-2.2.3-dp2-total-tflops", 3: "v3-2.2.3-dp3-total-tflops",
              4: "v3-2.2.7-total-tflops-32"}
    peak = {1: "v3-2.2.3-replica-throughput", 2: "v3-2.2.3-dp2-throughput", 3: "v3-2.2.3-dp3-throughput",
            4: "v3-2.2.7-peak-throughput-32"}
    expected = {3: "v3-2.2.7-expected-throughput-24", 4: "v3-2.2.7-expected-throughput-32"}
    conservative = {3: "v3-2.2.8-conservative-throughput-24", 4: "v3-2.2.8-conservative-throughput-32"}
    met = f"meets {target:,} tokens/s"
    t = _Rows(wide=True)
    for n in (1, 2, 3, 4):
        t.new(n)
        t.pair(cards.get(n), "cards", recomputed=n * per_replica)
        t.pair(tflops[n], "effective compute (TFLOPS)")
        t.pair(peak[n], "peak, 50% MFU (tokens/s)")
        t.pair(expected.get(n), "expected, 40% MFU (tokens/s)",
               recomputed=_tput_2_2_7_tflops(n * P("v3-2.2.7-replica-real-tflops")))
        t.pair(conservative.get(n), "conservative, 70% of peak (tokens/s)",
               recomputed=recomputed_value(peak[n]) * P("v3-2.2.8-eff-70") / PCT)
        row = t.rows[-1]
        for level, q in (("peak", "peak, 50% MFU (tokens/s)"), ("expected", "expected, 40% MFU (tokens/s)"),
                         ("conservative", "conservative, 70% of peak (tokens/s)")):
            t.set((met, level), bool(row[(q, "recomputed")] >= target))
    return t.frame("replicas (TP=8)", section="2.2.3", kind="reconstructed", table_id="v3-replicas",
                   title="DP replica options (2.2.3 DP（数据并行）维度评估, 2.2.4 配置方案对比分析)",
                   source="2.2.3, 2.2.7 and 2.2.8")


def _tput_2_2_7_tflops(tflops: float) -> float:
    return article_throughput(tflops, "v3-2.2.7-active-params", "v3-2.2.7-flops-per-param")


def kv_room_with_all_weights_gib() -> float:
    """§2.2.3's KV memory per replica with the article's own full weights instead of the dense shard:
    (59.6 - 1,270.6 / 8) x 8 x 0.8 GiB (negative: no room)."""
    n = P("v3-2.2.3-cards-per-replica")
    return (P("v3-2.2.3-hbm-per-card") - full_weight_gib() / n) * n * P("v3-2.2.3-kv-mem-fraction")


# ---- §2.2.7 performance, §2.2.8 baselines
def performance_table() -> pd.DataFrame:
    """§2.2.7: the 32-card and 24-card throughput calculations, step by step as printed."""
    t = _Rows(wide=False)
    c32, c24 = (f"{P(f'v3-2.2.7-cards-{c}'):g} cards (TP=8, DP={P(d):g})" for c, d in
                (("32", "v3-2.2.7-dp4"), ("24", "v3-2.2.7-dp3")))
    for cfg_label, step, unit, cid in (
            (c32, "replica peak: 8 cards x 376 TFLOPS", "TFLOPS", "v3-2.2.7-replica-peak-tflops"),
            (c32, "replica effective: x 0.5", "TFLOPS", "v3-2.2.7-replica-tflops"),
            (c32, "total effective: x 4 replicas", "TFLOPS", "v3-2.2.7-total-tflops-32"),
            (c32, "FLOPs per token: 37B x 2", "10^9 FLOPs/token", "v3-2.2.7-flops-per-token"),
            (c32, "peak throughput: 6,016 / 74", "tokens/s", "v3-2.2.7-peak-throughput-32"),
            (c32, "utilisation ratio: 0.4 / 0.5", "x", "v3-2.2.7-util-ratio"),
            (c32, "replica expected: 1,504 x 0.8", "TFLOPS", "v3-2.2.7-replica-real-tflops"),
            (c32, "total expected: x 4 replicas", "TFLOPS", "v3-2.2.7-total-real-tflops-32"),
            (c32, "expected throughput: 4,812.8 / 74", "tokens/s", "v3-2.2.7-expected-throughput-32"),
            (c32, "headroom over the target", "%", "v3-2.2.7-headroom"),
            (c24, "total effective: 1,504 x 3 replicas", "TFLOPS", "v3-2.2.7-total-tflops-24"),
            (c24, "peak throughput: 4,512 / 74", "tokens/s", "v3-2.2.7-peak-throughput-24"),
            (c24, "total expected: 1,203.2 x 3", "TFLOPS", "v3-2.2.7-total-real-tflops-24"),
            (c24, "expected throughput: 3,609.6 / 74", "tokens/s", "v3-2.2.7-expected-throughput-24"),
            (c24, "headroom over the target", "%", None)):
        t.new((cfg_label, step), unit)
        t.pair(cid, recomputed=headroom_24_pct() if cid is None else None)
    return t.frame(("configuration", "step"), section="2.2.7", table_id="v3-performance",
                   title="32- and 24-card performance (2.2.7 性能评估与理论推导)")


def headroom_24_pct() -> float:
    """The 24-card expected throughput over the 50,000 tokens/s target, % (negative: below it)."""
    return (P("v3-2.2.7-expected-throughput-24") / P("v3-2.2.7-target-throughput") - 1) * PCT


def card_options_table() -> pd.DataFrame:
    """§2.2.7-2.2.8, the lost 24- vs 32-card comparison: throughput baselines, headroom and latency, with
    the tokens/s that 80 users receive at the latency target."""
    users = P("v3-2.2.8-concurrency")
    target = P("v3-2.2.7-target-throughput")
    t = _Rows(wide=True)
    for c, dp in (("24", "v3-2.2.7-dp3"), ("32", "v3-2.2.7-dp4")):
        t.new(f"{P(f'v3-2.2.8-cards-{c}'):g} cards (TP=8, DP={P(dp):g})")
        t.pair(f"v3-2.2.8-peak-throughput-{c}", "peak (tokens/s)")
        t.pair(f"v3-2.2.8-target-throughput-{c}", "target, 80% (tokens/s)")
        t.pair(f"v3-2.2.8-conservative-throughput-{c}", "conservative, 70% (tokens/s)")
        t.pair("v3-2.2.7-headroom" if c == "32" else None, f"headroom over {target:,} tokens/s (%)",
               recomputed=headroom_24_pct())
        t.pair(f"v3-2.2.8-latency-target-{c}", "latency target; recomputed: users / throughput (ms)")
        t.pair(f"v3-2.2.8-latency-conservative-{c}", "latency, conservative (ms)")
        t.set(f"{users:g} users at the latency target (tokens/s)", users / (P(f"v3-2.2.8-latency-target-{c}") * MS))
    return t.frame("configuration", section="2.2.7", kind="reconstructed", table_id="v3-cards",
                   title="24 vs 32 cards (2.2.7 性能对比总结, 2.2.8 性能基线标准)",
                   source="2.2.7 and 2.2.8")


def network_busy_pct() -> float:
    """Average link utilisation by the article's §2.2.2 model: all-reduce share of the time at TP=8 times
    the 80% of the link rate it reaches, %."""
    return comm_share(8) * P("v3-2.2.2-bw-util-pct") / PCT


def availability_pct() -> float:
    """Availability that the article's MTBF and MTTR give: MTBF / (MTBF + MTTR), %."""
    mtbf_h, mttr_h = P("v3-2.2.8-mtbf"), P("v3-2.2.8-mttr") / 60
    return mtbf_h / (mtbf_h + mttr_h) * PCT


def resource_baselines_table() -> pd.DataFrame:
    """§2.2.8: the resource and stability baselines (stated, not derived), each beside what the article's
    own plan gives where it gives anything."""
    own = {"v3-2.2.8-mem-util": (P("v3-2.3.3-hbm-util"), "§2.3.3: 14.52 / 59.6 GiB per card"),
           "v3-2.2.8-net-util": (network_busy_pct(), "§2.2.2: links busy for the all-reduce at 80% of their rate"),
           "v3-2.2.8-availability": (availability_pct(), "§2.2.8: MTBF / (MTBF + MTTR)")}
    t = _Rows(wide=False)
    for label, cid in (("GPU utilisation", "v3-2.2.8-gpu-util"), ("memory utilisation", "v3-2.2.8-mem-util"),
                       ("network bandwidth utilisation", "v3-2.2.8-net-util"), ("CPU utilisation", "v3-2.2.8-cpu-util"),
                       ("expert pool utilisation", "v3-2.2.8-expert-pool-util"),
                       ("availability", "v3-2.2.8-availability"), ("error rate", "v3-2.2.8-error-rate"),
                       ("MTBF", "v3-2.2.8-mtbf"), ("MTTR", "v3-2.2.8-mttr"),
                       ("expert switch success", "v3-2.2.8-expert-switch-success")):
        raw = v3_claims()[cid]
        t.new(label, raw.unit)
        t.set("bound", printed_bound(raw.printed))
        t.printed(cid, "article")
        value, where = own.get(cid, (math.nan, ""))
        t.set("the article's own plan", value)
        t.set("from", where)
        ok = {"≥": value >= P(cid), "≤": value <= P(cid)}[printed_bound(raw.printed)]
        t.set("consistent", "—" if math.isnan(value) else ("yes" if ok else "no"))
    return t.frame("baseline", section="2.2.8", table_id="v3-baselines",
                   title="Resource and stability baselines (2.2.8 通用资源利用率基线, 稳定性基线)")


# ---- §2.3.1 KV requirement and memory total
def kv_requirement_table() -> pd.DataFrame:
    """§2.3.1: the KV cache per token, per user and for 80 users, traditional and MLA, as printed, as
    recomputed from the printed inputs, and exactly from the bytes of the article's own formulas."""
    ctx, users = P("v3-2.3.1-context-length"), P("v3-2.3.1-concurrency")
    trad, mla = article_trad_kv_bytes_per_token(), article_mla_kv_bytes_per_token()
    t = _Rows(wide=False)
    for label, unit, cid, exact_b in (
            ("traditional KV per token", "MiB", "v3-2.3.1-kv-traditional-per-token", trad),
            (f"traditional KV per user ({ctx:,} tokens)", "GiB", "v3-2.3.1-kv-traditional-per-user", trad * ctx),
            ("MLA KV per token", "MiB", "v3-2.3.1-kv-mla-per-token", mla),
            (f"MLA KV per user ({ctx:,} tokens)", "GiB", "v3-2.3.1-kv-mla-per-user", mla * ctx),
            ("compression ratio", "x", "v3-2.3.1-kv-compression-ratio", None),
            ("compression ratio, rounded", "x", "v3-2.3.1-kv-compression-ratio-rounded", None),
            (f"MLA KV, {users:g} users", "GiB", "v3-2.3.1-kv-total-80", mla * ctx * users)):
        t.new(label, unit)
        t.pair(cid)
        if exact_b is None:
            ratio = trad / mla
            t.set("exact, from bytes", ratio if "rounded" not in label else float(round(ratio)))
            t.set("exact, in MB / GB (10^6 / 10^9 B)", math.nan)
        else:
            t.set("exact, from bytes", exact_b / BYTE_UNITS[unit])
            t.set("exact, in MB / GB (10^6 / 10^9 B)", exact_b / (MB if unit == "MiB" else GB))
    return t.frame("quantity", section="2.3.1", table_id="v3-kv-requirement",
                   title="KV cache requirement (2.3.1 理论显存需求分析: KV Cache 理论显存需求)")


def memory_requirement_table() -> pd.DataFrame:
    """§2.3.1: the weights, the tiered GPU weights, and the theoretical total with the cards it needs."""
    t = _Rows(wide=False)
    for label, unit, cid in (("dense weights: 24.8B x 2 B", "GiB", "v3-2.3.1-dense-weight-bytes"),
                             ("expert weights: 657.4B x 2 B", "GiB", "v3-2.3.1-expert-weight-total"),
                             ("GPU hot cache: 16 experts", "GiB", "v3-2.3.1-gpu-hot-bytes"),
                             ("GPU weights, tiered: dense + hot cache", "GiB", "v3-2.3.1-gpu-weight-tiered"),
                             ("all weights: dense + experts", "GiB", "v3-2.3.1-full-weight-mem"),
                             ("reduction by tiering", "%", "v3-2.3.1-tiered-reduction"),
                             ("weights in the total", "GiB", "v3-2.3.1-weights-in-total"),
                             ("KV cache, 80 users", "GiB", "v3-2.3.1-kv-total-80"),
                             ("system overhead", "GiB", "v3-2.3.1-system-overhead"),
                             ("total", "GiB", "v3-2.3.1-total-mem"),
                             ("total, restated", "GiB", "v3-2.3.1-total-mem-alt"),
                             ("cards for storage: total / 59.6 GiB", "cards", "v3-2.3.1-cards-for-storage")):
        t.new(label, unit)
        t.pair(cid)
    return t.frame("quantity", section="2.3.1", table_id="v3-memory-requirement",
                   title="Memory requirement (2.3.1 理论显存需求分析: 模型权重理论显存需求)")


# ---- §2.3.2 expert tiers
def expert_tiers_table() -> pd.DataFrame:
    """§2.3.2, the lost three-tier table: experts, bytes, load shares and latencies per tier, and the
    same tiers across all MoE layers of the model."""
    layers = moe_layers()
    t = _Rows(wide=True)
    tiers = (("GPU hot cache", "gpu-hot", "gpu-hit-share", "gpu-load-latency"),
             ("CPU warm cache", "cpu-warm", "cpu-hit-share", "cpu-load-latency"),
             ("SSD cold storage", "ssd-cold", "ssd-hit-share", "ssd-load-latency"))
    n_all = 0
    for label, tier, hit, lat in tiers:
        t.new(label)
        t.pair(f"v3-2.3.2-{tier}-experts", "experts")
        t.pair(f"v3-2.3.2-{tier}-bytes", "tier (GiB)")
        t.printed(f"v3-2.3.2-{hit}", ("share of expert loads (%)", "article"))
        t.printed(f"v3-2.3.2-{lat}", ("average load latency, below (ms)", "article"))
        n = P(f"v3-2.3.2-{tier}-experts")
        n_all += n
        t.set(f"in all {layers} MoE layers (GiB)", experts_all_layers_gib(n))
    t.new("total")
    t.pair(None, "experts", recomputed=n_all)
    t.pair("v3-2.3.2-tiered-total", "tier (GiB)")
    t.printed(None, ("share of expert loads (%)", "article"))
    t.printed(None, ("average load latency, below (ms)", "article"))
    t.set(f"in all {layers} MoE layers (GiB)", experts_all_layers_gib(n_all))
    return t.frame("tier", section="2.3.2", kind="reconstructed", table_id="v3-tiers",
                   title="Expert storage tiers (2.3.2 显存优化方案设计: 三级存储架构)",
                   source="2.3.1 and 2.3.2")


# ---- §2.3.3 per card and storage plan
def per_card_table(card: str = "ascend-910b2") -> pd.DataFrame:
    """§2.3.3, the per-card budget of a TP=8 replica as the article plans it, and the same budget with the
    article's own full weights (dense + all experts, §2.3.1) on the ``card`` preset's installed HBM."""
    dev = get_card(card)
    tp = P("v3-2.3.3-tp8")
    hbm = dev.hbm_bytes / GiB
    col = f"with all weights, {card} (GiB or %)"
    all_terms = [full_weight_gib() / tp, 0.0] + [P(c) for c in CARD_TERMS[2:]]
    total = per_card_all_weights_gib()
    t = _Rows(wide=False)
    for (label, cid), alt in zip((("weights: dense shard (46.2 / 8); all weights / 8", "v3-2.3.3-dense-shard-per-card"),
                                  ("hot-expert shard (1.31 / 8)", "v3-2.3.3-expert-shard-per-card"),
                                  ("KV cache shard (9.15 / 8)", "v3-2.3.3-kv-shard-per-card"),
                                  ("activations", "v3-2.3.3-activation-mem"),
                                  ("system reserve", "v3-2.3.3-system-reserve")), all_terms):
        t.new(label, "GiB")
        t.pair(cid)
        t.set(col, alt)
    for label, unit, cid, alt in (("per-card total", "GiB", "v3-2.3.3-per-card-total", total),
                                  ("per-card total, restated", "GiB", "v3-2.3.3-per-card-total-alt", math.nan),
                                  ("HBM per card", "GiB", "v3-2.3.3-hbm-per-card", hbm),
                                  ("usable (90%)", "GiB", "v3-2.3.3-usable-hbm", hbm * P("v3-2.3.3-usable-pct") / PCT),
                                  ("HBM utilisation", "%", "v3-2.3.3-hbm-util", total / hbm * PCT),
                                  ("headroom", "GiB", "v3-2.3.3-hbm-headroom", hbm - total),
                                  ("headroom, share of HBM", "%", "v3-2.3.3-hbm-headroom-pct", (hbm - total) / hbm * PCT)):
        t.new(label, unit)
        t.pair(cid)
        t.set(col, alt)
    return t.frame("item", section="2.3.3", kind="reconstructed", table_id="v3-per-card",
                   title="Memory per card (2.3.3 优化后显存需求计算: 单卡显存需求)",
                   source="2.3.3")


def storage_plan_table() -> pd.DataFrame:
    """§2.3.3, the lost storage capacity plan: GPU, CPU and SSD capacity, beside what the article itself
    puts in each tier by its own numbers."""
    per_expert = P("v3-2.3.2-bytes-per-expert-mib") * MiB
    need = "what the article puts there, by its own numbers"
    t = _Rows(wide=False)
    t.new("GPU HBM, per card", "GiB")
    t.printed(None, "per node")
    t.printed(None, "nodes")
    t.pair("v3-2.3.3-per-card-total-alt")
    t.set(need, per_card_all_weights_gib())
    t.new("CPU memory", "GiB")
    t.printed("v3-2.3.3-cpu-mem-per-node", "per node")
    t.printed("v3-2.3.3-nodes", "nodes")
    t.pair("v3-2.3.3-cpu-mem-total")
    t.set(need, P("v3-2.3.3-cpu-cached-experts") * per_expert / GiB)
    t.new("SSD", "TiB")
    t.printed("v3-2.3.3-ssd-per-node", "per node")
    t.printed("v3-2.3.3-nodes", "nodes")
    t.pair("v3-2.3.3-ssd-total")
    t.set(need, P("v3-2.3.2-expert-weight-total") * GiB / TiB)
    return t.frame("tier", section="2.3.3", kind="reconstructed", table_id="v3-storage",
                   title="Storage capacity plan (2.3.3 存储容量规划)",
                   source="2.3.3")


def printed_values() -> dict[str, str]:
    """Every printed number of :data:`SECTIONS` as printed (thousands separators, printed decimals), by a
    name fit for ``glue``: "a" + the claim id without the article, dots and dashes as underscores
    ("v3-2.2.2-min-tp" -> "a_2_2_2_min_tp"); the two ends of a range get "_lo" and "_hi"."""
    out = {}
    for cid, c in v3_claims().items():
        if c.section not in SECTIONS["v3"]:
            continue
        key = "a" + cid[2:].replace("-", "_").replace(".", "_")
        values = dict(zip(("_lo", "_hi"), c.value)) if isinstance(c.value, tuple) else {"": c.value}
        for suffix, v in values.items():
            out[key + suffix] = f"{v:,.{printed_decimals(c.printed, v)}f}"
    return out


#: Every table function of the chapter, by the article section it rebuilds.
TABLES = {"mla_kv": mla_kv_table, "kv_units": kv_units_table, "targets": targets_table,
          "tp_comparison": tp_comparison_table, "tp_same_basis": tp_same_basis_table, "replicas": replica_table,
          "performance": performance_table, "card_options": card_options_table,
          "resource_baselines": resource_baselines_table, "kv_requirement": kv_requirement_table,
          "memory_requirement": memory_requirement_table, "expert_tiers": expert_tiers_table,
          "per_card": per_card_table, "storage_plan": storage_plan_table}
