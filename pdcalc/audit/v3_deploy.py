"""Recomputations for the V3 article's TP/DP throughput, replica and memory sections.

Article v3, §1.2.2 (KV cache sizes), §2.2.2-2.2.9 (TP all-reduce times, compute-based throughput,
replicas, baselines) and §2.3.1-2.3.3 (memory plan, expert tiers, per-card memory). Each step of the
article is recomputed from the numbers it prints just before (``printed_value``), so the verdict judges
that step; where the method itself is unsound (unlike token counts, MB printed as MiB, a memory plan
without the experts, latency and throughput that contradict each other), the explanation of the errata
says so in numbers. Facts about the model come from the official config (:mod:`pdcalc.model`) and the
KV formula of :func:`pdcalc.kv_cache.mla_bytes_per_token`.
"""

from __future__ import annotations

import math
from functools import cache

from pdcalc.claims import _REGISTRY, _raw, printed_value, recomputes
from pdcalc.inventory import get_inventory
from pdcalc.kv_cache import mla_bytes_per_token
from pdcalc.model import load_config
from pdcalc.units import GB, GiB, KB, KiB, MB, MiB, dtype_bytes, from_unit

_BEFORE = set(_REGISTRY)
V3 = "deepseek-v3"
P = printed_value
TFLOPS = 1e12    # FLOP/s in one TFLOPS
PFLOPS = 1e15    # FLOP/s in one PFLOPS
MS = 1e-3        # seconds in one millisecond
PCT = 100        # percent in one


@cache
def _cfg():
    return load_config(V3)


def _params(cid: str) -> float:
    """A printed parameter count ("24.8B", "44.04M") in parameters, by the claim's printed unit."""
    unit = next(r["unit"] for r in _raw("v3") if r["id"] == cid)
    return from_unit(P(cid), unit)


# ================================================================== §1.2.2 and §2.3.1: KV per token
def article_trad_kv_bytes_per_token() -> float:
    """The article's "traditional" KV per token: 2 x hidden_size x num_layers x 2 bytes (§2.3.1)."""
    return (P("v3-2.3.1-kv-factor") * P("v3-2.3.1-hidden-size") * P("v3-2.3.1-num-layers")
            * P("v3-2.3.1-bytes-per-param-fp16"))


def article_mla_kv_bytes_per_token() -> float:
    """The article's MLA KV per token: (kv_lora_rank + qk_rope_head_dim) x num_layers x 2 bytes (§2.3.1)."""
    return ((P("v3-2.3.1-kv-lora-rank") + P("v3-2.3.1-qk-rope-dim")) * P("v3-2.3.1-num-layers")
            * P("v3-2.3.1-bytes-per-param-fp16"))


def tokens_128k() -> float:
    """The cited "128k" context in tokens, k = 1,024 (what reproduces the cited 213.5 and 7.6)."""
    return P("v3-1.2.2-context-128k") / KB * KiB


def _trad_128k_why():
    b = article_trad_kv_bytes_per_token() * tokens_128k()
    return (f"The article's own formula gives {article_trad_kv_bytes_per_token():,.0f} B/token x "
            f"{tokens_128k():,.0f} tokens = {b / GiB:.1f} GiB = {b / GB:.1f} GB: the cited "
            f"{P('v3-1.2.2-kv-traditional-128k')} is GiB printed as GB.")


recomputes("v3-1.2.2-kv-traditional-128k", method="article formula 2 x 7168 x 61 x 2 B x 131,072 tokens, in GB",
           why=_trad_128k_why)(lambda: article_trad_kv_bytes_per_token() * tokens_128k() / GB)


def _mla_128k_why():
    c = _cfg()
    full = mla_bytes_per_token(V3) * tokens_128k()
    latent = full * c.kv_lora_rank / (c.kv_lora_rank + c.qk_rope_head_dim)
    ratio_cited = 2 * c.hidden_size / c.kv_lora_rank
    ratio_full = article_trad_kv_bytes_per_token() / mla_bytes_per_token(V3)
    return (f"The cited {P('v3-1.2.2-kv-mla-128k')} is {latent / GiB:.3f} GiB = {c.num_hidden_layers} layers x "
            f"{c.kv_lora_rank} latent dims x {dtype_bytes('bf16'):g} B x {tokens_128k():,.0f} tokens: it leaves out the "
            f"{c.qk_rope_head_dim} RoPE key dims every layer also caches, and is GiB printed as GB. The cache is "
            f"{full / GiB:.2f} GiB = {full / GB:.2f} GB. The missing RoPE part is why "
            f"{P('v3-1.2.2-kv-traditional-128k')} / {P('v3-1.2.2-kv-mla-128k')} = {ratio_cited:.0f} "
            f"(2 x {c.hidden_size} / {c.kv_lora_rank}) instead of {ratio_full:.1f}.")


recomputes("v3-1.2.2-kv-mla-128k", method="official MLA cache (512 + 64) x 61 x 2 B x 131,072 tokens, in GB",
           why=_mla_128k_why)(lambda: mla_bytes_per_token(V3) * tokens_128k() / GB)
recomputes("v3-1.2.2-kv-compression-ratio", method="article: 213.5 / 7.6")(
    lambda: P("v3-1.2.2-kv-traditional-128k") / P("v3-1.2.2-kv-mla-128k"))
recomputes("v3-1.2.2-kv-traditional-per-token", "v3-2.3.1-kv-traditional-per-token",
           method="article formula 2 x 7168 x 61 x 2 B, in MiB")(lambda: article_trad_kv_bytes_per_token() / MiB)
