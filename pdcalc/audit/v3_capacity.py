"""V3 article §2.2.4 and §2.2.7-2.2.9: throughput and latency of the 32- and 24-card layouts.
"""

from __future__ import annotations

from pdcalc.audit.registry import recomputes
from pdcalc.audit.v3_common import MS, PCT, P
from pdcalc.audit.v3_tp import article_throughput

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
    return article_throughput(P(tflops_id), "v3-2.2.7-active-params", "v3-2.2.7-flops-per-param")


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

# the 80% targets of §2.2.8 (65,037 and 48,778 tokens/s) print again §2.2.7's expected throughputs and are
# judged with them (same_as in the claims data)
for _c in ("32", "24"):
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
