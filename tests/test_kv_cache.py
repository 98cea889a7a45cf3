import math

import numpy as np
import pytest

from pdcalc.core.errors import ConfigError, LayoutError, PdcalcError, UnknownNameError
from pdcalc.hardware.cards import card_names, get_card
from pdcalc.model.config import load_config
from pdcalc.model.kv_cache import (ARTICLE_PER_TOKEN_KB, ASSUMPTIONS, article_kv_bytes, kv_bytes, mla_bytes_per_token,
                                   sequences_that_fit)
from pdcalc.model.kv_layout import ASCEND_DSV4_BLOCK_SIZES, ENGINE_BY_FAMILY, ENGINES, default_engine, engine_layout

V4 = "deepseek-v4-flash"
V3 = "deepseek-v3"
EXACT = 1e-12  # byte counts are integers held in float64: only rounding noise is allowed


def _ru576(x):
    """Round up to vLLM's 576 B FlashMLA alignment (MLAAttentionSpec alignment=576)."""
    return math.ceil(x / 576) * 576


def _v4_counts():
    cfg = load_config(V4)
    main = cfg.compress_ratios[: cfg.num_hidden_layers]
    return cfg, main.count(4), main.count(128)


# --- DeepSeek-V3 MLA --------------------------------------------------------------------------
def test_v3_mla_bf16_matches_paper_table():
    # arXiv 2505.09343 Table 1: DeepSeek-V3 KV cache 70,272 B/token (61 layers x 576 x 2 B)
    assert mla_bytes_per_token(V3) == 70_272
    r = kv_bytes(V3, 1000, "reference", include_mtp=False)
    assert r.per_token_bytes_asymptotic == 70_272
    assert r.total_bytes == pytest.approx(70_272 * 1000, rel=EXACT)
    assert r.mla_bytes_per_token_bf16 == 70_272


def test_v3_vllm_cache_dtypes():
    cfg = load_config(V3)
    layers = cfg.num_hidden_layers + cfg.num_nextn_predict_layers
    slope = {d: engine_layout("vllm", V3, kv_cache_dtype=d).per_token_bytes() for d in ("auto", "fp8", "fp8_ds_mla")}
    assert slope["auto"] == layers * 576 * 2
    assert slope["fp8"] == layers * 576
    assert slope["fp8_ds_mla"] == layers * 656  # 512 fp8 + 4 fp32 scales + 64 x 2 B bf16


def test_v3_mtp_adds_one_mla_layer():
    with_mtp = kv_bytes(V3, 4096, "vllm-ascend").total_bytes
    without = kv_bytes(V3, 4096, "vllm-ascend", include_mtp=False).total_bytes
    assert with_mtp - without == pytest.approx(4096 * 576 * 2, rel=EXACT)  # 4096 is a whole number of 128-token pages


# --- DeepSeek-V4 structure --------------------------------------------------------------------
def test_v4_layer_census():
    lay = engine_layout("reference", V4)
    counts = {k.key: k.n_layers for k in lay.layer_kinds}
    assert counts == {"swa": 2, "c4": 21, "c128": 20, "mtp:swa": 1}


def _expected_slope(engine):
    cfg, n4, n128 = _v4_counts()
    hd, ihd = cfg.head_dim, cfg.index_head_dim
    if engine == "reference":  # bf16 entries of head_dim / index_head_dim values
        return n4 * (hd * 2 / 4 + ihd * 2 / 4) + n128 * hd * 2 / 128
    if engine == "vllm":  # 256-token blocks; 584 B main entries, 132 B indexer entries, 576 B-aligned pages
        return (n4 * (_ru576(64 * 584) + _ru576(64 * 132)) + n128 * _ru576(2 * 584)) / 256
    # vllm-ascend, block 128: pages of 128 compressed entries spanning 128 x ratio tokens
    return n4 * (128 * hd * 2 + 128 * 130) / (128 * 4) + n128 * 128 * hd * 2 / (128 * 128)


@pytest.mark.parametrize("engine", ENGINES)
def test_v4_slope_is_compressed_entries_over_ratio(engine):
    r = kv_bytes(V4, 65536, engine)
    assert r.per_token_bytes_asymptotic == pytest.approx(_expected_slope(engine), rel=EXACT)