recomputes("v3-1.2.2-kv-mla-per-token", method="article: 7.6 GB / 128k tokens in its binary units "
           "(7.6 x 2^30 B / 131,072), in MiB")(
    lambda: P("v3-1.2.2-kv-mla-128k") * GiB / tokens_128k() / MiB)
recomputes("v3-1.2.2-kv-reduction-pct", method="article: 1 - 7.6 / 213.5, %")(
    lambda: (1 - P("v3-1.2.2-kv-mla-128k") / P("v3-1.2.2-kv-traditional-128k")) * PCT)


def _mla_mib_why():
    b, t = article_mla_kv_bytes_per_token(), article_trad_kv_bytes_per_token()
    mla, trad = P("v3-2.3.1-kv-mla-per-token"), P("v3-2.3.1-kv-traditional-per-token")
    return (f"({P('v3-2.3.1-kv-lora-rank')} + {P('v3-2.3.1-qk-rope-dim')}) x {P('v3-2.3.1-num-layers')} x "
            f"{P('v3-2.3.1-bytes-per-param-fp16')} B = {b:,.0f} B = {b / MB:.4f} MB = {b / MiB:.4f} MiB: the "
            f"{mla:.3f} is decimal MB labelled MiB. The ratio {trad} / {mla:.3f} = "
            f"{P('v3-2.3.1-kv-compression-ratio')}x therefore divides MiB by MB; in bytes it is {t:,.0f} / {b:,.0f} = "
            f"{t / b:.2f}x. §1.2.2 gives {P('v3-1.2.2-kv-mla-per-token')} MiB/token for the same cache.")


recomputes("v3-2.2.3-kv-mla-per-token", "v3-2.3.1-kv-mla-per-token",
           method="article formula (512 + 64) x 61 x 2 B, in MiB", why=_mla_mib_why)(
    lambda: article_mla_kv_bytes_per_token() / MiB)


def _per_user(per_token_id, ctx_id):
    return P(per_token_id) * P(ctx_id) * MiB / GiB


def _per_user_why(per_token_id, ctx_id, exact_bytes_per_token):
    def why():
        mib = P(per_token_id) * P(ctx_id)
        exact = exact_bytes_per_token() * P(ctx_id)
        return (f"{P(per_token_id):.3f} MiB x {P(ctx_id):,} tokens = {mib:,.2f} MiB = {mib * MiB / GiB:.3f} GiB; "
                f"the printed value divides the MiB by {KB:,} instead of {KiB:,}. In bytes, {exact_bytes_per_token():,.0f} B x "
                f"{P(ctx_id):,} = {exact / GiB:.3f} GiB ({exact / GB:.3f} GB).")
    return why


recomputes("v3-2.2.3-kv-per-user", method="article: 0.070 MiB x 2048 tokens, in GiB",
           why=_per_user_why("v3-2.2.3-kv-mla-per-token", "v3-2.2.3-context-length",
                             article_mla_kv_bytes_per_token))(
    lambda: _per_user("v3-2.2.3-kv-mla-per-token", "v3-2.2.3-context-length"))
recomputes("v3-2.3.1-kv-mla-per-user", "v3-2.3.2-kv-mla-per-user", method="article: 0.070 MiB x 2048 tokens, in GiB",
           why=_per_user_why("v3-2.3.1-kv-mla-per-token", "v3-2.3.1-context-length",
                             article_mla_kv_bytes_per_token))(
    lambda: _per_user("v3-2.3.1-kv-mla-per-token", "v3-2.3.1-context-length"))
recomputes("v3-2.3.1-kv-traditional-per-user", method="article: 1.668 MiB x 2048 tokens, in GiB",
           why=_per_user_why("v3-2.3.1-kv-traditional-per-token", "v3-2.3.1-context-length",
                             article_trad_kv_bytes_per_token))(
    lambda: _per_user("v3-2.3.1-kv-traditional-per-token", "v3-2.3.1-context-length"))
recomputes("v3-2.3.1-kv-compression-ratio", method="article: 1.668 / 0.070")(
    lambda: P("v3-2.3.1-kv-traditional-per-token") / P("v3-2.3.1-kv-mla-per-token"))
recomputes("v3-2.3.1-kv-compression-ratio-rounded", method="article: 23.8 rounded")(
    lambda: round(P("v3-2.3.1-kv-compression-ratio")))
recomputes("v3-2.3.1-kv-total-80", method="article: 80 x 0.143 GiB")(
    lambda: P("v3-2.3.1-concurrency") * P("v3-2.3.1-kv-mla-per-user"))


# ================================================================== §2.2.2 TP: memory and all-reduce
def _dense_gib(params_id, bytes_id):
    return _params(params_id) * P(bytes_id) / GiB


recomputes("v3-2.2.2-dense-weight-bytes", method="article: 24.8B x 2 B, in GiB")(
    lambda: _dense_gib("v3-2.2.2-dense-params", "v3-2.2.2-bytes-per-param-fp16"))
recomputes("v3-2.2.2-usable-hbm", method="article: 59.6 GiB x 0.9")(
    lambda: P("v3-2.2.2-hbm-per-card") * P("v3-2.2.2-usable-fraction"))
recomputes("v3-2.2.2-min-tp", method="article: ceil(46.2 / 53.6)")(
    lambda: math.ceil(P("v3-2.2.2-dense-weight-bytes") / P("v3-2.2.2-usable-hbm")))
