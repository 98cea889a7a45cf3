"""The model types beyond V3 and V4: DeepSeek-V2 and V2-Lite (deepseek_v2), DeepSeek-V3.2-Exp (deepseek_v32,
MLA with the lightning indexer of DeepSeek Sparse Attention) and Kimi-K2 (kimi_k2).

Their parameter totals are checked against the reference implementations in tests/test_reference.py; here
every command takes them, a field a type needs is named when it is missing, V3.2's indexer cache is sized
per engine from each engine's source, and its step counts the indexer over the whole context and the
attention over the keys it selects.
"""

import json

import numpy as np
import pytest
from cli_harness import assert_clean, run_cli

from pdcalc.model import kv_cache, kv_layout
from pdcalc.model.config import REQUIRED, _data_path, load_config
from pdcalc.perf import flops as flops_mod
from pdcalc.perf import kernels, traffic
from pdcalc.perf import step as tput

PRESETS = ("deepseek-v2", "deepseek-v2-lite", "deepseek-v3.2-exp", "kimi-k2", "deepseek-v4-pro")
V32 = "deepseek-v3.2-exp"


@pytest.mark.parametrize("model", PRESETS)
def test_every_command_takes_every_model_type(model):
    card = "h800"
    for args in (("params", model), ("memory", model, "--card", card, "--ep", "8", "--quant", "bf16"),
                 ("kv", model, "--context", "8192"),
                 ("throughput", model, "--card", card, "--tp", "1", "--dp", "8", "--ep", "8", "--quant", "fp8",
                  "--context", "4096", "--concurrency", "64"),
                 ("plan", "--model", model, "--card", card, "--cards", "16", "--quant", "fp8", "--prompt", "2048",
                  "--output", "512", "--concurrency", "64", "--frontier-points", "0")):
        out = assert_clean(run_cli(*args, "--json"))
        assert out.code == 0, (args, out.err)
        assert out.json["model"] == model


def _write(tmp_path, data):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    return str(p)


@pytest.mark.parametrize("model_type,field", [(t, f) for t in ("deepseek_v2", "deepseek_v32", "kimi_k2")
                                               for f in REQUIRED[t]])
def test_a_missing_field_is_named_in_one_line(tmp_path, model_type, field):
    data = json.loads(_data_path("models", "deepseek_v3_config.json").read_text())
    data |= {"model_type": model_type, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}
    data.pop(field)
    path = _write(tmp_path, data)
    out = assert_clean(run_cli("params", path, "--json"))
    assert out.code == 2 and out.err.count("\n") == 1
    assert f"field '{field}': missing (required for model_type '{model_type}')" in out.err and path in out.err


# ------------------------------------------------------------------------------ V3.2 indexer cache
#: Bytes per token per layer of V3.2-Exp's caches in each engine, as each engine's source allocates them:
#: (MLA latent, indexer key). Reference: inference/model.py L448-449 (fp8 k_cache + fp32 k_scale_cache),
#: L533-534 (bf16 kv_cache + pe_cache); vLLM v0.33.0: DeepseekV32IndexerCache 128 + 4 uint8, the latent in
#: BF16 by default; vllm-ascend@182b75ea: AscendSFAIndexerCacheSpec bf16 without a scale, nope and rope BF16.
V32_PER_LAYER = {"reference": (1152, 132), "vllm": (1152, 132), "vllm-ascend": (1152, 256)}


