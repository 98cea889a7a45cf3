import math
import time

import numpy as np
import pytest

from pdcalc import throughput as th
from pdcalc.errors import ConfigError, LayoutError, UnknownNameError
from pdcalc.hardware import get_card
from pdcalc.inventory import get_inventory
from pdcalc.memory import card_weights
from pdcalc.model import load_config
from pdcalc.parallel import expected_remote_cards

V3 = "deepseek-v3"
CFG = load_config(V3)
INV = get_inventory(V3)


def _params(pred):
    return sum(t.params for t in INV.tensors if t.part == "main" and pred(t))


# non-routed tensors computed in full on every TP card (not TP-split, not a lookup, not the head)
N_REPL = _params(lambda t: t.shard == "replicated" and t.category not in ("routed_experts", "embedding", "lm_head"))
N_HEAD = _params(lambda t: t.category == "lm_head")


# ------------------------------------------------------------------ FLOPs
def test_decode_attention_flops_by_hand():
    # absorbed MLA: per layer 2 x heads x L x (2 x 512 + 64); 61 layers, 128 heads, L = 1000
    assert th.attention_flops_per_token(V3, 1000, phase="decode") == 61 * 2 * 128 * 1000 * 1088
    c = CFG
    expect = c.num_hidden_layers * 2 * c.num_attention_heads * 1000 * (2 * c.kv_lora_rank + c.qk_rope_head_dim)
    assert th.attention_flops_per_token(V3, 1000, phase="decode") == expect


def test_prefill_attention_flops_by_hand():
    # naive MLA, causal: a 3-token prompt attends to (3 + 1) / 2 = 2 positions per token on average;
    # per head 128 nope + 64 rope key dims and 128 value dims
    assert th.attention_flops_per_token(V3, 3, phase="prefill") == pytest.approx(61 * 2 * 128 * 2 * 320, rel=1e-12)


def test_flops_per_token_is_two_per_activated_parameter_plus_attention():
    act = INV.activated()
    assert act / 1e9 == pytest.approx(37, rel=0.02)          # the official "37B activated"
    f = th.flops_per_token(V3, 4096, phase="decode")
    assert f == pytest.approx(2 * act + th.attention_flops_per_token(V3, 4096, phase="decode"), rel=1e-12)
    # prefill: the output head produces logits for the last position only
    L = 4096
    fp = th.flops_per_token(V3, L, phase="prefill")
    assert fp == pytest.approx(2 * (act - N_HEAD) + 2 * N_HEAD / L
                               + th.attention_flops_per_token(V3, L, phase="prefill"), rel=1e-12)


def test_absorbed_decode_attention_exceeds_the_matmuls_at_long_context():
    # 61 x 2 x 128 x 1088 = 16,990,208 FLOP per cached token: past ~4,300 tokens the attention core
    # costs more than the 2 x 36.6B matmul FLOPs
    crossover = 2 * INV.activated() / (61 * 2 * 128 * 1088)
    assert 4000 < crossover < 4500
    assert th.attention_flops_per_token(V3, 5000) > 2 * INV.activated()


def test_flops_vectorized_over_context():
    L = np.array([1, 1024, 4096])
    out = th.flops_per_token(V3, L, phase="decode")
    assert out.shape == (3,)
    assert out[2] == pytest.approx(th.flops_per_token(V3, 4096, phase="decode"), rel=1e-12)


# ------------------------------------------------------------------ experts hit
@pytest.mark.parametrize("tokens,expect", [
    (0, 0.0),
    (1, 8.0),                          # one token hits exactly its top-8
    (2, 256 - 248 ** 2 / 256),         # 256 (1 - (248/256)^2) = 15.75
])
def test_expected_experts_hit_by_hand(tokens, expect):
    assert th.expected_experts_hit(tokens, 256, 8) == pytest.approx(expect, rel=1e-12)


def test_expected_experts_hit_saturates():
    assert th.expected_experts_hit(10_000, 256, 8) == pytest.approx(256, rel=1e-9)
    hit = th.expected_experts_hit(np.arange(0, 200), 256, 8)
    assert np.all(np.diff(hit) > 0)