recomputes("v3-2.2.2-dense-shard-per-card", method="article: 46.2 GiB / 8")(
    lambda: P("v3-2.2.2-dense-weight-bytes") / P("v3-2.2.2-tp8"))


def _ar_payload_bytes(tokens: float) -> float:
    """The article's all-reduce payload: hidden_size x tokens x 2 bytes."""
    return P("v3-2.2.2-hidden-size") * tokens * P("v3-2.2.2-bytes-per-param-fp16")


recomputes("v3-2.2.2-comm-bytes-per-layer", method="article: 7168 x 80 x 2048 x 2 B")(
    lambda: _ar_payload_bytes(P("v3-2.2.2-batch-size") * P("v3-2.2.2-seq-len")))
recomputes("v3-2.2.2-comm-gib-per-layer", method="article: 2,348,810,240 B in GiB")(
    lambda: P("v3-2.2.2-comm-bytes-per-layer") / GiB)
recomputes("v3-2.2.2-effective-bw", method="article: 104.3 GiB/s x 0.8")(
    lambda: P("v3-2.2.2-hccs-bw") * P("v3-2.2.2-bw-util-factor"))
recomputes("v3-2.2.2-n-over-b", method="article: 2.188 GiB / 83.4 GiB/s, s")(
    lambda: P("v3-2.2.2-comm-gib-per-layer") / P("v3-2.2.2-effective-bw"))

for _tp in (4, 8, 16):
    recomputes(f"v3-2.2.2-tp{_tp}-factor", method=f"article: (P - 1) / P for P = TP={_tp}")(
        (lambda t: lambda: (P(f"v3-2.2.2-tp{t}") - 1) / P(f"v3-2.2.2-tp{t}"))(_tp))


def _comm_ms(tp: int) -> float:
    return P("v3-2.2.2-ring-factor") * P(f"v3-2.2.2-tp{tp}-factor") * P("v3-2.2.2-n-over-b") / MS


def _tp16_why():
    t = _comm_ms(16)
    return (f"{P('v3-2.2.2-ring-factor'):g} x {P('v3-2.2.2-tp16-factor'):g} x {P('v3-2.2.2-n-over-b'):g} s = "
            f"{t:.2f} ms, not {P('v3-2.2.2-tp16-comm-time')} ms: an arithmetic slip. The ratio printed next to it "
            f"divides the slipped value ({P('v3-2.2.2-tp16-comm-time')} / {P('v3-2.2.2-compute-time-per-layer')} "
            f"= {P('v3-2.2.2-tp16-comm-compute-ratio')}x; {t / P('v3-2.2.2-compute-time-per-layer'):.0f}x with "
            f"{t:.1f} ms).")


recomputes("v3-2.2.2-tp4-comm-time", method="article: 2 x 0.75 x 0.02623 s, in ms")(lambda: _comm_ms(4))
recomputes("v3-2.2.2-tp8-comm-time", method="article: 2 x 0.875 x 0.02623 s, in ms")(lambda: _comm_ms(8))
recomputes("v3-2.2.2-tp16-comm-time", method="article: 2 x 0.9375 x 0.02623 s, in ms", why=_tp16_why)(
    lambda: _comm_ms(16))


# ---- §2.2.2 compute per layer and the comparison with communication
recomputes("v3-2.2.2-flops-per-token", method="article: 2 x 37B activated parameters")(
    lambda: P("v3-2.2.2-flops-per-param") * _params("v3-2.2.2-active-params"))
recomputes("v3-2.2.2-flops-per-layer-token", method="article: 74e9 / 61")(
    lambda: P("v3-2.2.2-flops-per-token") / P("v3-2.2.2-num-layers"))
recomputes("v3-2.2.2-replica-flops", method="article: 376 TFLOPS x 0.5 x 8 cards, FLOP/s")(
    lambda: P("v3-2.2.2-fp16-tflops-per-card") * P("v3-2.2.2-mfu") * P("v3-2.2.3-cards-per-replica") * TFLOPS)


def _layer_compute_ms(tokens: float) -> float:
    """The article's per-layer compute time for ``tokens`` tokens: 1.213e9 x tokens / 1.504e15."""
    return P("v3-2.2.2-flops-per-layer-token") * tokens / P("v3-2.2.2-replica-flops") / MS


recomputes("v3-2.2.2-compute-time-per-layer", method="article: 1.213e9 x 80 / 1.504e15 s, in ms")(
    lambda: _layer_compute_ms(P("v3-2.2.2-batch-size")))
for _tp in (4, 8, 16):
    recomputes(f"v3-2.2.2-tp{_tp}-comm-compute-ratio", method=f"article: TP={_tp} communication / compute time")(
        (lambda t: lambda: P(f"v3-2.2.2-tp{t}-comm-time") / P("v3-2.2.2-compute-time-per-layer"))(_tp))


def _share(tp: int) -> float:
    """The article's communication share: comm / (comm + compute), with its printed times, %."""
    c = P(f"v3-2.2.2-tp{tp}-comm-time")
    return c / (c + P("v3-2.2.2-compute-time-per-layer")) * PCT


recomputes("v3-2.2.2-comm-share", method="article: TP=8 communication / (communication + compute), %")(
    lambda: _share(8))


