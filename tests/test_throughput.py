import math

import numpy as np
import pytest

from pdcalc.core.errors import ConfigError, LayoutError, UnknownNameError
from pdcalc.hardware import cards as cards_mod
from pdcalc.hardware.cards import get_card
from pdcalc.layout.memory import card_weights
from pdcalc.layout.parallel import expected_remote_cards
from pdcalc.model.config import load_config
from pdcalc.model.inventory import get_inventory
from pdcalc.perf import comm, routing, schedule, speculative, traffic
from pdcalc.perf import flops as flops_mod
from pdcalc.perf import kernels as kernels_
from pdcalc.perf import shape as shape_mod
from pdcalc.perf import step as th
from pdcalc.reality import published_runs

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
    assert flops_mod.attention_flops_per_token(V3, 1000, phase="decode") == 61 * 2 * 128 * 1000 * 1088
    c = CFG
    expect = c.num_hidden_layers * 2 * c.num_attention_heads * 1000 * (2 * c.kv_lora_rank + c.qk_rope_head_dim)
    assert flops_mod.attention_flops_per_token(V3, 1000, phase="decode") == expect


def test_prefill_attention_flops_by_hand():
    # naive MLA, causal: a 3-token prompt attends to (3 + 1) / 2 = 2 positions per token on average;
    # per head 128 nope + 64 rope key dims and 128 value dims
    assert flops_mod.attention_flops_per_token(V3, 3, phase="prefill") == pytest.approx(61 * 2 * 128 * 2 * 320, rel=1e-12)


def test_flops_per_token_is_two_per_activated_parameter_plus_attention():
    act = INV.activated()
    assert act / 1e9 == pytest.approx(37, rel=0.02)          # the official "37B activated"
    f = flops_mod.flops_per_token(V3, 4096, phase="decode")
    assert f == pytest.approx(2 * act + flops_mod.attention_flops_per_token(V3, 4096, phase="decode"), rel=1e-12)
    # prefill: the output head produces logits for the last position only
    L = 4096
    fp = flops_mod.flops_per_token(V3, L, phase="prefill")
    assert fp == pytest.approx(2 * (act - N_HEAD) + 2 * N_HEAD / L
                               + flops_mod.attention_flops_per_token(V3, L, phase="prefill"), rel=1e-12)


def test_absorbed_decode_attention_exceeds_the_matmuls_at_long_context():
    # 61 x 2 x 128 x 1088 = 16,990,208 FLOP per cached token: past ~4,300 tokens the attention core
    # costs more than the 2 x 36.6B matmul FLOPs
    crossover = 2 * INV.activated() / (61 * 2 * 128 * 1088)
    assert 4000 < crossover < 4500
    assert flops_mod.attention_flops_per_token(V3, 5000) > 2 * INV.activated()


def test_flops_vectorized_over_context():
    L = np.array([1, 1024, 4096])
    out = flops_mod.flops_per_token(V3, L, phase="decode")
    assert out.shape == (3,)
    assert out[2] == pytest.approx(flops_mod.flops_per_token(V3, 4096, phase="decode"), rel=1e-12)


# ------------------------------------------------------------------ experts hit
@pytest.mark.parametrize("tokens,expect", [
    (0, 0.0),
    (1, 8.0),                          # one token hits exactly its top-8
    (2, 256 - 248 ** 2 / 256),         # 256 (1 - (248/256)^2) = 15.75
])
def test_expected_experts_hit_by_hand(tokens, expect):
    assert routing.expected_experts_hit(tokens, 256, 8) == pytest.approx(expect, rel=1e-12)


def test_expected_experts_hit_saturates():
    assert routing.expected_experts_hit(10_000, 256, 8) == pytest.approx(256, rel=1e-9)
    hit = routing.expected_experts_hit(np.arange(0, 200), 256, 8)
    assert np.all(np.diff(hit) > 0)


# ------------------------------------------------------------------ communication
def test_tp_allreduce_per_layer_by_hand():
    card = get_card("ascend-910b2")
    b, t = comm.tp_allreduce_per_layer(V3, card, tokens=80, tp=8, comm_eff=0.7)
    assert b == pytest.approx(2 * 7 / 8 * 80 * 7168 * 2, rel=1e-12)   # ring: 2 (t-1)/t of 80 x 7168 x 2 B
    assert t == pytest.approx(b / (0.7 * 196e9), rel=1e-12)            # HCCS 196 GB/s per device, one way


def test_tp_allreduce_at_the_articles_token_count():
    # the article's N = 7168 x 80 x 2048 x 2 B = 2,348,810,240 B; the ring sends 2 x 7/8 of it per card
    b, _ = comm.tp_allreduce_per_layer(V3, "ascend-910b2", tokens=80 * 2048, tp=8)
    assert b == pytest.approx(2 * 0.875 * 2_348_810_240, rel=1e-12)


def test_tp_allreduce_beyond_a_node_uses_scale_out():
    _, t16 = comm.tp_allreduce_per_layer(V3, "ascend-910b2", tokens=80, tp=16, comm_eff=1.0)
    assert t16 == pytest.approx(2 * 15 / 16 * 80 * 7168 * 2 / 25e9, rel=1e-12)


def test_ep_alltoall_inside_a_node_by_hand():
    # 8 cards of 32 experts each: a token misses a given remote card with prob C(224, 8) / C(256, 8)
    remote = 7 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert expected_remote_cards(256, 8, 8) == pytest.approx(remote, rel=1e-12)
    b, t = comm.ep_alltoall_per_layer(V3, "ascend-910b2", tokens_per_card=100, ep=8, comm_eff=0.5)
    assert b == pytest.approx(100 * remote * 7168 * (1 + 2), rel=1e-12)   # FP8 dispatch + BF16 combine
    assert t == pytest.approx(b / (0.5 * 196e9), rel=1e-12)


def test_ep_alltoall_across_nodes_splits_the_traffic():
    b, t = comm.ep_alltoall_per_layer(V3, "h800", tokens_per_card=100, ep=32, comm_eff=1.0)
    f = 7 / 31  # 7 of the 31 remote cards share the node
    assert t == pytest.approx(max(f * b / 200e9, (1 - f) * b / 50e9), rel=1e-12)
    assert comm.ep_alltoall_per_layer(V3, "h800", tokens_per_card=100, ep=1) == (0.0, 0.0)


