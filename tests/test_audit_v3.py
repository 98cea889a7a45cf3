import math
import re

import pytest

from pdcalc.audit import architecture, claims, registry, v3_article, v3_kv, v3_memory, v3_tp
from pdcalc.model.config import load_config
from pdcalc.model.kv_cache import mla_bytes_per_token

CFG = load_config("deepseek-v3")
SECTIONS = ("1.2.2", "2.2.2", "2.2.3", "2.2.4", "2.2.7", "2.2.8", "2.2.9.3", "2.3.1", "2.3.2", "2.3.3")


@pytest.fixture(scope="module")
def v3():
    return {c.id: c for c in claims.claims("v3")}


def test_no_v3_claim_is_pending(v3):
    assert [cid for cid, c in v3.items() if c.verdict == "pending"] == []


def test_no_problems():
    assert claims.problems("v3") == []
    assert claims.problems() == []


def test_every_derived_claim_of_the_chapter_is_recomputed_here(v3):
    derived = {cid for cid, c in v3.items() if c.kind == "derived" and c.section in SECTIONS}
    others = set(architecture.CLAIM_IDS)
    # a derived number printed again is judged with its first occurrence (same_as), recomputed here
    repeats = {cid for cid in derived if v3[cid].same_as and v3[cid].same_as in v3_article.CLAIM_IDS}
    assert derived - others - repeats <= set(v3_article.CLAIM_IDS)
    assert set(v3_article.CLAIM_IDS) <= set(v3)
    assert not set(v3_article.CLAIM_IDS) & others


def test_recomputations_are_finite_numbers(v3):
    for cid in v3_article.CLAIM_IDS:
        r = v3[cid].recomputed
        assert isinstance(r, (int, float)) and math.isfinite(r), cid


def test_errata_explanations_carry_numbers(v3):
    for cid in v3_article.CLAIM_IDS:
        c = v3[cid]
        if c.verdict == "erratum":
            assert re.search(r"\d", c.explanation), cid


# ------------------------------------------------------------------ the article's formulas vs the official cache
def test_article_kv_formulas_by_hand():
    assert v3_kv.article_trad_kv_bytes_per_token() == 2 * 7168 * 61 * 2 == 1_748_992
    assert v3_kv.article_mla_kv_bytes_per_token() == (512 + 64) * 61 * 2 == 70_272
    assert v3_kv.article_mla_kv_bytes_per_token() == mla_bytes_per_token("deepseek-v3")
    assert v3_kv.tokens_128k() == 128 * 1024


def test_cited_128k_sizes_are_gib_and_the_mla_one_lacks_rope(v3):
    trad = v3["v3-1.2.2-kv-traditional-128k"]
    assert trad.recomputed == pytest.approx(1_748_992 * 131_072 / 1e9, rel=1e-12)   # 229.2 GB
    assert 1_748_992 * 131_072 / 2**30 == pytest.approx(213.5, abs=0.05)             # the printed 213.5 is GiB
    assert trad.verdict == "erratum"
    mla = v3["v3-1.2.2-kv-mla-128k"]
    assert mla.verdict == "erratum"
    latent_only = CFG.num_hidden_layers * CFG.kv_lora_rank * 2 * 131_072 / 2**30
    assert latent_only == pytest.approx(7.6, abs=0.05)
    assert v3["v3-1.2.2-kv-compression-ratio"].verdict == "match"      # 213.5 / 7.6 = 28.1
    assert v3["v3-1.2.2-kv-mla-per-token"].verdict == "match"          # 7.6 GiB / 131,072 = 0.0594 MiB


@pytest.mark.parametrize("cid", ["v3-2.2.3-kv-mla-per-token", "v3-2.3.1-kv-mla-per-token"])
def test_0070_mib_is_mb(v3, cid):
    c = v3[cid]
    assert c.recomputed == pytest.approx(70_272 / 2**20, rel=1e-12)    # 0.0670 MiB
    assert round(70_272 / 1e6, 3) == c.value                           # 0.070 is MB
    assert c.verdict == "erratum" and "MB" in c.explanation