def matched_comm_share(tp: int) -> float:
    """Communication share at ``tp`` when the all-reduce and the compute cover the same tokens (the
    article's own bandwidth, compute rate and formulas), %. Independent of the token count."""
    seqs = P("v3-2.2.2-batch-size") * P("v3-2.2.2-seq-len")
    comm = P("v3-2.2.2-ring-factor") * (tp - 1) / tp * _ar_payload_bytes(seqs) / (P("v3-2.2.2-effective-bw") * GiB)
    compute = _layer_compute_ms(seqs) * MS
    return comm / (comm + compute) * PCT


def _overhead_why():
    b, s = P("v3-2.2.2-batch-size"), P("v3-2.2.2-seq-len")
    return (f"With its own times the share of communication is {P('v3-2.2.2-tp8-comm-time')} / "
            f"({P('v3-2.2.2-tp8-comm-time')} + {P('v3-2.2.2-compute-time-per-layer')}) = {_share(8):.2f}% at TP=8 "
            f"and {_share(16):.2f}% at TP=16 (the '{P('v3-2.2.2-comm-share')}%' a few lines above); "
            f"{P('v3-2.2.2-tp8-overhead-pct')}% and {P('v3-2.2.2-tp16-overhead-pct')}% follow from none of its "
            f"numbers (their table is lost; they sit near the all-reduce times in ms). Both shares also compare "
            f"unlike work: the all-reduce carries {b:g} x {s:g} = {b * s:,.0f} tokens, the "
            f"{P('v3-2.2.2-compute-time-per-layer')} ms of compute {b:g}. For the same {b * s:,.0f} tokens compute "
            f"takes {_layer_compute_ms(b * s):.0f} ms per layer and communication is {matched_comm_share(8):.1f}% "
            f"of the time at TP=8, {matched_comm_share(16):.1f}% at TP=16 (for any token count), not "
            f"{P('v3-2.2.2-comm-share')}%.")


recomputes("v3-2.2.2-tp8-overhead-pct", method="article's times: TP=8 comm / (comm + compute), %",
           why=_overhead_why)(lambda: _share(8))
recomputes("v3-2.2.2-tp16-overhead-pct", method="article's times: TP=16 comm / (comm + compute), %",
           why=_overhead_why)(lambda: _share(16))


def _mla_comm_why():
    c = _cfg()
    t, m = article_trad_kv_bytes_per_token(), article_mla_kv_bytes_per_token()
    return (f"The TP all-reduce sums hidden states ({c.hidden_size} values x {dtype_bytes('bf16'):g} B per token), which MLA does not "
            f"change: MLA shrinks the KV cache ({t:,.0f} -> {m:,.0f} B per token, {t / m:.1f}x), not the "
            f"activations the TP group exchanges. The all-reduce volume is the same with and without MLA.")


recomputes("v3-2.2.2-mla-comm-compression", method="all-reduce payload without MLA / with MLA: hidden_size x tokens "
           "x 2 B either way, ratio 1", why=_mla_comm_why)(lambda: 1.0)


# ---- §2.2.2-2.2.3 compute-based card and replica counts
recomputes("v3-2.2.2-compute-demand", method="article: 37B x 2 x 50,000 tokens/s, PFLOPS")(
    lambda: _params("v3-2.2.2-active-params") * P("v3-2.2.2-flops-per-param")
    * P("v3-2.2.2-target-throughput") / PFLOPS)
recomputes("v3-2.2.2-effective-tflops-per-card", "v3-2.2.3-effective-tflops-per-card",
           method="article: 376 TFLOPS x 0.5")(lambda: P("v3-2.2.2-fp16-tflops-per-card") * P("v3-2.2.2-mfu"))
recomputes("v3-2.2.2-compute-demand-tflops", method="article: 3.7 PFLOPS in TFLOPS")(
    lambda: P("v3-2.2.2-compute-demand") * PFLOPS / TFLOPS)
recomputes("v3-2.2.2-min-cards-compute", method="article: ceil(3,700 / 188)")(
    lambda: math.ceil(P("v3-2.2.2-compute-demand-tflops") / P("v3-2.2.2-effective-tflops-per-card")))

recomputes("v3-2.2.3-dense-shard-per-card", method="article: 46.2 GiB / 8")(
    lambda: P("v3-2.2.2-dense-weight-bytes") / P("v3-2.2.3-cards-per-replica"))
recomputes("v3-2.2.3-kv-mem-per-replica", method="article: (59.6 - 5.77) GiB x 8 x 0.8")(
    lambda: (P("v3-2.2.3-hbm-per-card") - P("v3-2.2.3-dense-shard-per-card")) * P("v3-2.2.3-cards-per-replica")
    * P("v3-2.2.3-kv-mem-fraction"))


def kv_user_capacity() -> int:
    """The article's users per replica: whole users in 344.5 GiB at 0.143 GiB each."""
    return math.floor(P("v3-2.2.3-kv-mem-per-replica") / P("v3-2.2.3-kv-per-user"))


def _full_weight_gib() -> float:
    """The article's own full FP16 weights: dense 46.2 GiB + experts 1,224.4 GiB (§2.3.1)."""
    return P("v3-2.3.1-dense-weight-bytes") + P("v3-2.3.1-expert-weight-total")


