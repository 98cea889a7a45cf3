"""V3 article §2.2.2-2.2.3: TP all-reduce times against the compute of a layer, and the card and
replica counts the article derives from compute.
"""

from __future__ import annotations

import math

from pdcalc.audit.registry import recomputes
from pdcalc.audit.v3_common import MS, PCT, PFLOPS, TFLOPS, P, printed_params, v3_config
from pdcalc.audit.v3_kv import article_mla_kv_bytes_per_token, article_trad_kv_bytes_per_token
from pdcalc.core.units import GiB, dtype_bytes


# ================================================================== §2.2.2 TP: memory and all-reduce
def dense_gib(params_id, bytes_id):
    return printed_params(params_id) * P(bytes_id) / GiB


recomputes("v3-2.2.2-dense-weight-bytes", method="article: 24.8B x 2 B, in GiB")(
    lambda: dense_gib("v3-2.2.2-dense-params", "v3-2.2.2-bytes-per-param-fp16"))
recomputes("v3-2.2.2-usable-hbm", method="article: 59.6 GiB x 0.9")(
    lambda: P("v3-2.2.2-hbm-per-card") * P("v3-2.2.2-usable-fraction"))
recomputes("v3-2.2.2-min-tp", method="article: ceil(46.2 / 53.6)")(
    lambda: math.ceil(P("v3-2.2.2-dense-weight-bytes") / P("v3-2.2.2-usable-hbm")))
recomputes("v3-2.2.2-dense-shard-per-card", method="article: 46.2 GiB / 8")(
    lambda: P("v3-2.2.2-dense-weight-bytes") / P("v3-2.2.2-tp8"))


def ar_payload_bytes(tokens: float) -> float:
    """The article's all-reduce payload: hidden_size x tokens x 2 bytes."""
    return P("v3-2.2.2-hidden-size") * tokens * P("v3-2.2.2-bytes-per-param-fp16")


recomputes("v3-2.2.2-comm-bytes-per-layer", method="article: 7168 x 80 x 2048 x 2 B")(
    lambda: ar_payload_bytes(P("v3-2.2.2-batch-size") * P("v3-2.2.2-seq-len")))
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
    lambda: P("v3-2.2.2-flops-per-param") * printed_params("v3-2.2.2-active-params"))
recomputes("v3-2.2.2-flops-per-layer-token", method="article: 74e9 / 61")(
    lambda: P("v3-2.2.2-flops-per-token") / P("v3-2.2.2-num-layers"))
recomputes("v3-2.2.2-replica-flops", method="article: 376 TFLOPS x 0.5 x 8 cards, FLOP/s")(
    lambda: P("v3-2.2.2-fp16-tflops-per-card") * P("v3-2.2.2-mfu") * P("v3-2.2.3-cards-per-replica") * TFLOPS)


def layer_compute_ms(tokens: float) -> float:
    """The article's per-layer compute time for ``tokens`` tokens: 1.213e9 x tokens / 1.504e15."""
    return P("v3-2.2.2-flops-per-layer-token") * tokens / P("v3-2.2.2-replica-flops") / MS


recomputes("v3-2.2.2-compute-time-per-layer", method="article: 1.213e9 x 80 / 1.504e15 s, in ms")(
    lambda: layer_compute_ms(P("v3-2.2.2-batch-size")))
for _tp in (4, 8, 16):
    recomputes(f"v3-2.2.2-tp{_tp}-comm-compute-ratio", method=f"article: TP={_tp} communication / compute time")(
        (lambda t: lambda: P(f"v3-2.2.2-tp{t}-comm-time") / P("v3-2.2.2-compute-time-per-layer"))(_tp))


def comm_share(tp: int) -> float:
    """The article's communication share: comm / (comm + compute), with its printed times, %."""
    c = P(f"v3-2.2.2-tp{tp}-comm-time")
    return c / (c + P("v3-2.2.2-compute-time-per-layer")) * PCT


recomputes("v3-2.2.2-comm-share", method="article: TP=8 communication / (communication + compute), %")(
    lambda: comm_share(8))


def matched_comm_share(tp: int) -> float:
    """Communication share at ``tp`` when the all-reduce and the compute cover the same tokens (the
    article's own bandwidth, compute rate and formulas), %. Independent of the token count."""
    seqs = P("v3-2.2.2-batch-size") * P("v3-2.2.2-seq-len")
    comm = P("v3-2.2.2-ring-factor") * (tp - 1) / tp * ar_payload_bytes(seqs) / (P("v3-2.2.2-effective-bw") * GiB)
    compute = layer_compute_ms(seqs) * MS
    return comm / (comm + compute) * PCT