# ------------------------------------------------------------------ the step
def test_single_card_decode_step_by_hand():
    card = get_card("ascend-910b2")
    S, L = 16, 2048
    st = th.step(V3, card, tp=1, dp=1, context=L, concurrency=S, phase="decode", quant="w8a8", mfu=0.5,
                 mbu=0.7, overlap=False)
    assert st.tokens == S
    assert st.flops_per_card == pytest.approx(S * flops_mod.flops_per_token(V3, L, phase="decode"), rel=1e-12)
    attn = S * flops_mod.attention_flops_per_token(V3, L, phase="decode")
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


def test_step_over_a_context_array_equals_one_step_per_context():
    # one call over 8,192 contexts (its speed is measured in `make bench`) gives each context's own step
    L = np.arange(1, 8193)
    many = th.step(V3, "ascend-910b2", tp=8, dp=4, context=L, concurrency=80, phase="decode")
    assert many.time_s.shape == L.shape
    for i in (0, 1, 2047, 4095, 8191):
        one = th.step(V3, "ascend-910b2", tp=8, dp=4, context=int(L[i]), concurrency=80, phase="decode")
        assert many.time_s[i] == pytest.approx(one.time_s, rel=1e-12)
        assert many.bound[i] == one.bound


def test_the_articles_fp16_layout_does_not_fit():
    # 32 cards as TP=8 x DP=4 at 2 bytes per parameter: every card of a replica holds 1/8 of the model
    st = th.step(V3, "ascend-910b2", tp=8, dp=4, context=2048, concurrency=80, phase="decode", quant="fp16-all")
    assert not st.fits
    assert st.stored_bytes_per_card > INV.params() * 2 / 8   # more than the experts' 1/8 share alone
    ok = th.step(V3, "ascend-910b2", tp=1, dp=32, ep=32, context=2048, concurrency=80, phase="decode")
    assert ok.fits