def _capacity_why():
    mem, alt = P("v3-2.2.3-kv-mem-per-replica"), P("v3-2.2.3-kv-user-capacity-alt")
    exact = article_mla_kv_bytes_per_token() * P("v3-2.2.3-context-length") / GiB
    n = P("v3-2.2.3-cards-per-replica")
    return (f"Two lines earlier the same division, {mem} / {P('v3-2.2.3-kv-per-user')}, gives {kv_user_capacity():,}; "
            f"{alt:,} would need {mem / alt:.4f} GiB per user, near the exact {exact:.4f} GiB "
            f"({article_mla_kv_bytes_per_token():,.0f} B x {P('v3-2.2.3-context-length'):,} tokens). Either count "
            f"rests on a memory plan without the experts: {mem} GiB is {n:g} cards' HBM less the "
            f"{P('v3-2.2.3-dense-shard-per-card')} GiB dense shard only, while the article's own FP16 weights are "
            f"{P('v3-2.3.1-full-weight-mem'):,} GiB, {P('v3-2.3.1-full-weight-mem') / n:.1f} GiB per card of a TP={n:g} replica against "
            f"{P('v3-2.2.3-hbm-per-card')} GiB of HBM: no room is left for any KV cache.")


recomputes("v3-2.2.3-kv-user-capacity", method="article: floor(344.5 / 0.143)")(kv_user_capacity)
recomputes("v3-2.2.3-kv-user-capacity-alt", method="article: floor(344.5 / 0.143), the same memory limit",
           why=_capacity_why)(kv_user_capacity)
recomputes("v3-2.2.3-replica-concurrency", method="article: min(users that fit, 80 target)")(
    lambda: min(kv_user_capacity(), P("v3-2.2.3-target-concurrency")))
recomputes("v3-2.2.3-replica-tflops", method="article: 188 TFLOPS x 8")(
    lambda: P("v3-2.2.3-effective-tflops-per-card") * P("v3-2.2.3-cards-per-replica"))


def _throughput(tflops: float, active_id: str, per_param_id: str) -> float:
    """The article's compute-bound tokens/s: TFLOPS / (activated params x 2 FLOP)."""
    return tflops * TFLOPS / (_params(active_id) * P(per_param_id))


recomputes("v3-2.2.3-replica-throughput", method="article: 1,504 TFLOPS / (37B x 2)")(
    lambda: _throughput(P("v3-2.2.3-replica-tflops"), "v3-2.2.3-active-params", "v3-2.2.3-flops-per-param"))
recomputes("v3-2.2.3-dp-replicas-3", method="article: ceil(50,000 / 20,324)")(
    lambda: math.ceil(P("v3-2.2.3-target-throughput") / P("v3-2.2.3-replica-throughput")))
for _n, _dp in (("2", "v3-2.2.3-dp-replicas-2"), ("3", "v3-2.2.3-dp-replicas-3")):
    recomputes(f"v3-2.2.3-dp{_n}-total-tflops", method=f"article: 1,504 TFLOPS x {_n}")(
        (lambda d: lambda: P("v3-2.2.3-replica-tflops") * P(d))(_dp))
    recomputes(f"v3-2.2.3-dp{_n}-throughput", method=f"article: 20,324 tokens/s x {_n}")(
        (lambda d: lambda: P("v3-2.2.3-replica-throughput") * P(d))(_dp))


# ================================================================== §2.2.4, §2.2.7-2.2.9 32 and 24 cards
recomputes("v3-2.2.4-cards-32", method="article: TP=8 x DP=4")(lambda: P("v3-2.2.4-tp8") * P("v3-2.2.4-dp4"))
recomputes("v3-2.2.4-cards-24", method="article: TP=8 x DP=3")(lambda: P("v3-2.2.4-tp8") * P("v3-2.2.4-dp3"))
recomputes("v3-2.2.7-replica-peak-tflops", method="article: 8 cards x 376 TFLOPS")(
    lambda: P("v3-2.2.7-tp8") * P("v3-2.2.7-fp16-tflops-per-card"))
recomputes("v3-2.2.7-replica-tflops", method="article: 3,008 x 0.5")(
    lambda: P("v3-2.2.7-replica-peak-tflops") * P("v3-2.2.7-mfu"))
recomputes("v3-2.2.7-total-tflops-32", method="article: 1,504 x 4 replicas")(
    lambda: P("v3-2.2.7-replica-tflops") * P("v3-2.2.7-dp4"))
recomputes("v3-2.2.7-total-tflops-24", method="article: 1,504 x 3 replicas")(
    lambda: P("v3-2.2.7-replica-tflops") * P("v3-2.2.7-dp3"))
recomputes("v3-2.2.7-flops-per-token", method="article: 37B x 2, in 1e9 FLOPs")(
    lambda: P("v3-2.2.7-active-params") * P("v3-2.2.7-flops-per-param"))
recomputes("v3-2.2.7-util-ratio", method="article: 0.4 / 0.5")(
    lambda: P("v3-2.2.7-util-real-factor") / P("v3-2.2.7-mfu"))
recomputes("v3-2.2.7-replica-real-tflops", method="article: 1,504 x 0.8")(
    lambda: P("v3-2.2.7-replica-tflops") * P("v3-2.2.7-util-ratio"))
recomputes("v3-2.2.7-total-real-tflops-32", method="article: 1,203.2 x 4 replicas")(
    lambda: P("v3-2.2.7-replica-real-tflops") * P("v3-2.2.7-dp4"))
recomputes("v3-2.2.7-total-real-tflops-24", method="article: 1,203.2 x 3 replicas")(
    lambda: P("v3-2.2.7-replica-real-tflops") * P("v3-2.2.7-dp3"))