# ------------------------------------------------------------------ communication
def test_tp_allreduce_per_layer_by_hand():
    card = get_card("ascend-910b2")
    b, t = th.tp_allreduce_per_layer(V3, card, tokens=80, tp=8, comm_eff=0.7)
    assert b == pytest.approx(2 * 7 / 8 * 80 * 7168 * 2, rel=1e-12)   # ring: 2 (t-1)/t of 80 x 7168 x 2 B
    assert t == pytest.approx(b / (0.7 * 196e9), rel=1e-12)            # HCCS 196 GB/s per device, one way


def test_tp_allreduce_at_the_articles_token_count():
    # the article's N = 7168 x 80 x 2048 x 2 B = 2,348,810,240 B; the ring sends 2 x 7/8 of it per card
    b, _ = th.tp_allreduce_per_layer(V3, "ascend-910b2", tokens=80 * 2048, tp=8)
    assert b == pytest.approx(2 * 0.875 * 2_348_810_240, rel=1e-12)


def test_tp_allreduce_beyond_a_node_uses_scale_out():
    _, t16 = th.tp_allreduce_per_layer(V3, "ascend-910b2", tokens=80, tp=16, comm_eff=1.0)
    assert t16 == pytest.approx(2 * 15 / 16 * 80 * 7168 * 2 / 25e9, rel=1e-12)


def test_ep_alltoall_inside_a_node_by_hand():
    # 8 cards of 32 experts each: a token misses a given remote card with prob C(224, 8) / C(256, 8)
    remote = 7 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert expected_remote_cards(256, 8, 8) == pytest.approx(remote, rel=1e-12)
    b, t = th.ep_alltoall_per_layer(V3, "ascend-910b2", tokens_per_card=100, ep=8, comm_eff=0.5)
    assert b == pytest.approx(100 * remote * 7168 * (1 + 2), rel=1e-12)   # FP8 dispatch + BF16 combine
    assert t == pytest.approx(b / (0.5 * 196e9), rel=1e-12)


def test_ep_alltoall_across_nodes_splits_the_traffic():
    b, t = th.ep_alltoall_per_layer(V3, "h800", tokens_per_card=100, ep=32, comm_eff=1.0)
    f = 7 / 31  # 7 of the 31 remote cards share the node
    assert t == pytest.approx(max(f * b / 200e9, (1 - f) * b / 50e9), rel=1e-12)
    assert th.ep_alltoall_per_layer(V3, "h800", tokens_per_card=100, ep=1) == (0.0, 0.0)


# ------------------------------------------------------------------ the step
def test_single_card_decode_step_by_hand():
    card = get_card("ascend-910b2")
    S, L = 16, 2048
    st = th.step(V3, card, tp=1, dp=1, context=L, concurrency=S, phase="decode", quant="w8a8", mfu=0.5,
                 mbu=0.7, overlap=False)
    assert st.tokens == S
    assert st.flops_per_card == pytest.approx(S * th.flops_per_token(V3, L, phase="decode"), rel=1e-12)
    attn = S * th.attention_flops_per_token(V3, L, phase="decode")
    lin = st.flops_per_card - attn
    assert st.compute_s == pytest.approx(lin / (752e12 * 0.5) + attn / (353.9e12 * 0.5), rel=1e-12)
    w = card_weights(V3, "w8a8", ep=1, tp=1)
    hit = 1 - (1 - 8 / 256) ** S
    kv = S * L * 61 * (512 + 64) * 2
    expect_bytes = w.class_ii_bytes - w.by_category["embedding"] + w.class_i_bytes * hit + kv
    assert st.bytes_per_card == pytest.approx(expect_bytes, rel=1e-12)
    assert st.memory_s == pytest.approx(expect_bytes / (1.6e12 * 0.7), rel=1e-12)
    assert st.comm_s == 0
    assert st.time_s == pytest.approx(max(st.compute_s, st.memory_s), rel=1e-12)
    assert st.bound == "memory"
    assert st.tokens_per_s == pytest.approx(S / st.time_s, rel=1e-12)