def test_kv_bytes_per_token_matches_the_published_figure():
    assert traffic.kv_bytes_per_token(V3) == 70_272   # arXiv 2505.09343, Table 1


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("kw,match", [
    (dict(tp=3, dp=1), "TP degree 3 does not divide the 128 attention heads"),
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
    # the H800 preset lists no INT8 peak (the 910C preset gained one, so the example moved to the H800)
    with pytest.raises(UnknownNameError, match="int8"):
        th.step(V3, "h800", tp=1, dp=1, context=1024, concurrency=8, phase="decode", quant="w8a8")
    st = th.step(V3, "h800", tp=1, dp=1, context=1024, concurrency=8, phase="decode", quant="w8a8",
                 peak_flops_per_s=1.5e15)
    assert st.time_s > 0


def test_fp4_experts_run_weight_only_on_a_card_without_fp4_tensor_cores():
    """fp8-fp4 on Hopper: the FP4 routed experts are multiplied at the BF16 peak (Marlin, weight-only), at the
    ceilings of the published weight-only 4-bit GEMMs; the other layers at FP8 as before; on Blackwell, whose tensor
    cores take FP4, and with an explicit compute dtype, the experts run at the scheme's FP8 (DeepGEMM's ceilings)."""
    from pdcalc.perf.inputs import WEIGHT_ONLY_FP4_DTYPE, weight_only_fp4
    from pdcalc.perf.kernels import gemm_ceilings, weight_only_ceiling

    assert weight_only_fp4("fp8-fp4", "h200") and weight_only_fp4("fp8-fp4", "h100")
    assert not weight_only_fp4("fp8-fp4", "b200") and not weight_only_fp4("fp8", "h200")
    wo = weight_only_ceiling()
    # published weight-only 4-bit GEMMs fall short of DeepGEMM's FP8 ones on both ceilings
    for op in ("grouped_contiguous", "grouped_masked"):
        for g in gemm_ceilings(op):
            assert wo.compute_share < g.compute_share and wo.memory_share < g.memory_share
    peaks = get_card("h200").flops_per_s
    for phase, op, ceiling, scale in (("prefill", "grouped_contiguous", "compute_share",
                                       peaks["fp8"] / peaks[WEIGHT_ONLY_FP4_DTYPE]),
                                      ("decode", "grouped_masked", "memory_share", 1.0)):
        kw = dict(tp=4, dp=1, ep=None, context=8192, concurrency=1, phase=phase, quant="fp8-fp4", costs="published")
        hopper = th.step("deepseek-v4-flash", "h200", **kw).breakdown
        fp8 = th.step("deepseek-v4-flash", "h200", compute_dtype="fp8", **kw).breakdown
        # compute-bound prefill: the FP8 peak over the BF16 peak, times the two kernels' compute shares;
        # memory-bound decode: the same FP4 weight bytes at the two kernels' memory shares
        shares = [getattr(g, ceiling) / getattr(wo, ceiling) for g in gemm_ceilings(op)]
        ratio = float(hopper["routed experts"] / fp8["routed experts"])
        assert scale * min(shares) * 0.98 <= ratio <= scale * max(shares) * 1.02, phase
        for part in ("attention GEMMs", "attention core", "dense FFN and shared experts", "TP all-reduce"):
            assert float(hopper[part]) == float(fp8[part]), part
        blackwell = th.step("deepseek-v4-flash", "b200", **kw).breakdown
        assert blackwell == th.step("deepseek-v4-flash", "b200", compute_dtype="fp8", **kw).breakdown
    kw = dict(tp=4, dp=1, ep=None, context=8192, concurrency=1, phase="prefill", quant="fp8-fp4", costs="published")
    sources = {c.component: c for c in th.step("deepseek-v4-flash", "h200", **kw).cost_sources}
    assert sources["GEMM (routed experts)"].applied_to == f"h200 {WEIGHT_ONLY_FP4_DTYPE}"
    assert sources["GEMM (routed experts)"].tables == wo.tables


def test_model_without_a_config_is_refused():
    # the articles' simplified presets carry no config.json, hence no attention structure
    with pytest.raises(ConfigError, match="deepseek_v3"):
        flops_mod.flops_per_token("deepseek-v4-flash-article", 1024)
    with pytest.raises(ConfigError, match="deepseek_v4"):
        th.step("deepseek-v3-article", "ascend-910b2", tp=1, dp=1, context=1024, concurrency=8, phase="decode")


# ------------------------------------------------------------------ published measurements
def test_published_runs_read_the_measurements_registry():
    per_card = {r.measurement: published_runs.measured_per_card(r) for r in published_runs.PUBLISHED_RUNS}
    assert per_card == pytest.approx({
        "deepseek-prod-h800-prefill-per-node": 73.7e3 / 8,     # ~73.7k tokens/s per 8-GPU node
        "deepseek-prod-h800-decode-per-node": 14.8e3 / 8,      # ~14.8k tokens/s per node
        "cloudmatrix384-r1-prefill-per-npu": 6688,
        "cloudmatrix384-r1-decode-per-npu-tpot50": 1943,
    })
    assert all(r.conditions and r.source for r in published_runs.PUBLISHED_RUNS)


def test_compare_published_table():
    df = published_runs.compare_published()
    assert len(df) == len(published_runs.PUBLISHED_RUNS)
    assert df["ratio"].tolist() == pytest.approx(
        (df["predicted_tokens_per_s_per_card"] / df["measured_tokens_per_s_per_card"]).tolist(), rel=1e-12)
    # decode runs the batch the measurement implies: tokens/s per card x seconds per output token
    dec = df[df.measurement == "deepseek-prod-h800-decode-per-node"].iloc[0]
    assert dec["sequences_per_card"] == pytest.approx(14.8e3 / 8 / 21, rel=1e-12)
    pre = df[df.measurement == "deepseek-prod-h800-prefill-per-node"].iloc[0]
    assert pre["sequences_per_card"] == pytest.approx(16 * 1024 / 4096, rel=1e-12)
    # a roofline with 50 % MFU / 70 % MBU lands within a factor of 3 of every measurement
    assert df["ratio"].between(1 / 3, 3).all(), df[["measurement", "ratio"]]
    assert set(df["bound"]) <= set(shape_mod.BOUNDS)
    assert df["source"].str.len().gt(0).all()


# ------------------------------------------------------------------ DeepSeek-V4
V4 = "deepseek-v4-flash"
CFG4 = load_config(V4)
INV4 = get_inventory(V4)
# main layers by kind, from compress_ratios[:43] = [0, 0, (4, 128) x 20, 4]
N_SWA, N_C4, N_C128 = 2, 21, 20
# vllm-ascend on 910B (pdcalc.model.kv_layout): BF16 window and compressed entries of head_dim 512, int8 indexer
# keys of 128 with one fp16 scale
E_WIN, E_COMP, E_IDX = 512 * 2, 512 * 2, 128 + 2


def test_v4_config_fields_behind_the_hand_arithmetic():
    ratios = CFG4.compress_ratios[:CFG4.num_hidden_layers]
    assert (ratios.count(0), ratios.count(4), ratios.count(128)) == (N_SWA, N_C4, N_C128)
    assert (CFG4.num_attention_heads, CFG4.head_dim, CFG4.sliding_window, CFG4.index_topk) == (64, 512, 128, 512)
    assert (CFG4.index_n_heads, CFG4.index_head_dim, CFG4.hidden_size, CFG4.num_experts_per_tok) == (64, 128, 4096, 6)


def _v4_keys(L):
    """Keys one decode query at position L attends to, summed over the 43 main layers."""
    return 43 * min(L, 128) + N_C4 * min(L // 4, 512) + N_C128 * (L // 128)


@pytest.mark.parametrize("L", [1, 10, 600, 5000, 131072])
def test_v4_decode_attention_flops_by_hand(L):
    # scores + weighted sum over a 512-wide latent for 64 heads: 4 x 64 x 512 per key; the indexer scores
    # every L // 4 entry with 64 heads of 128 on the 21 ratio-4 layers
    expect = 4 * 64 * 512 * _v4_keys(L) + 2 * 64 * 128 * N_C4 * (L // 4)
    assert flops_mod.attention_flops_per_token(V4, L, phase="decode") == expect


def test_v4_decode_flops_at_600_tokens_spelled_out():
    # L = 600: 128 window keys on 43 layers, min(150, 512) = 150 selected on 21, 600 // 128 = 4 on 20
    keys = 43 * 128 + 21 * 150 + 20 * 4
    assert keys == 8734
    assert flops_mod.attention_flops_per_token(V4, 600) == 131_072 * 8734 + 16_384 * 21 * 150


def test_v4_prefill_attention_is_the_mean_of_the_decode_queries():
    L = 700
    per_query = sum(flops_mod.attention_flops_per_token(V4, i, phase="decode") for i in range(1, L + 1))
    assert flops_mod.attention_flops_per_token(V4, L, phase="prefill") * L == pytest.approx(per_query, rel=1e-12)


def test_v4_flops_per_token_is_two_per_activated_parameter_plus_attention():
    act = INV4.activated()
    assert act / 1e9 == pytest.approx(13, rel=0.05)      # the official "13B activated"
    assert flops_mod.flops_per_token(V4, 4096) == pytest.approx(2 * act + flops_mod.attention_flops_per_token(V4, 4096), rel=1e-12)


def test_v4_decode_kv_read_by_hand():
    # L = 5000: window 128 on 43 layers; the indexer selects 512 of the 1,250 ratio-4 entries and reads all
    # 1,250 indexer keys; 39 ratio-128 entries
    L = 5000
    expect = 43 * 128 * E_WIN + N_C4 * (512 * E_COMP + 1250 * E_IDX) + N_C128 * 39 * E_COMP
    assert traffic.kv_read_bytes_per_sequence(V4, L) == expect
    # other engines: their own entry sizes (reference: BF16 everywhere; vLLM: 584 B rows, 132 B indexer keys)
    ref = 43 * 128 * 1024 + N_C4 * (512 * 1024 + 1250 * 256) + N_C128 * 39 * 1024
    assert traffic.kv_read_bytes_per_sequence(V4, L, engine="reference") == ref
    vllm = 43 * 128 * 584 + N_C4 * (512 * 584 + 1250 * 132) + N_C128 * 39 * 584
    assert traffic.kv_read_bytes_per_sequence(V4, L, engine="vllm") == vllm


def test_v4_prefill_kv_writes_by_hand():
    L = 5000   # all 1,250 ratio-4 entries are written, not only the 512 a query selects
    expect = 43 * 128 * E_WIN + N_C4 * 1250 * (E_COMP + E_IDX) + N_C128 * 39 * E_COMP
    assert traffic.kv_read_bytes_per_sequence(V4, L, phase="prefill") == expect


def test_v4_sparse_read_is_less_than_a_full_read():
    L = np.array([2048, 16384, 131072])
    sparse = traffic.kv_read_bytes_per_sequence(V4, L)
    full = traffic.kv_read_bytes_per_sequence(V4, L, phase="prefill")   # every stored entry once
    unselected = N_C4 * (L // 4 - 512) * E_COMP
    assert np.all(sparse <= full)
    assert full - sparse == pytest.approx(unselected, rel=1e-12)
    assert sparse[2] < full[2] / 3
    # up to 2,048 tokens the indexer selects every entry: sparse = full
    assert sparse[0] == full[0]
    # and less than the cache the sequence holds (pages, compressor states)
    assert np.all(sparse < traffic.kv_stored_bytes_per_sequence(V4, L))


@pytest.mark.parametrize("engine", ["reference", "vllm", "vllm-ascend"])
def test_v4_stored_kv_is_the_engines_cache_without_mtp(engine):
    from pdcalc.model.kv_cache import kv_bytes
    L = np.array([1, 777, 16384, 100_000])
    expect = kv_bytes(V4, L, engine, include_mtp=False).total_bytes
    assert np.array_equal(traffic.kv_stored_bytes_per_sequence(V4, L, engine=engine), expect)


def test_v4_single_card_decode_step_by_hand():
    card = get_card("ascend-910b2")
    S, L = 1, 600
    st = th.step(V4, card, tp=1, dp=1, context=L, concurrency=S, phase="decode", quant="w8a8", mfu=0.5, mbu=0.7)
    assert st.tokens == 1
    attn = 131_072 * 8734 + 16_384 * 21 * 150
    lin = 2 * INV4.activated()          # one token: every activated parameter, routed experts at 6 / 256
    assert st.flops_per_card == pytest.approx(lin + attn, rel=1e-12)
    assert st.compute_s == pytest.approx(lin / (752e12 * 0.5) + attn / (353.9e12 * 0.5), rel=1e-12)
    w = card_weights(V4, "w8a8", ep=1, tp=1)
    # lookups (embedding, the 3 hash-routing tables) are read a row per token; one token hits 6 of 256 experts
    weights_read = w.class_ii_bytes - w.by_category["embedding"] - w.by_category["hash_routing"] \
        + w.class_i_bytes * 6 / 256
    kv = 43 * 128 * E_WIN + 21 * (150 * E_COMP + 150 * E_IDX) + 20 * 4 * E_COMP
    assert st.bytes_per_card == pytest.approx(weights_read + kv, rel=1e-12)
    assert st.memory_s == pytest.approx((weights_read + kv) / (1.6e12 * 0.7), rel=1e-12)
    assert st.comm_s == 0 and st.comm_bytes_per_card == 0
    assert st.bound == "memory"
    from pdcalc.model.kv_cache import kv_bytes
    assert st.stored_bytes_per_card == pytest.approx(
        w.total_bytes + kv_bytes(V4, L, "vllm-ascend", include_mtp=False).total_bytes, rel=1e-12)
    assert st.time_s == pytest.approx(st.memory_s, rel=1e-12)


def test_v4_single_card_prefill_matches_prefill_flops():
    from pdcalc.perf.flops import prefill_flops
    L = 8000
    st = th.step(V4, "ascend-910b2", tp=1, dp=1, context=L, concurrency=1, phase="prefill")
    # prefill_flops counts the output head on every position; the step only on the last one
    head = INV4.params(category="lm_head")
    assert st.flops_per_card == pytest.approx(prefill_flops(V4, L)["total"] - 2 * head * (L - 1), rel=1e-12)
    assert st.bound == "compute"


def test_v4_tp_adds_the_indexer_score_allreduce():
    card = get_card("ascend-910b2")
    S, L, tp = 16, 4096, 8
    st = th.step(V4, card, tp=tp, dp=1, context=L, concurrency=S, phase="decode", comm_eff=0.7)
    ring = 2 * 7 / 8
    hidden = 43 * 2 * ring * S * 4096 * 2          # 2 all-reduces of the BF16 hidden state per layer
    scores = 21 * ring * S * (4096 // 4) * 2       # BF16 indexer scores of 1,024 entries per ratio-4 layer
    assert st.comm_bytes_per_card == pytest.approx(hidden + scores, rel=1e-12)
    assert st.comm_s == pytest.approx((hidden + scores) / (0.7 * 196e9), rel=1e-12)
    b, _ = comm.indexer_allreduce_per_layer(V4, card, context=L, sequences=S, tp=tp)
    assert b == pytest.approx(ring * S * 1024 * 2, rel=1e-12)


def test_v4_tp_splits_heads_and_duplicates_the_replicated_tensors():
    S, L, tp = 32, 2048, 8
    one = th.step(V4, "ascend-910b2", tp=1, dp=1, context=L, concurrency=S, phase="decode")
    st = th.step(V4, "ascend-910b2", tp=tp, dp=1, context=L, concurrency=S, phase="decode")
    n_repl = sum(t.params for t in INV4.tensors if t.part == "main" and t.shard == "replicated"
                 and t.category not in ("routed_experts", "embedding", "hash_routing", "lm_head"))
    assert st.flops_per_card * tp == pytest.approx(one.flops_per_card + (tp - 1) * S * 2 * n_repl, rel=1e-12)


def test_v4_decode_grows_with_context():
    kw = dict(tp=1, dp=32, ep=32, concurrency=960, phase="decode")
    short = th.step(V4, "ascend-910b2", context=1, **kw)
    long = th.step(V4, "ascend-910b2", context=131072, **kw)
    for f in ("flops_per_card", "bytes_per_card", "stored_bytes_per_card", "time_s"):
        assert getattr(long, f) > getattr(short, f), f
    assert long.tokens_per_s < short.tokens_per_s
    L = np.unique(np.geomspace(1, 131072, 1000).astype(int))
    arr = th.step(V4, "ascend-910b2", context=L, **kw)
    for f in ("flops_per_card", "bytes_per_card", "time_s"):
        assert np.all(np.diff(getattr(arr, f)) >= 0), f


def test_v4_step_is_vectorized():
    kw = dict(tp=1, dp=32, ep=32, phase="decode")
    L = np.array([1024, 16384])
    S = np.array([[320], [960]])
    st = th.step(V4, "ascend-910b2", context=L, concurrency=S, **kw)
    assert st.time_s.shape == (2, 2) and st.bound.shape == (2, 2)
    one = th.step(V4, "ascend-910b2", context=16384, concurrency=960, **kw)
    assert st.tokens_per_s[1, 1] == pytest.approx(one.tokens_per_s, rel=1e-12)
    assert st.bound[1, 1] == one.bound
    L = np.arange(1, 1001) * 131
    big = th.step(V4, "ascend-910b2", context=L, concurrency=960, **kw)
    assert big.time_s.shape == (1000,)
    for i in (0, 499, 999):
        one = th.step(V4, "ascend-910b2", context=int(L[i]), concurrency=960, **kw)
        assert big.time_s[i] == pytest.approx(one.time_s, rel=1e-12)


def test_v4_engine_sets_the_kv_bytes():
    kw = dict(tp=1, dp=8, ep=8, context=65536, concurrency=64, phase="decode")
    ascend = th.step(V4, "ascend-910b2", **kw)
    assert ascend.bytes_per_card == th.step(V4, "ascend-910b2", engine="vllm-ascend", **kw).bytes_per_card
    vllm = th.step(V4, "ascend-910b2", engine="vllm", **kw)   # 584 B FP8 rows instead of 1,024 B BF16
    assert vllm.bytes_per_card < ascend.bytes_per_card
    assert vllm.flops_per_card == ascend.flops_per_card


@pytest.mark.parametrize("kw,match", [
    (dict(tp=3, dp=1), "TP degree 3 does not divide the 64 attention heads"),
    (dict(tp=16, dp=1), "TP degree 16 does not divide the 8 output groups"),
    (dict(tp=8, dp=1, ep=3), r"ep=3 does not divide the 8 cards \(tp x dp = 8 x 1\)"),
    (dict(tp=1, dp=512, ep=512), "ep=512 exceeds the 256 routed experts"),
])
def test_v4_bad_layouts_say_why(kw, match):
    args = dict(context=1024, concurrency=8, phase="decode") | kw
    with pytest.raises(LayoutError, match=match):
        th.step(V4, "ascend-910b2", **args)


def test_engine_names_are_checked():
    kw = dict(tp=1, dp=1, context=1024, concurrency=8, phase="decode")
    with pytest.raises(UnknownNameError, match="engine 'sglang'"):
        th.step(V4, "ascend-910b2", engine="sglang", **kw)
    with pytest.raises(LayoutError, match="engine must be None or 'reference'"):
        th.step(V3, "ascend-910b2", engine="vllm", **kw)
    ref = th.step(V3, "ascend-910b2", engine="reference", **kw)
    assert ref == th.step(V3, "ascend-910b2", **kw)
    with pytest.raises(ConfigError, match="indexer"):
        comm.indexer_allreduce_per_layer(V3, "ascend-910b2", context=1024, sequences=1, tp=8)


def test_layer_times_are_the_step_compute_and_the_allreduce_of_the_same_tokens():
    from pdcalc.hardware.cards import get_card
    from pdcalc.perf import comm as comm_
    from pdcalc.perf import step as tput

    compute, ar = tput.layer_times("deepseek-v3", "ascend-910b2", tp=8, context=2048, concurrency=80, phase="prefill")
    st = tput.step("deepseek-v3", "ascend-910b2", tp=8, dp=1, context=2048, concurrency=80, phase="prefill")
    _, ar_direct = comm_.tp_allreduce_per_layer("deepseek-v3", get_card("ascend-910b2"), tokens=80 * 2048, tp=8,
                                               allreduces=comm_.DEFAULT_ALLREDUCES_PER_LAYER)
    assert compute == pytest.approx(float(st.compute_s) / load_config("deepseek-v3").num_hidden_layers, rel=1e-12)
    assert ar == pytest.approx(ar_direct, rel=1e-12)


# ------------------------------------------------------------------ published costs
from pdcalc.perf import costs as C  # noqa: E402

PUB = dict(costs="published", quant="fp8")


def test_default_cost_model_is_the_roofline_and_names_are_checked():
    kw = dict(tp=1, dp=8, ep=8, context=2048, concurrency=64, phase="decode", quant="fp8")
    assert th.step(V3, "h800", **kw) == th.step(V3, "h800", costs="roofline", **kw)
    assert th.step(V3, "h800", **kw).costs == "roofline" and th.step(V3, "h800", **kw).cost_sources == ()
    with pytest.raises(UnknownNameError, match="cost model"):
        th.step(V3, "h800", costs="measured", **kw)


def test_gemm_ceilings_reproduce_their_rows_and_bound_the_others():
    df = kernels_.gemm_check()
    assert len(df) == len(C.gemm("h800", "fp8", operation="dense")) + len(C.gemm("h800", "fp8", operation=
                                                                                   "grouped_contiguous")) \
        + len(C.gemm("h800", "fp8", operation="grouped_masked"))
    ceiling = df[df.sets_ceiling]
    assert ceiling["ratio"].between(0.99, 1.001).all()       # a ceiling row is its own time (bytes rounding)
    other = df[~df.sets_ceiling]
    assert len(other) == 10                                  # M = 128 dense rows, 2 and 4 masked groups
    # the slower of two ceilings is a lower bound on a kernel's time, within 20 % at intermediate M
    assert other["ratio"].between(0.8, 1.0).all(), other[["m", "n", "k", "ratio"]]


def test_nearest_gemm_shape_and_two_ceilings_by_hand():
    g = kernels_.nearest_gemm("dense", 7168, 16384)                # wo: its own row
    assert (g.n, g.k) == (7168, 16384)
    assert g.flop_per_s == 1520e12 and g.bytes_per_s == 2668e9   # DeepGEMM README, M = 4096 and M = 64 rows
    assert kernels_.nearest_gemm("dense", 7168, 16384 // 8).k == 2048  # TP8 splits wo's input: the 7168 x 2048 row
    # a memory-bound GEMM on the H200 streams its weights at the H800's share of HBM bandwidth
    t, cb = kernels_.gemm_seconds("dense", 7168, 16384, flops=1.0, bytes_moved=1e9, card="h200", dtype="fp8")
    assert not cb and t == pytest.approx(1e9 / (2668e9 / 3.35e12 * 4.8e12), rel=1e-12)


def test_mla_ceilings_are_flashmla_and_amla():
    h = kernels_.attention_ceilings("h800")
    assert h.compute_share == pytest.approx(660 / 989, rel=1e-12)      # FlashMLA 660 TFLOPS, H800 BF16 989
    assert h.memory_share == pytest.approx(3000 / 3350, rel=1e-12)     # 3000 GB/s of 3.35 TB/s
    a = kernels_.attention_ceilings("ascend-910c")
    assert a.compute_share == pytest.approx(614 / 752, rel=1e-12)      # AMLA 614 TFLOPS of the preset's 752
    assert a.memory_share == h.memory_share                             # no Ascend bandwidth figure: carried
    b = kernels_.attention_ceilings("ascend-910b2")                           # no 910B figure: the 910C's, carried
    assert b.compute_share == a.compute_share and all(s.carried for s in b.sources)
    assert not any(s.carried for s in h.sources)


def test_decode_attention_core_by_hand():
    # one sequence of 4,096 tokens on one H800: 61 layers x 2 x 128 heads x 1088 FLOPs per cached token at 660
    # TFLOPS against 61 x 576 x 2 B per token at 3,000 GB/s; the compute ceiling sets it
    st = th.step(V3, "h800", tp=1, dp=1, context=4096, concurrency=1, phase="decode", **PUB)
    f = 61 * 2 * 128 * 1088 * 4096
    b = 61 * 576 * 2 * 4096
    assert st.breakdown["attention core"] == pytest.approx(max(f / 660e12, b / 3000e9), rel=1e-12)


def test_low_latency_rows_are_reproduced_at_their_batch():
    # alpha is the published latency less the published bytes at the link's stated bandwidth: at 128 tokens
    # every DeepEP low-latency row of the H800 comes back exactly
    for p in C.dispatch("h800", mode="low_latency"):
        if p.table_id != "deepep-v1-low-latency-h800":
            continue
        dtype = p.dispatch_dtype if p.operation == "dispatch" else p.combine_dtype
        t, _, src = comm.ep_message_seconds("h800", mode="low_latency", operation=p.operation, ep=p.ep_size,
                                          tokens_per_card=128, n_experts=256, top_k=8, hidden=7168, dtype=dtype)
        assert t == pytest.approx(p.latency_s, rel=1e-9), (p.operation, p.ep_size)
        assert src.tables == ("deepep-v1-low-latency-h800",) and not src.carried
    # and each token beyond costs its copies at the NIC's 50 GB/s (EP128: 15 of 16 nodes away)
    t1, *_ = comm.ep_message_seconds("h800", mode="low_latency", operation="dispatch", ep=128, tokens_per_card=128,
                                   n_experts=256, top_k=8, hidden=7168, dtype="fp8")
    t2, *_ = comm.ep_message_seconds("h800", mode="low_latency", operation="dispatch", ep=128, tokens_per_card=256,
                                   n_experts=256, top_k=8, hidden=7168, dtype="fp8")
    assert t2 - t1 == pytest.approx(128 * 8 * 7168 * (1 + 4 / 128) * (120 / 128) / 50e9, rel=1e-12)


def test_normal_kernels_use_the_published_bandwidth():
    # EP32 on 4 nodes: each token crosses to the remote nodes holding one of its experts, at 58 GB/s
    t, sent, src = comm.ep_message_seconds("h800", mode="normal", operation="dispatch", ep=32, tokens_per_card=1000,
                                         n_experts=256, top_k=8, hidden=7168, dtype="fp8")
    assert sent == pytest.approx(1000 * expected_remote_cards(256, 4, 8) * 7168 * (1 + 4 / 128), rel=1e-12)
    assert t == pytest.approx(sent / 58e9, rel=1e-12)
    assert src.measured_on == "h800" and "alpha = 0" in src.note


def test_carried_costs_are_scaled_and_said():
    # the 910B has no dispatch table: inside a server the 910C's (A3) kernels, beyond it the H800's RDMA rows,
    # both scaled to its own links
    m8 = comm.ep_message_cost("ascend-910b2", mode="normal", operation="dispatch", ep=8)
    a3 = next(p for p in C.dispatch("ascend-910c", 8, "normal", operation="dispatch"))    # EP 8 ranks
    assert m8.intra_bytes_per_s == pytest.approx(a3.bandwidth_bytes_per_s * (196 / (392 / 2)), rel=1e-12)
    m32 = comm.ep_message_cost("ascend-910b2", mode="normal", operation="dispatch", ep=32)
    assert m32.source.measured_on == "h800" and m32.source.carried
    assert m32.inter_bytes_per_s == pytest.approx(58e9 * 25 / 50, rel=1e-12)
    st = th.step(V3, "ascend-910b2", tp=1, dp=32, ep=32, context=2048, concurrency=32 * 16, phase="decode",
                 costs="published")
    by = {s.component: s for s in st.cost_sources}
    assert by["GEMM (dense)"].measured_on == "h800 fp8" and by["GEMM (dense)"].carried
    assert "int8" in by["GEMM (dense)"].applied_to
    assert by["MLA attention, compute"].measured_on == "ascend-910c bf16"
    assert all(s.note for s in st.cost_sources)


def test_allreduce_is_the_nccl_fit_scaled_by_link():
    fit, table, pts = comm.allreduce_fit()
    assert table == "triton-distributed-57-h100-nccl"
    assert 2 * 2**20 in fit.excluded_sizes_bytes          # the 2 MB row is slower than the 4 MB one
    assert fit.max_abs_relative_residual < 0.15
    t = comm.allreduce_seconds("h100", payload_bytes=8 * 2**20, tp=8)
    assert t == pytest.approx(fit.time_s(8 * 2**20), rel=1e-12)
    t910 = comm.allreduce_seconds("ascend-910b2", payload_bytes=8 * 2**20, tp=8)
    assert t910 == pytest.approx(fit.latency_s + 8 * 2**20 / (fit.bandwidth_bytes_per_s * 196 / 450), rel=1e-12)
    assert comm.allreduce_seconds("h100", payload_bytes=1e6, tp=1) == 0


def test_mtp_counts_accepted_tokens_and_costs_its_draft():
    assert speculative.mtp_acceptance_default() == pytest.approx(0.875)        # the report's 85-90 %
    assert speculative.accepted_tokens(3, 0.5) == pytest.approx(0.5 + 0.25 + 0.125)
    kw = dict(tp=1, dp=16, ep=16, context=4096, concurrency=16 * 32, phase="decode", **PUB)
    off = th.step(V3, "h800", **kw)
    on = th.step(V3, "h800", mtp_steps=1, **kw)
    assert on.tokens == pytest.approx(16 * 32 * 1.875, rel=1e-12)
    assert on.time_s > off.time_s and on.breakdown["MTP draft"] > 0
    assert any(s.component == "MTP acceptance" for s in on.cost_sources)
    low = th.step(V3, "h800", mtp_steps=1, mtp_acceptance=0.5, **kw)
    assert low.time_s == pytest.approx(on.time_s, rel=1e-12) and low.tokens < on.tokens
    with pytest.raises(LayoutError, match="mtp_acceptance"):
        th.step(V3, "h800", mtp_steps=1, mtp_acceptance=1.5, **kw)


def test_imbalance_from_the_eplb_table():
    assert routing.imbalance_factor(None) == (1.0, None)
    rho, src = routing.imbalance_factor(True, ep=32, redundant_experts=32)
    assert rho == pytest.approx(1.109) and "redundant" in src.note
    assert "optimistic" in routing.imbalance_factor(True, ep=32)[1].note
    assert routing.imbalance_factor(False, experts_per_rank=8)[0] == pytest.approx(2.564)
    assert routing.imbalance_factor(False, experts_per_rank=32)[0] == pytest.approx(1 + 1.564 / 2)
    # the sqrt scaling is the table's own: ranks of 8 slots spread like 8 independent slots (within 10 %)
    rank = next(p for p in C.expert_imbalance("rank", eplb="none"))
    slot = next(p for p in C.expert_imbalance("expert_slot", eplb="none"))
    assert (rank.std_tokens / rank.mean_tokens) == pytest.approx(slot.std_tokens / slot.mean_tokens
                                                                 / math.sqrt(rank.slots_per_rank), rel=0.1)
    kw = dict(tp=1, dp=32, ep=32, context=4096, concurrency=32 * 4, phase="prefill", **PUB)
    assert th.step(V3, "h800", eplb=False, **kw).time_s > th.step(V3, "h800", eplb=True, redundant_experts=32,
                                                                  **kw).time_s > th.step(V3, "h800", **kw).time_s


def test_redundant_experts_are_held():
    kw = dict(tp=1, dp=32, ep=32, context=1024, concurrency=64, phase="decode", quant="fp8")
    plain = th.step(V3, "h800", **kw)
    more = th.step(V3, "h800", redundant_experts=32, **kw)   # 9 expert slots per card instead of 8
    w = card_weights(V3, "fp8", ep=32)
    assert more.stored_bytes_per_card - plain.stored_bytes_per_card == pytest.approx(w.class_i_bytes / 8, rel=1e-9)
    with pytest.raises(LayoutError, match="expert parallelism"):
        th.step(V3, "h800", tp=1, dp=1, context=1024, concurrency=8, phase="decode", redundant_experts=4)


def test_decode_costs_more_per_sequence_than_the_roofline():
    # an extra sequence per rank costs its attention, its expert rows and its dispatched copies: the published
    # costs put that at 0.34 ms on H800 EP144 (MLA 0.13 ms at 4,989 tokens, DeepEP's per-token copies ~0.17 ms),
    # more than twice the roofline's 0.15 ms
    kw = dict(tp=1, dp=144, ep=144, context=4989, phase="decode", quant="fp8")
    pub = [th.step(V3, "h800", concurrency=144 * b, costs="published", **kw).time_s for b in (64, 65)]
    roof = [th.step(V3, "h800", concurrency=144 * b, overlap=True, **kw).time_s for b in (64, 65)]
    slope_pub, slope_roof = pub[1] - pub[0], roof[1] - roof[0]
    assert 0.25e-3 < slope_pub < 0.45e-3
    assert slope_pub > 2 * slope_roof


def test_overlap_hides_communication_under_the_other_micro_batch():
    kw = dict(tp=1, dp=32, ep=32, context=4096, concurrency=32 * 4, phase="prefill", **PUB)
    serial = th.step(V3, "h800", **kw)
    tbo = th.step(V3, "h800", overlap=True, **kw)
    parts = {k: v for k, v in serial.breakdown.items() if k != "overlap saved"}
    assert serial.time_s == pytest.approx(sum(parts.values()), rel=1e-12)
    assert serial.comm_s < tbo.time_s < serial.time_s          # hides at most the communication
    assert tbo.time_s >= max(tbo.compute_s + tbo.memory_s, tbo.comm_s) / 1.0001
    assert tbo.breakdown["overlap saved"] == pytest.approx(
        sum(v for k, v in tbo.breakdown.items() if k != "overlap saved") - tbo.time_s, rel=1e-9)


def test_overlap_computation_runs_on_the_sms_communication_leaves():
    # DeepSeek's prefill profile: 24 of the H800's 132 SMs to DeepEP's normal kernels, 108 to the computation
    k, src = schedule.overlap_compute_slowdown("h800", "normal")
    assert k == pytest.approx(132 / 108) and src.tables == ("deepseek-profile-prefill-overlap",)
    assert not src.carried and src.measured_on == "h800"
    k100, src100 = schedule.overlap_compute_slowdown("h100", "normal")
    assert k100 == k and src100.carried and "carried to h100" in src100.note
    # its decode: the low-latency kernels hold no SM, carried or not
    for card in ("h800", "h20", "ascend-910c"):
        one, dsrc = schedule.overlap_compute_slowdown(card, "low_latency")
        assert one == 1.0 and dsrc.tables == ("deepseek-profile-decode-overlap",) and not dsrc.carried
    ideal, isrc = schedule.overlap_compute_slowdown("h800", "normal", "ideal")
    assert ideal == 1.0 and isrc.tables == () and "ideal" in isrc.note
    with pytest.raises(UnknownNameError, match="overlap model"):
        schedule.overlap_compute_slowdown("h800", "normal", "perfect")

    # EP8 prefill inside a server: NVLink messages are short, every overlapped segment is computation
    kw = dict(tp=1, dp=8, ep=8, context=4096, concurrency=8 * 4, phase="prefill", overlap=True, beyond=False,
              **PUB)
    ide = th.step(V3, "h800", overlap_model="ideal", **kw)
    pub = th.step(V3, "h800", **kw)
    extra = pub.breakdown["SMs held by communication"]
    assert ide.breakdown["SMs held by communication"] == 0 and extra > 0
    assert pub.compute_s - ide.compute_s == pytest.approx(extra, rel=1e-9)
    assert pub.time_s - ide.time_s == pytest.approx(extra, rel=1e-6)
    # the compute-bound time of the 58 MoE layers (of 61), taken 132/108 times
    assert 0.9 * (k - 1) * ide.compute_s < extra < (k - 1) * ide.compute_s
    assert pub.breakdown["overlap saved"] == pytest.approx(
        sum(v for n, v in pub.breakdown.items() if n != "overlap saved") - pub.time_s, rel=1e-9)
    by = {s.component: s for s in pub.cost_sources}
    assert by["two-micro-batch overlap"].tables == ("deepseek-profile-prefill-overlap",)
    assert {s.component: s for s in ide.cost_sources}["two-micro-batch overlap"].tables == ()
    # serial: no overlap, no SM lost, no overlap source
    ser = th.step(V3, "h800", **(kw | dict(overlap=False)))
    assert "SMs held by communication" not in ser.breakdown
    assert all(s.component != "two-micro-batch overlap" for s in ser.cost_sources)
    # decode overlaps on low-latency kernels: the same step either way
    dkw = kw | dict(phase="decode", context=2048, concurrency=8 * 128)
    assert th.step(V3, "h800", **dkw).time_s == th.step(V3, "h800", overlap_model="ideal", **dkw).time_s
    with pytest.raises(UnknownNameError, match="overlap model"):
        th.step(V3, "h800", overlap_model="perfect", **kw)


def test_published_step_is_vectorized():
    kw = dict(tp=1, dp=16, ep=16, phase="decode", **PUB)
    L = np.array([1024, 4096, 16384])
    many = th.step(V3, "h800", context=L, concurrency=512, **kw)
    for i, l in enumerate(L):
        one = th.step(V3, "h800", context=int(l), concurrency=512, **kw)
        assert many.time_s[i] == pytest.approx(one.time_s, rel=1e-12)
        assert many.bound[i] == one.bound
    assert np.all(np.diff(many.time_s) > 0)


def test_published_v4_step():
    kw = dict(tp=1, dp=16, ep=16, concurrency=320, phase="decode", costs="published")
    st = th.step(V4, "ascend-910b2", context=np.array([1024, 65536]), **kw)
    assert np.all(np.diff(st.time_s) > 0)
    assert any(s.component == "DeepSeek-V4 attention" and s.carried for s in st.cost_sources)


def test_eager_mode_adds_the_published_host_gap():
    kw = dict(tp=1, dp=8, ep=8, context=2048, concurrency=64, phase="decode", costs="published")
    g = th.step(V3, "ascend-910b2", **kw)
    e = th.step(V3, "ascend-910b2", graph=False, **kw)
    assert e.time_s - g.time_s == pytest.approx(61 * 591e-6, rel=1e-12)   # vllm-ascend #9404: 591 us per block


def test_a_profiled_prefill_step_scales_every_prefill_step():
    from pdcalc.perf import costs

    p = next(q for q in costs.overheads("h800") if q.what == "profiled_step")
    assert (p.phase, p.ep_size, p.tokens_per_batch, p.context_tokens) == ("prefill", 32, 16384, 4096)
    k, src = th.beyond_kernels("prefill")
    assert k > 1 and src.tables == (p.table_id,) and th.beyond_kernels("decode") == (1.0, None)
    # at the profile's own conditions the scaled step gives the profiled rate per node, and the kernels alone k x it
    kw = dict(tp=1, dp=p.ep_size, ep=p.ep_size, context=p.context_tokens, phase="prefill", quant=p.dtype,
              concurrency=p.tokens_per_batch * p.ep_size / p.context_tokens, costs="published", overlap=True)
    node = cards_mod.get_card(p.card).cards_per_node
    full, kernels = th.step(V3, p.card, **kw), th.step(V3, p.card, beyond=False, **kw)
    assert float(full.tokens) / full.cards == p.tokens_per_batch                # 16K tokens per GPU, as profiled
    assert float(full.tokens_per_s_per_card) * node == pytest.approx(p.node_tokens_per_s, rel=1e-12)
    assert float(kernels.tokens_per_s_per_card) * node == pytest.approx(k * p.node_tokens_per_s, rel=1e-12)
    assert full.breakdown["beyond the kernel tables"] == pytest.approx((k - 1) / k * float(full.time_s), rel=1e-12)
    own = [s for s in full.cost_sources if s.tables == (p.table_id,)]
    assert len(own) == 1 and not own[0].carried
    other = th.step(V3, "h20", tp=8, dp=1, context=4096, concurrency=4, phase="prefill", quant="fp8",
                    costs="published")
    assert [s.carried for s in other.cost_sources if s.tables == (p.table_id,)] == [True]
    # decode steps take none of it
    dkw = dict(tp=1, dp=8, ep=8, context=4096, concurrency=8 * 64, phase="decode", quant="fp8", costs="published")
    assert th.step(V3, "h800", **dkw).time_s == th.step(V3, "h800", beyond=False, **dkw).time_s
    # an overlap-model what-if is scaled to the same profile, under its own model
    k_ideal, _ = th.beyond_kernels("prefill", "ideal")
    ideal = th.step(V3, p.card, overlap_model="ideal", **kw)
    assert k_ideal > k and float(ideal.tokens_per_s_per_card) * node == pytest.approx(p.node_tokens_per_s, rel=1e-12)
    # the per-step host overhead is not scaled: eager mode adds the same seconds with and without the ratio
    ekw = dict(tp=1, dp=8, ep=8, context=4096, concurrency=8, phase="prefill", quant="fp8", costs="published")
    added = [float(th.step(V3, "h800", graph=False, beyond=b, **ekw).time_s - th.step(V3, "h800", beyond=b, **ekw).time_s)
             for b in (True, False)]
    assert added[0] == pytest.approx(added[1], rel=1e-9) and added[0] > 0
    with pytest.raises(LayoutError, match="beyond must be True or False"):
        th.step(V3, "h800", beyond="no", **ekw)


def test_published_costs_take_a_hardware_file_as_its_preset():
    # a user hardware file with the ascend-910b2 preset's speeds (book/hardware: only the memory differs)
    from pathlib import Path

    f = str(Path(__file__).resolve().parents[1] / "book" / "hardware" / "910b-as-v4-article.toml")
    kw = dict(tp=8, dp=1, context=1000, concurrency=8, quant="w8a8", costs="published")
    for phase in ("prefill", "decode"):
        mine, preset = th.step(V3, f, phase=phase, **kw), th.step(V3, "ascend-910b2", phase=phase, **kw)
        assert float(mine.time_s) == pytest.approx(float(preset.time_s), rel=1e-12), phase