def _tput_2_2_7(tflops_id: str) -> float:
    return _throughput(P(tflops_id), "v3-2.2.7-active-params", "v3-2.2.7-flops-per-param")


def _peak32_why():
    x = _tput_2_2_7("v3-2.2.7-total-tflops-32")
    per, n = P("v3-2.2.3-replica-throughput"), P("v3-2.2.7-dp4")
    return (f"{P('v3-2.2.7-total-tflops-32'):,} TFLOPS / ({P('v3-2.2.7-active-params')}B x "
            f"{P('v3-2.2.7-flops-per-param')}) = {x:,.1f} tokens/s; the printed {P('v3-2.2.7-peak-throughput-32'):,} "
            f"is {n:g} x the rounded per-replica {per:,} = {n * per:,.0f}, a slip of {x - n * per:.1f} tokens/s.")


recomputes("v3-2.2.4-peak-throughput-32", "v3-2.2.7-peak-throughput-32", "v3-2.2.8-peak-throughput-32",
           method="article: 6,016 TFLOPS / (37B x 2)", why=_peak32_why)(
    lambda: _tput_2_2_7("v3-2.2.7-total-tflops-32"))
recomputes("v3-2.2.4-expected-throughput-32", "v3-2.2.7-expected-throughput-32", "v3-2.2.9.3-expected-throughput-32",
           method="article: 4,812.8 TFLOPS / (37B x 2)")(lambda: _tput_2_2_7("v3-2.2.7-total-real-tflops-32"))
recomputes("v3-2.2.7-peak-throughput-24", "v3-2.2.8-peak-throughput-24", method="article: 4,512 TFLOPS / (37B x 2)")(
    lambda: _tput_2_2_7("v3-2.2.7-total-tflops-24"))
recomputes("v3-2.2.7-expected-throughput-24", method="article: 3,609.6 TFLOPS / (37B x 2)")(
    lambda: _tput_2_2_7("v3-2.2.7-total-real-tflops-24"))
for _sec in ("2.2.4", "2.2.7"):
    recomputes(f"v3-{_sec}-headroom", method="article: 65,037 / 50,000 - 1, %")(
        (lambda s: lambda: (P(f"v3-{s}-expected-throughput-32") / P(f"v3-{s}-target-throughput") - 1) * PCT)(_sec))

for _c in ("32", "24"):
    recomputes(f"v3-2.2.8-target-throughput-{_c}", method=f"article: {_c}-card peak x 80%")(
        (lambda c: lambda: P(f"v3-2.2.8-peak-throughput-{c}") * P("v3-2.2.8-eff-80") / PCT)(_c))
    recomputes(f"v3-2.2.8-conservative-throughput-{_c}", method=f"article: {_c}-card peak x 70%")(
        (lambda c: lambda: P(f"v3-2.2.8-peak-throughput-{c}") * P("v3-2.2.8-eff-70") / PCT)(_c))
    recomputes(f"v3-2.2.8-latency-conservative-{_c}", method=f"article: {_c}-card target latency x 80% / 70%")(
        (lambda c: lambda: P(f"v3-2.2.8-latency-target-{c}") * P("v3-2.2.8-eff-80") / P("v3-2.2.8-eff-70"))(_c))


def latency_from_throughput(cards: str) -> float:
    """Time between two tokens of one user when ``concurrency`` users share the target throughput, ms
    (Little's law: latency = concurrency / throughput)."""
    return P("v3-2.2.8-concurrency") / P(f"v3-2.2.8-target-throughput-{cards}") / MS


def _latency_why(cards: str):
    def why():
        users, lat = P("v3-2.2.8-concurrency"), P(f"v3-2.2.8-latency-target-{cards}")
        tput = P(f"v3-2.2.8-target-throughput-{cards}")
        return (f"{users:g} users sharing {tput:,} tokens/s each get a token every {latency_from_throughput(cards):.2f} "
                f"ms. Read as the time per output token, {lat} ms for {users:g} users delivers "
                f"{users / (lat * MS):,.0f} tokens/s, {tput / (users / (lat * MS)):.1f}x less than the throughput "
                f"target beside it: the latency and throughput baselines contradict each other.")
    return why


for _c in ("32", "24"):
    recomputes(f"v3-2.2.8-latency-target-{_c}", method=f"80 users / {_c}-card target throughput (Little's law), ms",
               why=_latency_why(_c))((lambda c: lambda: latency_from_throughput(c))(_c))


# ================================================================== §2.3.1-2.3.3 memory plan
def _experts_gib(n_id: str, mib_id: str) -> float:
    return P(n_id) * P(mib_id) * MiB / GiB


for _sec in ("2.3.1", "2.3.2"):
    for _tier in ("gpu-hot", "cpu-warm", "ssd-cold"):
        _n = {"gpu-hot": "gpu-hot-experts", "cpu-warm": "cpu-warm-experts", "ssd-cold": "ssd-cold-experts"}[_tier]
        recomputes(f"v3-{_sec}-{_tier}-bytes", method=f"article: {_tier} experts x 84.0 MiB, in GiB")(
            (lambda s, n: lambda: _experts_gib(f"v3-{s}-{n}", f"v3-{s}-bytes-per-expert-mib"))(_sec, _n))
recomputes("v3-2.3.3-gpu-hot-bytes", method="article: 16 experts x 84.0 MiB, in GiB")(
    lambda: _experts_gib("v3-2.3.3-gpu-hot-experts", "v3-2.3.1-bytes-per-expert-mib"))