def _overhead_why():
    b, s = P("v3-2.2.2-batch-size"), P("v3-2.2.2-seq-len")
    return (f"With its own times the share of communication is {P('v3-2.2.2-tp8-comm-time')} / "
            f"({P('v3-2.2.2-tp8-comm-time')} + {P('v3-2.2.2-compute-time-per-layer')}) = {comm_share(8):.2f}% at TP=8 "
            f"and {comm_share(16):.2f}% at TP=16 (the '{P('v3-2.2.2-comm-share')}%' a few lines above); "
            f"{P('v3-2.2.2-tp8-overhead-pct')}% and {P('v3-2.2.2-tp16-overhead-pct')}% follow from none of its "
            f"numbers (their table is lost; they sit near the all-reduce times in ms). Both shares also compare "
            f"unlike work: the all-reduce carries {b:g} x {s:g} = {b * s:,.0f} tokens, the "
            f"{P('v3-2.2.2-compute-time-per-layer')} ms of compute {b:g}. For the same {b * s:,.0f} tokens compute "
            f"takes {layer_compute_ms(b * s):.0f} ms per layer and communication is {matched_comm_share(8):.1f}% "
            f"of the time at TP=8, {matched_comm_share(16):.1f}% at TP=16 (for any token count), not "
            f"{P('v3-2.2.2-comm-share')}%.")


recomputes("v3-2.2.2-tp8-overhead-pct", method="article's times: TP=8 comm / (comm + compute), %",
           why=_overhead_why)(lambda: comm_share(8))
recomputes("v3-2.2.2-tp16-overhead-pct", method="article's times: TP=16 comm / (comm + compute), %",
           why=_overhead_why)(lambda: comm_share(16))


def _mla_comm_why():
    c = v3_config()
    t, m = article_trad_kv_bytes_per_token(), article_mla_kv_bytes_per_token()
    return (f"The TP all-reduce sums hidden states ({c.hidden_size} values x {dtype_bytes('bf16'):g} B per token), which MLA does not "
            f"change: MLA shrinks the KV cache ({t:,.0f} -> {m:,.0f} B per token, {t / m:.1f}x), not the "
            f"activations the TP group exchanges. The all-reduce volume is the same with and without MLA.")


recomputes("v3-2.2.2-mla-comm-compression", method="all-reduce payload without MLA / with MLA: hidden_size x tokens "
           "x 2 B either way, ratio 1", why=_mla_comm_why)(lambda: 1.0)


# ---- §2.2.2-2.2.3 compute-based card and replica counts
recomputes("v3-2.2.2-compute-demand", method="article: 37B x 2 x 50,000 tokens/s, PFLOPS")(
    lambda: printed_params("v3-2.2.2-active-params") * P("v3-2.2.2-flops-per-param")
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


def full_weight_gib() -> float:
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


def article_throughput(tflops: float, active_id: str, per_param_id: str) -> float:
    """The article's compute-bound tokens/s: TFLOPS / (activated params x 2 FLOP)."""
    return tflops * TFLOPS / (printed_params(active_id) * P(per_param_id))


recomputes("v3-2.2.3-replica-throughput", method="article: 1,504 TFLOPS / (37B x 2)")(
    lambda: article_throughput(P("v3-2.2.3-replica-tflops"), "v3-2.2.3-active-params", "v3-2.2.3-flops-per-param"))
recomputes("v3-2.2.3-dp-replicas-3", method="article: ceil(50,000 / 20,324)")(
    lambda: math.ceil(P("v3-2.2.3-target-throughput") / P("v3-2.2.3-replica-throughput")))
for _n, _dp in (("2", "v3-2.2.3-dp-replicas-2"), ("3", "v3-2.2.3-dp-replicas-3")):
    recomputes(f"v3-2.2.3-dp{_n}-total-tflops", method=f"article: 1,504 TFLOPS x {_n}")(
        (lambda d: lambda: P("v3-2.2.3-replica-tflops") * P(d))(_dp))
    recomputes(f"v3-2.2.3-dp{_n}-throughput", method=f"article: 1,504 TFLOPS x {_n} / (37B x 2)")(
        (lambda d: lambda: article_throughput(P("v3-2.2.3-replica-tflops") * P(d), "v3-2.2.3-active-params",
                                       "v3-2.2.3-flops-per-param"))(_dp))