@pytest.mark.parametrize("engine", ENGINES)
def test_v4_total_is_fixed_plus_slope_on_page_boundaries(engine):
    # 16,384 tokens is a whole number of pages of every cache in every engine
    ctx = np.array([16384, 32768, 131072])
    r = kv_bytes(V4, ctx, engine)
    expected = r.fixed_bytes + r.per_token_bytes_asymptotic * ctx
    np.testing.assert_allclose(r.total_bytes, expected, rtol=EXACT)


@pytest.mark.parametrize("engine", ENGINES)
def test_v4_fixed_part_independent_of_context(engine):
    ctx = np.array([1, 4096, 100_000, 1_000_000])
    r = kv_bytes(V4, ctx, engine)
    windowed = r.by_cache["window"] + r.by_cache["state"] + r.by_cache["indexer_state"]
    np.testing.assert_allclose(windowed, np.full(ctx.shape, r.fixed_bytes), rtol=EXACT)
    assert r.fixed_bytes > 0


def test_v4_reference_fixed_bytes_from_buffer_shapes():
    cfg, n4, n128 = _v4_counts()
    layers = cfg.num_hidden_layers + cfg.num_nextn_predict_layers
    window = layers * cfg.sliding_window * cfg.head_dim * 2                 # bf16 ring buffer, every layer
    c4_states = n4 * (2 * 8 * 1024 * 4 + 2 * 8 * 256 * 4)                    # kv+score [8, 1024] + indexer [8, 256], fp32
    c128_states = n128 * 2 * 128 * 512 * 4                                   # kv+score [128, 512], fp32
    assert kv_bytes(V4, 1024, "reference").fixed_bytes == window + c4_states + c128_states


@pytest.mark.parametrize("engine", ENGINES)
def test_v4_monotone_in_context(engine):
    ctx = np.arange(1, 300_000, 1009)
    total = kv_bytes(V4, ctx, engine).total_bytes
    assert np.all(np.diff(total) >= 0)
    assert kv_bytes(V4, 65536, engine).total_bytes > kv_bytes(V4, 32768, engine).total_bytes