recomputes("v3-2.3.1-gpu-weight-tiered", method="article: 46.2 + 1.31 GiB")(
    lambda: P("v3-2.3.1-dense-weight-bytes") + P("v3-2.3.1-gpu-hot-bytes"))
recomputes("v3-2.3.1-full-weight-mem", method="article: 46.2 + 1,224.4 GiB")(_full_weight_gib)
recomputes("v3-2.3.1-tiered-reduction", method="article: 1 - 47.5 / 1,270.7, %")(
    lambda: (1 - P("v3-2.3.1-gpu-weight-tiered") / P("v3-2.3.1-full-weight-mem")) * PCT)


def _weights_in_total_why():
    official = get_inventory(V3).params()
    x = _full_weight_gib()
    return (f"The section's own full weights are {P('v3-2.3.1-dense-weight-bytes')} + "
            f"{P('v3-2.3.1-expert-weight-total'):,} = {x:,.1f} GiB (printed {P('v3-2.3.1-full-weight-mem'):,} a few "
            f"lines above); {P('v3-2.3.1-weights-in-total'):,} matches no sum of its numbers, "
            f"{P('v3-2.3.1-weights-in-total') - x:.1f} GiB more. The official {official / 1e9:.1f}B parameters at "
            f"2 B are {official * P('v3-2.3.1-bytes-per-param-fp16') / GiB:,.1f} GiB.")


def _total_mem() -> float:
    return P("v3-2.3.1-weights-in-total") + P("v3-2.3.1-kv-total-80") + P("v3-2.3.1-system-overhead")


def _total_mem_why(this: str, other: str):
    def why():
        return (f"{P('v3-2.3.1-weights-in-total'):,} + {P('v3-2.3.1-kv-total-80')} + "
                f"{P('v3-2.3.1-system-overhead')} = {_total_mem():,.2f} GiB, printed {P(this):,}; the "
                f"{'next' if this.endswith('mem') else 'previous'} line prints {P(other):,} GiB for the same total.")
    return why


recomputes("v3-2.3.1-weights-in-total", method="article's own full weights: 46.2 + 1,224.4 GiB",
           why=_weights_in_total_why)(_full_weight_gib)
recomputes("v3-2.3.1-total-mem", method="article: 1,281.4 + 11.44 + 93.1 GiB",
           why=_total_mem_why("v3-2.3.1-total-mem", "v3-2.3.1-total-mem-alt"))(_total_mem)
recomputes("v3-2.3.1-total-mem-alt", method="article: 1,281.4 + 11.44 + 93.1 GiB",
           why=_total_mem_why("v3-2.3.1-total-mem-alt", "v3-2.3.1-total-mem"))(_total_mem)
recomputes("v3-2.3.1-cards-for-storage", method="article: ceil(1,385.2 / 59.6)")(
    lambda: math.ceil(P("v3-2.3.1-total-mem-alt") / P("v3-2.3.1-hbm-per-card")))


def _expert_total_gib() -> float:
    return _params("v3-2.3.1-expert-params") * P("v3-2.3.1-bytes-per-param-fp16") / GiB


def _expert_total_why():
    x = _expert_total_gib()
    tiers = P("v3-2.3.2-tiered-total")
    n = P("v3-2.3.2-gpu-hot-experts") + P("v3-2.3.2-cpu-warm-experts") + P("v3-2.3.2-ssd-cold-experts")
    c = _cfg()
    return (f"{P('v3-2.3.1-expert-params')}B x 2 B = {x:,.2f} GiB, printed {P('v3-2.3.2-expert-weight-total'):,}. "
            f"The three tiers that follow ({n:g} experts x {P('v3-2.3.2-bytes-per-expert-mib')} MiB = {tiers} GiB) "
            f"hold {x / tiers:.1f}x less: {n:g} experts of {P('v3-2.3.2-params-per-expert')}M parameters are one "
            f"MoE layer's routed experts, "
            f"while DeepSeek-V3 has {c.n_moe_layers} MoE layers of {c.n_routed_experts}.")


recomputes("v3-2.3.2-expert-weight-total", method="article: 657.4B x 2 B, in GiB", why=_expert_total_why)(
    _expert_total_gib)
recomputes("v3-2.3.2-params-per-expert", method="article: 3 x 14.68M")(
    lambda: P("v3-2.3.1-sublayers-per-expert") * P("v3-2.3.1-params-per-sublayer"))
recomputes("v3-2.3.2-bytes-per-expert-mb", method="article: 44.04M x 2 B, in MB")(
    lambda: _params("v3-2.3.2-params-per-expert") * P("v3-2.3.1-bytes-per-param-fp16") / MB)
recomputes("v3-2.3.2-bytes-per-expert-mib", method="article: 88.08 MB in MiB")(
    lambda: P("v3-2.3.2-bytes-per-expert-mb") * MB / MiB)
recomputes("v3-2.3.2-tiered-total", method="article: 1.31 + 5.25 + 14.44 GiB")(
    lambda: P("v3-2.3.2-gpu-hot-bytes") + P("v3-2.3.2-cpu-warm-bytes") + P("v3-2.3.2-ssd-cold-bytes"))
recomputes("v3-2.3.2-tiered-reduction", method="article: 1 - 21.00 / 1,224.4, %")(
    lambda: (1 - P("v3-2.3.2-tiered-total") / P("v3-2.3.2-expert-weight-total")) * PCT)