@pytest.mark.parametrize("cid", ["v3-2.2.3-kv-per-user", "v3-2.3.1-kv-mla-per-user", "v3-2.3.2-kv-mla-per-user"])
def test_0143_gib_divides_mib_by_1000(v3, cid):
    c = v3[cid]
    assert c.recomputed == pytest.approx(0.070 * 2048 / 1024, rel=1e-12)
    assert c.verdict == "erratum"


def test_traditional_per_user(v3):
    c = v3["v3-2.3.1-kv-traditional-per-user"]
    assert c.recomputed == pytest.approx(1.668 * 2048 / 1024, rel=1e-12)   # 3.336, printed 3.41
    assert c.verdict == "erratum"


# ------------------------------------------------------------------ §2.2.2 all-reduce vs compute
def test_allreduce_chain(v3):
    assert v3["v3-2.2.2-comm-bytes-per-layer"].recomputed == 7168 * 80 * 2048 * 2 == 2_348_810_240
    assert v3["v3-2.2.2-n-over-b"].recomputed == pytest.approx(2.188 / 83.4, rel=1e-12)
    assert v3["v3-2.2.2-tp4-comm-time"].recomputed == pytest.approx(2 * 0.75 * 0.02623 * 1e3, rel=1e-12)
    tp16 = v3["v3-2.2.2-tp16-comm-time"]
    assert tp16.recomputed == pytest.approx(2 * 0.9375 * 0.02623 * 1e3, rel=1e-12)   # 49.18, printed 49.0
    assert tp16.verdict == "erratum" and "49.18" in tp16.explanation
    assert v3["v3-2.2.2-tp8-comm-time"].verdict == "match"


def test_609x_is_the_articles_arithmetic(v3):
    c = v3["v3-2.2.2-tp4-comm-compute-ratio"]
    assert c.recomputed == pytest.approx(39.3 / 0.0645, rel=1e-12) and c.verdict == "match"
    assert v3["v3-2.2.2-compute-time-per-layer"].recomputed == pytest.approx(1.213e9 * 80 / 1.504e15 * 1e3)


def test_matched_token_count_share():
    # the same 163,840 tokens on both sides, with the article's own 83.4 GiB/s and 1.504e15 FLOP/s
    comm = 2 * 7 / 8 * 2_348_810_240 / (83.4 * 2**30)
    compute = 1.213e9 * 163_840 / 1.504e15
    assert v3_tp.matched_comm_share(8) == pytest.approx(comm / (comm + compute) * 100, rel=1e-12)
    assert 25 < v3_tp.matched_comm_share(8) < 27


def test_overhead_percentages_are_errata_that_say_why(v3):
    for cid in ("v3-2.2.2-tp8-overhead-pct", "v3-2.2.2-tp16-overhead-pct"):
        c = v3[cid]
        assert c.verdict == "erratum"
        assert f"{v3_tp.matched_comm_share(8):.1f}%" in c.explanation
    assert v3["v3-2.2.2-tp8-overhead-pct"].recomputed == pytest.approx(45.9 / (45.9 + 0.0645) * 100)


def test_mla_does_not_compress_the_allreduce(v3):
    c = v3["v3-2.2.2-mla-comm-compression"]
    assert c.recomputed == 1 and c.verdict == "erratum"


# ------------------------------------------------------------------ §2.2.3 replicas and users
def test_user_capacity(v3):
    assert v3["v3-2.2.3-kv-mem-per-replica"].recomputed == pytest.approx((59.6 - 5.77) * 8 * 0.8)
    assert v3["v3-2.2.3-kv-user-capacity"].recomputed == math.floor(344.5 / 0.143) == 2409
    alt = v3["v3-2.2.3-kv-user-capacity-alt"]
    assert alt.verdict == "erratum" and "2,409" in alt.explanation
    assert v3["v3-2.2.3-replica-throughput"].recomputed == pytest.approx(1504e12 / 74e9)
    assert v3["v3-2.2.3-dp-replicas-3"].recomputed == math.ceil(50_000 / 20_324) == 3