def test_tp_duplicates_only_the_replicated_tensors():
    tp, S, L = 8, 64, 1024
    one = th.step(V3, "ascend-910b2", tp=1, dp=1, context=L, concurrency=S, phase="decode")
    st = th.step(V3, "ascend-910b2", tp=tp, dp=1, context=L, concurrency=S, phase="decode")
    extra = (tp - 1) * S * 2 * N_REPL   # wq_a, wkv_a, router, norms run on every TP card
    assert st.flops_per_card * tp == pytest.approx(one.flops_per_card + extra, rel=1e-12)


def test_ep_spreads_expert_compute_evenly():
    S, L = 256, 1024
    a = th.step(V3, "h800", tp=1, dp=32, ep=32, context=L, concurrency=S, phase="decode", quant="fp8")
    b = th.step(V3, "h800", tp=1, dp=1, context=L, concurrency=S, phase="decode", quant="fp8")
    assert a.flops_per_card * 32 == pytest.approx(b.flops_per_card, rel=1e-12)


def test_overlap_takes_the_max_of_the_three_terms():
    kw = dict(tp=8, dp=1, context=2048, concurrency=64, phase="decode")
    no = th.step(V3, "ascend-910b2", overlap=False, **kw)
    yes = th.step(V3, "ascend-910b2", overlap=True, **kw)
    assert no.time_s == pytest.approx(max(no.compute_s, no.memory_s) + no.comm_s, rel=1e-12)
    assert yes.time_s == pytest.approx(max(yes.compute_s, yes.memory_s, yes.comm_s), rel=1e-12)


def test_prefill_is_compute_bound_and_decode_memory_bound():
    # one 8-card node, EP8 over HCCS: 8 prompts of 4,096 tokens per card vs one new token per sequence
    p = th.step(V3, "ascend-910b2", tp=1, dp=8, ep=8, context=4096, concurrency=64, phase="prefill")
    d = th.step(V3, "ascend-910b2", tp=1, dp=8, ep=8, context=4096, concurrency=64, phase="decode")
    assert p.tokens == 64 * 4096 and d.tokens == 64
    assert p.bound == "compute" and p.compute_s > 10 * p.memory_s
    assert d.bound == "memory" and d.memory_s > d.compute_s


def test_step_is_vectorized():
    L = np.array([1024, 4096])
    S = np.array([[16], [128]])
    st = th.step(V3, "ascend-910b2", tp=1, dp=8, ep=8, context=L, concurrency=S, phase="decode")
    assert st.tokens_per_s.shape == (2, 2) and st.bound.shape == (2, 2)
    one = th.step(V3, "ascend-910b2", tp=1, dp=8, ep=8, context=4096, concurrency=128, phase="decode")
    assert st.tokens_per_s[1, 1] == pytest.approx(one.tokens_per_s, rel=1e-12)
    assert st.bound[1, 1] == one.bound


def test_step_is_fast():
    th.step(V3, "ascend-910b2", tp=8, dp=4, context=2048, concurrency=80, phase="decode")  # warm caches
    t0 = time.perf_counter()
    th.step(V3, "ascend-910b2", tp=8, dp=4, context=np.arange(1, 8193), concurrency=80, phase="decode")
    assert time.perf_counter() - t0 < 0.05


def test_the_articles_fp16_layout_does_not_fit():
    # 32 cards as TP=8 x DP=4 at 2 bytes per parameter: every card of a replica holds 1/8 of the model
    st = th.step(V3, "ascend-910b2", tp=8, dp=4, context=2048, concurrency=80, phase="decode", quant="fp16-all")
    assert not st.fits
    assert st.stored_bytes_per_card > INV.params() * 2 / 8   # more than the experts' 1/8 share alone
    ok = th.step(V3, "ascend-910b2", tp=1, dp=32, ep=32, context=2048, concurrency=80, phase="decode")
    assert ok.fits