recomputes("v3-2.3.2-kv-total-80", method="article: 80 x 0.143 GiB")(
    lambda: P("v3-2.3.2-concurrency") * P("v3-2.3.2-kv-mla-per-user"))
recomputes("v3-2.3.2-kv-optimised", "v3-2.3.3-kv-optimised", method="article: 11.44 GiB x (1 - 0.2)")(
    lambda: P("v3-2.3.2-kv-total-80") * (1 - P("v3-2.3.2-kv-opt-factor")))
recomputes("v3-2.3.2-kv-saving", method="article: (11.44 - 9.15) / 11.44, %")(
    lambda: (P("v3-2.3.2-kv-total-80") - P("v3-2.3.2-kv-optimised")) / P("v3-2.3.2-kv-total-80") * PCT)
recomputes("v3-2.3.2-dense-weight-bytes", "v3-2.3.3-dense-weight-bytes", method="article: 24.8B x 2 B, in GiB")(
    lambda: _dense_gib("v3-2.3.1-dense-params", "v3-2.3.1-bytes-per-param-fp16"))
for _sec, _tp in (("2.3.2", "v3-2.3.2-tp8"), ("2.3.3", "v3-2.3.3-tp8")):
    recomputes(f"v3-{_sec}-dense-shard-per-card", method="article: 46.2 GiB / 8")(
        (lambda s, t: lambda: P(f"v3-{s}-dense-weight-bytes") / P(t))(_sec, _tp))
    recomputes(f"v3-{_sec}-kv-shard-per-card", method="article: 9.15 GiB / 8")(
        (lambda s, t: lambda: P(f"v3-{s}-kv-optimised") / P(t))(_sec, _tp))

recomputes("v3-2.3.3-usable-hbm", method="article: 59.6 GiB x 90%")(
    lambda: P("v3-2.3.3-hbm-per-card") * P("v3-2.3.3-usable-pct") / PCT)
recomputes("v3-2.3.3-expert-shard-per-card", method="article: 1.31 GiB / 8")(
    lambda: P("v3-2.3.3-gpu-hot-bytes") / P("v3-2.3.3-tp8"))

_CARD_TERMS = ("v3-2.3.3-dense-shard-per-card", "v3-2.3.3-expert-shard-per-card", "v3-2.3.3-kv-shard-per-card",
               "v3-2.3.3-activation-mem", "v3-2.3.3-system-reserve")


def per_card_total() -> float:
    """The article's per-card memory: dense + hot experts + KV shards, activations, reserve (GiB)."""
    return sum(P(t) for t in _CARD_TERMS)


def _per_card_why():
    c = _cfg()
    full, n, hbm = P("v3-2.3.1-full-weight-mem"), P("v3-2.3.3-tp8"), P("v3-2.3.3-hbm-per-card")
    terms = " + ".join(f"{P(t)}" for t in _CARD_TERMS)
    return (f"{terms} = {per_card_total():.2f} GiB, as printed twice above. The plan itself leaves out most of the "
            f"model: its {P('v3-2.3.3-gpu-hot-experts'):g} cached experts are experts of one MoE layer "
            f"({P('v3-2.3.3-gpu-hot-bytes')} GiB) out of {c.n_moe_layers} layers x {c.n_routed_experts}; the "
            f"article's own FP16 weights, {full:,.1f} GiB, are {full / n:.1f} GiB per card of a TP={n:g} replica, "
            f"{full / n / hbm:.1f}x the {hbm} GiB of HBM.")


recomputes("v3-2.3.3-per-card-total", method="article: 5.77 + 0.16 + 1.14 + 1.86 + 5.59 GiB")(per_card_total)
recomputes("v3-2.3.3-per-card-total-alt", method="article: 5.77 + 0.16 + 1.14 + 1.86 + 5.59 GiB (the same sum)",
           why=_per_card_why)(per_card_total)
recomputes("v3-2.3.3-hbm-util", method="article: 14.52 / 59.6, %")(
    lambda: P("v3-2.3.3-per-card-total") / P("v3-2.3.3-hbm-per-card") * PCT)
recomputes("v3-2.3.3-hbm-headroom", method="article: 59.6 - 14.52 GiB")(
    lambda: P("v3-2.3.3-hbm-per-card") - P("v3-2.3.3-per-card-total"))
recomputes("v3-2.3.3-hbm-headroom-pct", method="article: 45.08 / 59.6, %")(
    lambda: P("v3-2.3.3-hbm-headroom") / P("v3-2.3.3-hbm-per-card") * PCT)
recomputes("v3-2.3.3-cpu-mem-total", method="article: 119.2 GiB x 4 nodes")(
    lambda: P("v3-2.3.3-cpu-mem-per-node") * P("v3-2.3.3-nodes"))
recomputes("v3-2.3.3-ssd-total", method="article: 1.86 TiB x 4 nodes")(
    lambda: P("v3-2.3.3-ssd-per-node") * P("v3-2.3.3-nodes"))

#: The article sections this chapter covers (exact section names, per article).
SECTIONS = {"v3": ("1.2.2", "1.2.3", "2.1.1", "2.2.1", "2.2.2", "2.2.3", "2.2.4", "2.2.5", "2.2.6", "2.2.7", "2.2.8",
                   "2.2.9.1", "2.2.9.3", "2.3.1", "2.3.2", "2.3.3")}
#: The claims this module recomputes.
CLAIM_IDS = tuple(k for k in _REGISTRY if k not in _BEFORE)