# ------------------------------------------------------------------ §2.2.4-2.2.8 throughput and latency
def test_peak_throughput_slip(v3):
    for cid in ("v3-2.2.4-peak-throughput-32", "v3-2.2.7-peak-throughput-32", "v3-2.2.8-peak-throughput-32"):
        assert v3[cid].recomputed == pytest.approx(6016e12 / 74e9)      # 81,297.3, printed 81,296
        assert v3[cid].verdict == "erratum"
    assert v3["v3-2.2.7-expected-throughput-32"].verdict == "rounding"   # 4,812.8 / 74 = 65,037.8
    assert v3["v3-2.2.7-expected-throughput-24"].verdict == "match"      # 3,609.6 / 74 = 48,778.4


def test_conservative_baselines(v3):
    assert v3["v3-2.2.8-conservative-throughput-32"].recomputed == pytest.approx(81_296 * 0.7)
    c24 = v3["v3-2.2.8-conservative-throughput-24"]
    assert c24.recomputed == pytest.approx(60_972 * 0.7)                 # 42,680.4
    # "42,700" is precise to 100 under the registry's rule (trailing zeros not significant)
    assert c24.verdict == "match"


@pytest.mark.parametrize("cards,tput,latency", [("32", 65_037, 7.9), ("24", 48_778, 10.5)])
def test_latency_contradicts_throughput(v3, cards, tput, latency):
    c = v3[f"v3-2.2.8-latency-target-{cards}"]
    assert c.recomputed == pytest.approx(80 / tput * 1e3, rel=1e-12)
    assert c.verdict == "erratum"
    assert f"{80 / (latency / 1e3):,.0f} tokens/s" in c.explanation


def test_conservative_latencies_follow_the_articles_ratio(v3):
    assert v3["v3-2.2.8-latency-conservative-32"].recomputed == pytest.approx(7.9 * 0.8 / 0.7)
    assert v3["v3-2.2.8-latency-conservative-32"].verdict == "match"
    assert v3["v3-2.2.8-latency-conservative-24"].verdict == "match"


# ------------------------------------------------------------------ §2.3 memory plan
def test_total_memory_lines(v3):
    for cid in ("v3-2.3.1-total-mem", "v3-2.3.1-total-mem-alt"):
        assert v3[cid].recomputed == pytest.approx(1281.4 + 11.44 + 93.1)
        assert v3[cid].verdict == "erratum"
    w = v3["v3-2.3.1-weights-in-total"]
    assert w.recomputed == pytest.approx(46.2 + 1224.4) and w.verdict == "erratum"
    assert v3["v3-2.3.1-cards-for-storage"].recomputed == math.ceil(1385.2 / 59.6) == 24


def test_expert_tiers_hold_one_layer(v3):
    tiers = v3["v3-2.3.2-tiered-total"]
    assert tiers.recomputed == pytest.approx(1.31 + 5.25 + 14.44) and tiers.verdict == "match"
    assert (16 + 64 + 176) == CFG.n_routed_experts
    # 256 experts of one layer vs the article's 1,224.4 GiB of expert weights
    ratio = 1224.5029 / (256 * 84.0 / 1024)
    c = v3["v3-2.3.2-expert-weight-total"]
    assert c.verdict == "erratum"
    assert f"{ratio:.1f}x" in c.explanation and f"{CFG.n_moe_layers} MoE layers" in c.explanation