@pytest.mark.parametrize("engine, one_window_layer_bytes", [
    ("reference", 128 * 512 * 2),                 # window_size x head_dim x bf16
    ("vllm", (128 // 64 + 1) * _ru576(64 * 584)),  # 3 pages of 64 tokens x 584 B
    ("vllm-ascend", (128 // 128 + 1) * 128 * 512 * 2),  # 2 pages of 128 tokens x 1,024 B
])
def test_v4_mtp_adds_one_sliding_window_layer(engine, one_window_layer_bytes):
    a = kv_bytes(V4, 50_000, engine)
    b = kv_bytes(V4, 50_000, engine, include_mtp=False)
    assert a.total_bytes - b.total_bytes == pytest.approx(one_window_layer_bytes, rel=EXACT)
    assert a.by_layer_kind["mtp:swa"] == pytest.approx(one_window_layer_bytes, rel=EXACT)
    assert "mtp:swa" not in b.by_layer_kind


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model", [V3, V4])
def test_breakdowns_add_up(engine, model):
    ctx = np.array([1, 777, 16384, 123_457])
    r = kv_bytes(model, ctx, engine)
    np.testing.assert_allclose(sum(r.by_layer_kind.values()), r.total_bytes, rtol=EXACT)
    np.testing.assert_allclose(sum(r.by_cache.values()), r.total_bytes, rtol=EXACT)
    np.testing.assert_allclose(r.per_token_bytes_average, r.total_bytes / ctx, rtol=EXACT)


@pytest.mark.parametrize("engine", ENGINES)
def test_vectorised_equals_scalar(engine):
    ctx = [5, 4096, 16385, 131072]
    arr = kv_bytes(V4, np.array(ctx), engine).total_bytes
    assert [kv_bytes(V4, c, engine).total_bytes for c in ctx] == pytest.approx(list(arr), rel=EXACT)


def test_ascend_pages_whole_ratio128_block_for_short_contexts():
    # a ratio-128 page spans 128 x 128 = 16,384 tokens: one sequence of 1 token already holds one per layer
    _, n4, n128 = _v4_counts()
    r = kv_bytes(V4, 1, "vllm-ascend")
    assert r.by_cache["compressed"] == (n4 + n128) * 128 * 1024


@pytest.mark.parametrize("block", sorted(ASCEND_DSV4_BLOCK_SIZES))
def test_ascend_padded_state_pages_match_entry_bytes(block):
    # get_dsv4_block_sizes pads states to the main page (t2) and the indexer page (t1): both must
    # equal block rows x our entry bytes (1,024 B bf16 main, 130 B int8 + fp16 scale indexer)
    (mla_rows, _, _, _), (t1, t2) = ASCEND_DSV4_BLOCK_SIZES[block]
    assert t2 == mla_rows * 512 * 2
    assert t1 == mla_rows * 130
    lay = engine_layout("vllm-ascend", V4, block_size=block)
    c4 = next(k for k in lay.layer_kinds if k.key == "c4")
    pages = {c.name: c.page_bytes for c in c4.caches}
    assert pages["compressed"] == pages["state"] == pages["window"] == t2
    assert pages["indexer"] == pages["indexer_state"] == t1


def test_vllm_window_pages_padded_to_full_attention_pages():
    lay = engine_layout("vllm", V4)
    full = set()
    window_like = set()
    for k in lay.layer_kinds:
        for c in k.caches:
            (window_like if c.window_tokens else full).add(c.page_bytes)
    assert window_like <= full  # _get_kv_cache_groups_uniform_groups pads to an existing page size
    assert all(p % 576 == 0 for p in full | window_like)


def test_every_layout_names_known_assumptions_and_sources():
    for model in (V3, V4):
        for engine in ENGINES:
            lay = engine_layout(engine, model)
            assert set(lay.assumptions) <= set(ASSUMPTIONS)
            assert all(c.source for k in lay.layer_kinds for c in k.caches)


@pytest.mark.parametrize("engine", ENGINES)
def test_v4_slope_below_article_optimistic(engine):
    # §6.1: 22 KB/token "乐观估计"; the engines' slopes are all far below it
    assert kv_bytes(V4, 131072, engine).per_token_bytes_asymptotic < ARTICLE_PER_TOKEN_KB["optimistic"] * 1000 / 3


# --- the article's constant -------------------------------------------------------------------
def test_article_scenario_a_arithmetic():
    # §6.3 "30 × 16384 × 44KB = 21.1 GB"
    assert 30 * article_kv_bytes(16384) == 30 * 16384 * 44 * 1000
    assert 30 * article_kv_bytes(16384, kb=1024) == 30 * 16384 * 44 * 1024
    # the printed 21.1 GB is what 16K = 16,000 gives, to the printed 0.1 GB
    assert 30 * article_kv_bytes(16000) == pytest.approx(21.1e9, abs=0.05e9)
    assert 30 * article_kv_bytes(16384) != pytest.approx(21.1e9, abs=0.05e9)


def test_article_transfer_and_prefill_figures():
    assert article_kv_bytes(8000) == 352e6                                  # §7.2 "8000 × 44KB = 352 MB"
    assert article_kv_bytes(4096) == pytest.approx(180e6, abs=0.5e6)        # §6.2 "4096 × 44KB ≈ 180 MB"
    np.testing.assert_array_equal(article_kv_bytes(np.array([1, 2])), [44_000, 88_000])


def test_article_upper_bound_is_two_kb_per_layer():
    # §6.1: "43 × 2 KB = 86 KB/token (保守上界)"
    assert ARTICLE_PER_TOKEN_KB["upper"] == load_config(V4).num_hidden_layers * 2
    assert article_kv_bytes(1, per_token_kb=ARTICLE_PER_TOKEN_KB["upper"]) == 86_000


def test_article_kb_convention_checked():
    with pytest.raises(LayoutError):
        article_kv_bytes(10, kb=1023)
    with pytest.raises(PdcalcError):
        article_kv_bytes(-1)


# --- capacity ---------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_sequences_that_fit_brackets_budget(engine):
    budget = 43e9
    for ctx in (4096, 16384, 32768):
        n = sequences_that_fit(budget, ctx, V4, engine)
        per_seq = kv_bytes(V4, ctx, engine).total_bytes
        assert n * per_seq <= budget < (n + 1) * per_seq


def test_sequences_that_fit_broadcasts():
    budgets = np.array([[1e9], [43e9]])
    ctx = np.array([4096, 131072])
    n = sequences_that_fit(budgets, ctx, V4, "vllm-ascend", 128)
    assert n.shape == (2, 2)
    assert n[1, 0] == sequences_that_fit(43e9, 4096, V4, "vllm-ascend", 128)
    assert np.all(n[1] >= n[0])
    assert sequences_that_fit(0, 4096, V4) == 0


# --- errors -----------------------------------------------------------------------------------
def test_unknown_engine_lists_known_engines():
    with pytest.raises(UnknownNameError) as exc:
        kv_bytes(V4, 4096, "sglang")
    for name in ENGINES:
        assert name in str(exc.value)


@pytest.mark.parametrize("bad", [-1, 0, 2.5, np.array([4096, -5]), "4096"])
def test_impossible_context_raises(bad):
    with pytest.raises(PdcalcError):
        kv_bytes(V4, bad, "vllm")


@pytest.mark.parametrize("engine, block", [("vllm", 128), ("vllm", 300), ("vllm-ascend", 256), ("reference", 128)])
def test_bad_block_size_raises(engine, block):
    with pytest.raises(LayoutError):
        engine_layout(engine, V4, block_size=block)


def test_vllm_larger_block_still_valid():
    assert engine_layout("vllm", V4, block_size=512).block_size == 512


def test_v4_cache_format_is_fixed_per_engine():
    with pytest.raises(LayoutError):
        engine_layout("vllm-ascend", V4, kv_cache_dtype="fp8")
    assert engine_layout("vllm", V4, kv_cache_dtype="auto").kv_cache_dtype == "fp8_ds_mla"


def test_a_negative_budget_holds_nothing_and_a_non_finite_one_is_refused():
    # weights that do not fit leave a negative budget: a result (no sequence, no context), not an error
    from pdcalc.model.kv_cache import max_context

    assert sequences_that_fit(-1.0, 4096, V4) == 0
    assert sequences_that_fit(np.array([-5e9, 37e9]), 4096, V4).tolist()[0] == 0
    assert max_context(-5e9, 30, V4) == 0
    for bad in (math.inf, math.nan):
        with pytest.raises(PdcalcError, match="finite"):
            sequences_that_fit(bad, 4096, V4)
        with pytest.raises(PdcalcError, match="finite"):
            max_context(bad, 30, V4)


def test_max_context_without_a_declared_limit(tmp_path):
    import json
    from importlib import resources

    from pdcalc.model.kv_cache import CONTEXT_LIMIT_TOKENS, max_context

    cfg = json.loads(resources.files("pdcalc").joinpath("data", "models", "deepseek_v4_flash_config.json").read_text())
    del cfg["max_position_embeddings"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert max_context(1e15, 1, str(path)) == CONTEXT_LIMIT_TOKENS
    assert max_context(37e9, 30, str(path)) == max_context(37e9, 30, V4)


def test_max_context_is_the_last_context_that_fits():
    from pdcalc.model.kv_cache import max_context

    budget, n = 37e9, 30
    lstar = max_context(budget, n, "deepseek-v4-flash")
    assert n * kv_bytes("deepseek-v4-flash", lstar).total_bytes <= budget
    assert n * kv_bytes("deepseek-v4-flash", lstar + 1).total_bytes > budget
    assert max_context(budget, n, "deepseek-v4-flash", limit_tokens=1000) == 1000   # the limit itself fits
    assert max_context(1.0, 1, "deepseek-v4-flash") == 0                           # not one token fits
    with pytest.raises(LayoutError):
        max_context(budget, 0, "deepseek-v4-flash")



# -- default engine per card family ------------------------------------------------------------------
@pytest.mark.parametrize("card", card_names())
def test_default_engine_follows_the_card_family(card):
    c = get_card(card)
    expected = {"nvidia": "vllm", "ascend": "vllm-ascend"}[c.family]
    assert default_engine(card) == default_engine(c) == ENGINE_BY_FAMILY[c.family] == expected
    assert expected in ENGINES


def test_default_engine_of_named_cards_and_card_files(tmp_path):
    assert default_engine("h200") == default_engine("h100") == "vllm"
    assert default_engine("ascend-910b2") == default_engine("ascend-910c") == "vllm-ascend"
    body = ("hbm_bytes = 1e11\nhbm_bandwidth_bytes_per_s = 2e12\nflops_per_s = {bf16 = 1e15}\n"
            "intra_node_bytes_per_s = 1e11\nscale_out_bytes_per_s = 1e10\n")
    p = tmp_path / "npu.toml"
    p.write_text("family = 'ascend'\n" + body)
    assert default_engine(str(p)) == "vllm-ascend"
    p.write_text("family = 'nvidia'\n" + body)
    assert default_engine(str(p)) == "vllm"
    p.write_text(body)
    with pytest.raises(ConfigError, match="field 'family': missing"):
        default_engine(str(p))
    with pytest.raises(UnknownNameError):
        default_engine("tpu-v9")