@pytest.mark.parametrize("engine", kv_layout.ENGINES)
def test_v32_kv_per_token_per_engine(engine):
    cfg = load_config(V32)
    latent, index = V32_PER_LAYER[engine]
    assert (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 2 == latent
    assert kv_layout.indexer_entry_bytes(cfg, engine) == index
    r = kv_cache.kv_bytes(cfg, 1 << 16, engine, include_mtp=False)
    assert r.fixed_bytes == 0
    assert r.per_token_bytes_asymptotic == cfg.num_hidden_layers * (latent + index)
    assert r.by_cache["indexer"] == pytest.approx(cfg.num_hidden_layers * index * (1 << 16))


def test_v32_fp8_on_vllm_is_the_656_byte_row():
    r = kv_cache.kv_bytes(V32, 4096, "vllm", include_mtp=False, kv_cache_dtype="fp8")
    assert r.per_token_bytes_asymptotic == load_config(V32).num_hidden_layers * (656 + 132)


def test_indexer_bytes_refuse_a_model_without_an_indexer():
    from pdcalc.core.errors import ConfigError

    with pytest.raises(ConfigError, match="has no lightning indexer"):
        kv_layout.indexer_entry_bytes("deepseek-v3")


# ------------------------------------------------------------------------------ V3.2 step
def test_v32_decode_attention_is_the_indexer_over_the_context_and_mla_over_the_selected_keys():
    cfg = load_config(V32)
    L = np.array([100, 2048, 10_000, 131_072])
    per_key = 2 * cfg.num_attention_heads * (2 * cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    per_index_key = 2 * cfg.index_n_heads * cfg.index_head_dim
    want = cfg.num_hidden_layers * (per_key * np.minimum(L, cfg.index_topk) + per_index_key * L)
    assert flops_mod.attention_flops_per_token(V32, L, phase="decode") == pytest.approx(want, rel=1e-12)
    # up to index_topk tokens every key is selected: V3's MLA plus the indexer
    v3 = flops_mod.attention_flops_per_token("deepseek-v3", 1000, phase="decode")
    assert flops_mod.attention_flops_per_token(V32, 1000, phase="decode") == pytest.approx(
        v3 + cfg.num_hidden_layers * per_index_key * 1000, rel=1e-12)


@pytest.mark.parametrize("n", [1, 7, 2048, 2049, 5000, 20_000])
def test_v32_prefill_attention_is_the_mean_over_the_prompt(n):
    cfg = load_config(V32)
    K, h = cfg.index_topk, cfg.num_attention_heads
    a = 2 * h * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim + cfg.v_head_dim)   # masked MHA, per key
    b = 2 * h * (2 * cfg.kv_lora_rank + cfg.qk_rope_head_dim)                     # sparse MQA, per key
    i = np.arange(1, n + 1)
    per_query = np.minimum(a * i, b * np.minimum(i, K)) + 2 * cfg.index_n_heads * cfg.index_head_dim * i
    want = cfg.num_hidden_layers * per_query.mean()
    assert flops_mod.attention_flops_per_token(V32, n, phase="prefill") == pytest.approx(want, rel=1e-12)


def test_v32_decode_reads_the_selected_latents_and_every_index_key():
    cfg = load_config(V32)
    n = 50_000
    read = traffic.kv_read_bytes_per_sequence(V32, n, phase="decode")
    assert read == cfg.num_hidden_layers * (cfg.index_topk * 1152 + n * 132)
    assert traffic.kv_stored_bytes_per_sequence(V32, n) == cfg.num_hidden_layers * n * (1152 + 132)


def test_v32_decode_is_cheaper_than_v3_at_long_context_and_costlier_at_short():
    kw = dict(card="h800", tp=1, dp=8, ep=8, concurrency=64, phase="decode", quant="fp8")
    long_ = {m: tput.step(m, context=100_000, **kw).time_s for m in ("deepseek-v3", V32)}
    short = {m: tput.step(m, context=1000, **kw).time_s for m in ("deepseek-v3", V32)}
    assert long_[V32] < long_["deepseek-v3"] and short[V32] > short["deepseek-v3"]


def test_family_table_has_every_preset_with_its_counts_and_caches():
    from pdcalc.book import report
    from pdcalc.book import stories
    from pdcalc.model.config import CONFIG_PRESETS
    from pdcalc.model.inventory import get_inventory

    t = stories.family_table(context=32768)
    assert list(t.index) == list(CONFIG_PRESETS)
    for name in CONFIG_PRESETS:
        c = get_inventory(name).counts()
        assert t.loc[name, "params (B)"] == c.total / 1e9 and t.loc[name, "MTP (B)"] == c.mtp / 1e9
    cfg = load_config(V32)
    layers = cfg.num_hidden_layers + cfg.num_nextn_predict_layers            # the MTP layer caches too
    for engine, (latent, index) in V32_PER_LAYER.items():
        assert t.loc[V32, f"KV {engine} (KB)"] == pytest.approx(layers * (latent + index) / 1e3)


@pytest.mark.parametrize("field,value,message", [
    ("topk_method", "random", "unknown router method 'random' (known: greedy, gready, group_limited_greedy, noaux_tc)"),
    ("topk_method", 3, "must be a string, got 3"),
    ("topk_group", 9, "9 exceeds n_group=8 (allowed: 1..8)"),
    ("n_group", 0, "must be an integer in 1..65,536, got 0"),
])
def test_routing_fields_are_checked(tmp_path, field, value, message):
    data = json.loads(_data_path("models", "deepseek_v3_config.json").read_text())
    data[field] = value
    path = _write(tmp_path, data)
    out = assert_clean(run_cli("params", path, "--json"))
    assert out.code == 2 and f"field '{field}'" in out.err and message in out.err


def test_a_v4_inference_config_is_refused_in_one_line(tmp_path):
    data = json.loads(_data_path("models", "deepseek_v4_flash_inference_config.json").read_text())
    out = assert_clean(run_cli("params", _write(tmp_path, data), "--json"))
    assert out.code == 2 and "DeepSeek-V4 inference config" in out.err



# ------------------------------------------------------------------------------ review follow-ups
@pytest.mark.parametrize("body,field,message", [
    ({"dim": 5120, "n_layers": 60, "n_expert_groups": "8"}, "n_expert_groups", "must be an integer in 1..65,536, got '8'"),
    ({"dim": [8], "n_layers": 60}, "dim", "must be an integer"),
    ({"dim": 5120, "n_layers": 60, "score_func": "relu"}, "score_func", "must be 'softmax' or 'sigmoid', got 'relu'"),
    ({"dim": 7168, "n_layers": 61, "index_n_heads": 64, "q_lora_rank": 0}, "q_lora_rank", "missing"),
])
def test_inference_config_errors_name_the_files_own_field(tmp_path, body, field, message):
    out = assert_clean(run_cli("params", _write(tmp_path, body), "--json"))
    assert out.code == 2 and f"field '{field}'" in out.err and message in out.err


def test_inference_config_fields_left_out_take_the_reference_defaults():
    """ModelArgs fills what a config leaves out: config_236B.json without n_shared_experts and n_dense_layers
    still counts as the reference does (its defaults, 2 and 1, are DeepSeek-V2's values)."""
    from pdcalc.model.config import INFERENCE_DEFAULTS, config_from_dict
    from pdcalc.model.inventory import get_inventory

    data = json.loads(_data_path("models", "deepseek_v2_inference_config_236B.json").read_text())
    assert (data["n_shared_experts"], data["n_dense_layers"]) == (INFERENCE_DEFAULTS["n_shared_experts"],
                                                                  INFERENCE_DEFAULTS["n_dense_layers"])
    full = get_inventory(config_from_dict(data, name="v2", source="v2")).counts().total
    del data["n_shared_experts"], data["n_dense_layers"]
    assert get_inventory(config_from_dict(data, name="v2", source="v2")).counts().total == full


def test_a_v32_config_with_a_zero_query_rank_is_refused():
    data = json.loads(_data_path("models", "deepseek_v32_exp_config.json").read_text())
    data["q_lora_rank"] = 0
    from pdcalc.core.errors import ConfigError
    from pdcalc.model.config import config_from_dict

    with pytest.raises(ConfigError, match="'q_lora_rank': must be an integer in 1"):
        config_from_dict(data, name="x", source="x")


def test_the_v32_indexer_is_whole_on_every_tp_card():
    """Plain Linear layers in the reference Indexer (no TP split): at TP8 every card holds and computes it all."""
    from pdcalc.layout.memory import card_weights
    from pdcalc.model.quant import weight_bytes

    whole = weight_bytes(V32, "fp8", category="indexer")
    assert card_weights(V32, "fp8", ep=8, tp=8).by_category["indexer"] == pytest.approx(whole)
    idx = flops_mod.indexer_flops_per_token(V32, 32_000, phase="decode")
    attn = flops_mod.attention_flops_per_token(V32, 32_000, phase="decode")
    assert flops_mod.attention_flops_per_card(V32, 32_000, phase="decode", tp=8) == pytest.approx((attn - idx) / 8 + idx)
    assert flops_mod.indexer_flops_per_token("deepseek-v3", 32_000) == 0


def test_the_v32_step_reads_the_engines_indexer_keys():
    cfg = load_config(V32)
    n = 40_000
    for engine, (_, index) in V32_PER_LAYER.items():
        read = traffic.kv_read_bytes_per_sequence(V32, n, phase="decode", engine=engine)
        assert read == cfg.num_hidden_layers * (cfg.index_topk * 1152 + n * index)


def test_the_transcribed_v32_preset_is_v3_plus_the_indexer():
    """The V3.2-Exp preset is DeepSeek-V3's config.json with the type and the three index fields of DeepSeek's
    V3.2-Exp inference config, whose every other field equals V3's inference config."""
    v3 = json.loads(_data_path("models", "deepseek_v3_config.json").read_text())
    v32 = json.loads(_data_path("models", "deepseek_v32_exp_config.json").read_text())
    inf3 = json.loads(_data_path("models", "deepseek_v3_inference_config_671B.json").read_text())
    inf32 = json.loads(_data_path("models", "deepseek_v32_exp_inference_config.json").read_text())
    index = {"index_n_heads", "index_head_dim", "index_topk"}
    assert {k: v for k, v in inf32.items() if k not in index | {"scale_fmt"}} == inf3
    stated = index | {"model_type", "architectures"}
    assert {k: v for k, v in v32.items() if k not in stated} == {k: v for k, v in v3.items() if k not in stated}
    assert {k: v32[k] for k in index} == {k: inf32[k] for k in index}
    assert v32["model_type"] == "deepseek_v32"


@pytest.mark.parametrize("card,model,scheme", [("h800", "deepseek-v3", "fp8"), ("h200", "deepseek-v4-flash", "fp8-fp4"),
                                               ("h800", "deepseek-v2-lite", "bf16"),
                                               ("ascend-910b2", "deepseek-v3", "w8a8"),
                                               ("ascend-910b2", "deepseek-v4-flash", "w8a8-msmodelslim"),
                                               ("b200", "deepseek-v4-pro", "fp8-fp4"),
                                               ("ascend-910b2", "deepseek-v4-pro", "w8a8-msmodelslim")])
def test_default_quant_follows_the_card(card, model, scheme):
    out = assert_clean(run_cli("memory", model, "--card", card, "--ep", "8", "--json"))
    assert out.code == 0 and out.json["quant"] == scheme


def test_a_config_not_named_config_json_is_named_by_its_file(tmp_path):
    import shutil

    p = tmp_path / "sub" / "my-model.json"
    p.parent.mkdir()
    shutil.copy(_data_path("models", "deepseek_v2_lite_config.json"), p)
    assert load_config(str(p)).name == "my-model"
    q = tmp_path / "v2-lite" / "config.json"
    q.parent.mkdir()
    shutil.copy(p, q)
    assert load_config(str(q)).name == "v2-lite"


def test_the_v3_articles_expert_part_is_divided_by_the_ep_group():
    from pdcalc.audit.registry import printed_value
    from pdcalc.layout.memory import card_weights

    w = card_weights("deepseek-v3-article", "article-1byte", ep=8)
    experts = float(str(printed_value("v3-2.3.1-expert-params")).rstrip("B")) * 1e9
    assert w.by_category["all_experts"] == pytest.approx(experts * 32 / 256, rel=1e-12)


def test_an_article_preset_where_a_config_is_needed_is_one_line():
    out = assert_clean(run_cli("plan", "--model", "deepseek-v3-article", "--card", "ascend-910b2", "--cards", "16",
                               "--prompt", "1000", "--output", "100", "--concurrency", "8", "--json"))
    assert out.code == 2 and "an article's architecture, as printed, without a config.json" in out.err


def test_the_v32_published_step_takes_flashmlas_sparse_kernel():
    """V3.2's attention core is timed with FlashMLA's published sparse decoding figure at its own top-k."""
    from pdcalc.perf import costs

    att = kernels.attention_ceilings("h800", "bf16", "sparse", topk=load_config(V32).index_topk)
    (point,) = [p for p in costs.points("mla") if p.attention == "sparse" and p.card == "h800"
                and p.topk == load_config(V32).index_topk]
    from pdcalc.hardware.cards import get_card

    assert att.compute_share == pytest.approx(point.achieved_flop_per_s / get_card("h800").flops("bf16"))
    r = tput.step(V32, "h800", tp=1, dp=8, ep=8, context=32_000, concurrency=256, quant="fp8", phase="decode",
                  costs="published")
    assert point.table_id in {t for s in r.cost_sources for t in s.tables}



def test_glued_markdown_holds_no_myst_syntax():
    """Glued markdown is rendered as CommonMark: a MyST role or directive in it would print as raw text."""
    import re

    import nbformat

    from pdcalc.model.config import _data_path

    book = _data_path().parent.parent / "book"
    found = []
    for path in sorted(book.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                for key in ("application/papermill.record/text/markdown", "text/markdown"):
                    if re.search(r"\{(term|doc|ref|py:\w+|eq)\}`|```\{", data.get(key, "")):
                        found.append((path.name, data[key][:80]))
    assert not found, found


def test_memory_adds_the_load_buffers_when_asked():
    from pdcalc.reality import weights as V

    out = assert_clean(run_cli("memory", "deepseek-v4-flash", "--card", "ascend-910b2", "--ep", "8",
                               "--max-num-batched-tokens", "4096", "--json"))
    d = out.json
    assert d["loaded_bytes"] == pytest.approx(d["weights_bytes"] + sum(d["load_buffers_bytes"].values()))
    chosen = V.weight_candidates("vllm-ascend-13439-v4flash-weights-per-card").query("chosen").iloc[0]
    assert "4,096" in chosen["candidate"] and d["loaded_bytes"] == pytest.approx(chosen["predicted_bytes"])
    plain = assert_clean(run_cli("memory", "deepseek-v4-flash", "--card", "ascend-910b2", "--ep", "8", "--json")).json
    assert plain["load_buffers_bytes"] == {} and plain["loaded_bytes"] == plain["weights_bytes"]
    assert plain["left_for_kv_bytes"] - d["left_for_kv_bytes"] == pytest.approx(sum(d["load_buffers_bytes"].values()))