def test_kv_bytes_per_token_matches_the_published_figure():
    assert th.kv_bytes_per_token(V3) == 70_272   # arXiv 2505.09343, Table 1


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("kw,match", [
    (dict(tp=3, dp=1), "tp=3 does not divide the 128 attention heads"),
    (dict(tp=8, dp=1, ep=3), r"ep=3 does not divide the 8 cards \(tp x dp = 8 x 1\)"),
    (dict(tp=1, dp=512, ep=512), "ep=512 exceeds the 256 routed experts"),
    (dict(tp=0, dp=1), "tp must be an integer >= 1"),
    (dict(tp=1, dp=1, mfu=0), r"mfu must be in \(0, 1\]"),
    (dict(tp=1, dp=1, comm_eff=1.5), r"comm_eff must be in \(0, 1\]"),
    (dict(tp=1, dp=1, overlap="yes"), "overlap must be True or False"),
    (dict(tp=1, dp=1, concurrency=0), "concurrency must be > 0"),
    (dict(tp=1, dp=1, context=0), "context must be >= 1"),
    (dict(tp=1, dp=1, phase="train"), "phase must be one of prefill, decode"),
])
def test_bad_layouts_say_why(kw, match):
    args = dict(context=1024, concurrency=8, phase="decode") | kw
    with pytest.raises(LayoutError, match=match):
        th.step(V3, "ascend-910b2", **args)


def test_missing_peak_names_the_dtype_and_can_be_overridden():
    with pytest.raises(UnknownNameError, match="int8"):
        th.step(V3, "ascend-910c", tp=1, dp=1, context=1024, concurrency=8, phase="decode", quant="w8a8")
    st = th.step(V3, "ascend-910c", tp=1, dp=1, context=1024, concurrency=8, phase="decode", quant="w8a8",
                 peak_flops_per_s=1.5e15)
    assert st.time_s > 0


def test_non_mla_model_is_refused():
    with pytest.raises(ConfigError, match="deepseek_v3"):
        th.flops_per_token("deepseek-v4-flash", 1024)


# ------------------------------------------------------------------ published measurements
def test_published_runs_read_the_measurements_registry():
    per_card = {r.measurement: th.measured_per_card(r) for r in th.PUBLISHED_RUNS}
    assert per_card == pytest.approx({
        "deepseek-prod-h800-prefill-per-node": 73.7e3 / 8,     # ~73.7k tokens/s per 8-GPU node
        "deepseek-prod-h800-decode-per-node": 14.8e3 / 8,      # ~14.8k tokens/s per node
        "cloudmatrix384-r1-prefill-per-npu": 6688,
        "cloudmatrix384-r1-decode-per-npu-tpot50": 1943,
    })
    assert all(r.conditions and r.source for r in th.PUBLISHED_RUNS)


def test_compare_published_table():
    df = th.compare_published()
    assert len(df) == len(th.PUBLISHED_RUNS)
    assert df["ratio"].tolist() == pytest.approx(
        (df["predicted_tokens_per_s_per_card"] / df["measured_tokens_per_s_per_card"]).tolist(), rel=1e-12)
    # decode runs the batch the measurement implies: tokens/s per card x seconds per output token
    dec = df[df.measurement == "deepseek-prod-h800-decode-per-node"].iloc[0]
    assert dec["sequences_per_card"] == pytest.approx(14.8e3 / 8 / 21, rel=1e-12)
    pre = df[df.measurement == "deepseek-prod-h800-prefill-per-node"].iloc[0]
    assert pre["sequences_per_card"] == pytest.approx(16 * 1024 / 4096, rel=1e-12)
    # a roofline with 50 % MFU / 70 % MBU lands within a factor of 3 of every measurement
    assert df["ratio"].between(1 / 3, 3).all(), df[["measurement", "ratio"]]
    assert set(df["bound"]) <= set(th.BOUNDS)
    assert df["source"].str.len().gt(0).all()