def test_per_card_totals(v3):
    # the printed sum holds (§2.3.3: 5.77 + 0.16 + 1.14 + 1.86 + 5.59 = 14.52 GiB) ...
    assert v3_memory.per_card_total() == pytest.approx(5.77 + 0.16 + 1.14 + 1.86 + 5.59)
    assert v3_memory.per_card_total() == pytest.approx(registry.printed_value("v3-2.3.3-per-card-total"))
    # ... but the plan leaves out the experts: both printings are judged against the plan with every expert
    # (the article's own full weights over TP=8, §2.3.1: 1,270.7 GiB / 8)
    for cid in ("v3-2.3.3-per-card-total", "v3-2.3.3-per-card-total-alt"):
        c = v3[cid]
        assert c.recomputed == pytest.approx(v3_memory.per_card_all_weights_gib(), rel=1e-12)
        assert c.recomputed > 1270.7 / 8 > registry.printed_value("v3-2.3.3-hbm-per-card")
        assert c.verdict == "erratum" and c.severity == "major"
        assert f"{1270.7 / 8:.1f} GiB per card" in c.explanation
    assert "more than the sum above it" in v3["v3-2.3.3-per-card-total-alt"].explanation
    assert v3["v3-2.3.3-ssd-total"].verdict == "rounding"               # 1.86 x 4 = 7.44, printed 7.45


# ------------------------------------------------------------------ premises and one verdict per quantity
def test_optimised_kv_cannot_be_below_the_tokens_it_holds(v3):
    """§2.3.2/§2.3.3: 11.44 GiB x (1 - 0.2) = 9.15 GiB holds as arithmetic, but 80 sequences of 2,048 tokens
    of 70,272 B need 80 x 2,048 x 70,272 B whatever the paging."""
    from pdcalc.core.units import GiB
    from pdcalc.model.kv_cache import kv_bytes

    floor = 80 * kv_bytes("deepseek-v3", 2048, "vllm-ascend", include_mtp=False).total_bytes / GiB
    assert floor == pytest.approx(80 * 2048 * 70_272 / 2**30, rel=1e-12)
    assert v3_memory.kv_floor_gib() == pytest.approx(floor, rel=1e-12)
    for cid in ("v3-2.3.2-kv-optimised", "v3-2.3.3-kv-optimised"):
        c = v3[cid]
        assert c.recomputed == pytest.approx(floor, rel=1e-12)
        assert c.value < c.recomputed and c.verdict == "erratum" and c.severity
        assert f"{floor:.2f} GiB" in c.explanation
    # the multiplication the article prints does hold
    assert 11.44 * (1 - 0.2) == pytest.approx(registry.printed_value("v3-2.3.2-kv-optimised"), abs=0.005)


@pytest.mark.parametrize("ids", [
    ("v3-1.2-hbm-per-card", "v3-2.2.1-hbm-per-card", "v3-2.2.2-hbm-per-card", "v3-2.2.3-hbm-per-card",
     "v3-2.3.1-hbm-per-card", "v3-2.3.3-hbm-per-card"),                    # 59.6 GiB
    ("v3-2.2.2-dense-params", "v3-2.3.1-dense-params"),                      # 24.8B dense
])
def test_a_wrong_input_is_wrong_wherever_it_is_printed(v3, ids):
    assert {v3[i].verdict for i in ids} == {"erratum"}
    assert len({(v3[i].recomputed, v3[i].severity) for i in ids}) == 1


def test_throughputs_printed_twice_are_judged_once(v3):
    """60,972 and 65,037 tokens/s are printed in §2.2.3-§2.2.9; each is one quantity, truncated, wherever
    printed: 4,512 / 74 and 4,812.8 / 74 TFLOPS per 1e9 FLOP."""
    for ids, exact in ((("v3-2.2.3-dp3-throughput", "v3-2.2.7-peak-throughput-24", "v3-2.2.8-peak-throughput-24"),
                        4512e12 / 74e9),
                       (("v3-2.2.4-expected-throughput-32", "v3-2.2.7-expected-throughput-32",
                         "v3-2.2.8-target-throughput-32", "v3-2.2.9.3-expected-throughput-32"), 4812.8e12 / 74e9)):
        for i in ids:
            assert v3[i].recomputed == pytest.approx(exact, rel=1e-12), i
            assert v3[i].verdict == "rounding", i
