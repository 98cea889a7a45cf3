import math

import pytest

from pdcalc.core.errors import UnknownNameError
from pdcalc.model.inventory import get_inventory
from pdcalc.model.quant import SCHEMES, bytes_by_category, get_scheme, weight_bytes


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v4-flash", "deepseek-v4-pro"])
def test_one_byte_scheme_equals_parameter_count(model):
    assert weight_bytes(model, "article-1byte") == get_inventory(model).counts().total


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v4-flash", "deepseek-v4-pro"])
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_categories_add_up(model, scheme):
    assert bytes_by_category(model, scheme).sum() == pytest.approx(weight_bytes(model, scheme), rel=1e-12)


def test_fp4_experts_take_half_a_byte_plus_one_scale_per_32():
    inv = get_inventory("deepseek-v4-flash")
    n = inv.params(category="routed_experts")
    b = weight_bytes("deepseek-v4-flash", "fp8-fp4", category="routed_experts")
    assert b == n * 0.5 + n / 32 * 1  # e8m0 scale: 1 byte per 32 weights (all expert dims divide by 32)


def test_fp8_block_scales_round_up():
    sch = get_scheme("fp8")
    inv = get_inventory("deepseek-v3")
    wkv_a = next(t for t in inv.tensors if t.name == "layers.0.attn.wkv_a.weight")  # [576, 7168]
    assert sch.scale_count(wkv_a) == math.ceil(576 / 128) * math.ceil(7168 / 128)


def test_w8a8_keeps_embedding_in_bf16():
    sch = get_scheme("w8a8")
    inv = get_inventory("deepseek-v4-flash")
    emb = next(t for t in inv.tensors if t.category == "embedding")
    assert sch.dtype_for(emb) == "bf16"
    expert = next(t for t in inv.tensors if t.category == "routed_experts")
    assert sch.dtype_for(expert) == "int8"


def test_unknown_scheme():
    with pytest.raises(UnknownNameError, match="w8a8"):
        get_scheme("int3")


# ---------------------------------------------------------------------------------------------
# the Ascend V4-Flash W8A8 checkpoint as loaded (w8a8-msmodelslim)
# ---------------------------------------------------------------------------------------------
#: Entries of the published DeepSeek-V4-Flash-w8a8-mtp quant_model_description.json, as a static read of it
#: reports them ("| `W8A8_DYNAMIC` | 102 232 |", "| `FLOAT` | 945 |"; search-index file 56429518713, a
#: notes page on the checkpoint's weight structure). msModelSlim writes three W8A8_DYNAMIC entries per
#: quantized linear layer (weight, weight_scale, weight_offset) and one model_quant_type entry, one FLOAT
#: entry per other tensor, and the MTP block's own emb/head copies (mtp_quant_module.py L140-141).
PUBLISHED_DESCRIPTION = {"W8A8_DYNAMIC": 102_232, "FLOAT": 945}


def test_msmodelslim_scheme_reproduces_the_published_description_counts():
    sch, inv = get_scheme("w8a8-msmodelslim"), get_inventory("deepseek-v4-flash")
    quantized = sum(t.count for t in inv.tensors if sch.dtype_for(t) == "int8")
    floats = sum(t.count for t in inv.tensors if sch.dtype_for(t) != "int8")
    assert 3 * quantized + 1 == PUBLISHED_DESCRIPTION["W8A8_DYNAMIC"]
    assert floats + 2 == PUBLISHED_DESCRIPTION["FLOAT"]          # + the MTP draft's own embedding and head
    assert sch.mtp_vocab_copies


#: Tensors of DeepSeek-V4-Flash and their dtype under msModelSlim's V4-Flash W8A8 recipe.
V4_FLASH_W8A8_RECIPE = [
    ("layers.2.attn.wq_a.weight", "int8"), ("layers.2.attn.wq_b.weight", "int8"), ("layers.2.attn.wkv.weight", "int8"),
    ("layers.2.attn.indexer.wq_b.weight", "int8"), ("layers.2.ffn.shared_experts.w2.weight", "int8"),
    ("layers.2.ffn.experts.{expert}.w1.weight", "int8"), ("mtp.0.attn.wq_b.weight", "int8"),
    ("layers.2.attn.wo_a.weight", "bf16"), ("layers.2.attn.wo_b.weight", "bf16"),       # recipe: exclude *wo_a, *wo_b
    ("layers.2.attn.compressor.wkv.weight", "bf16"), ("layers.2.attn.indexer.weights_proj.weight", "bf16"),
    ("layers.2.attn.indexer.compressor.wgate.weight", "bf16"), ("layers.2.ffn.gate.weight", "bf16"),
    ("mtp.0.e_proj.weight", "bf16"), ("embed.weight", "bf16"), ("layers.2.hc_attn_fn", "fp32"),
]
#: Tensors of DeepSeek-V4-Pro and their dtype under msModelSlim's V4-Pro W4A8 recipe.
V4_PRO_W4A8_RECIPE = [
    ("layers.2.ffn.experts.{expert}.w1.weight", "int4"), ("layers.2.ffn.experts.{expert}.w2.weight", "int4"),
    ("mtp.0.ffn.experts.{expert}.w3.weight", "int4"),                   # recipe L84-90: *ffn* W4A8
    ("layers.2.ffn.shared_experts.w1.weight", "int8"),                  # recipe L91-94: shared experts W8A8
    ("layers.2.attn.wq_a.weight", "int8"), ("layers.2.attn.indexer.wq_b.weight", "int8"),
    ("layers.2.attn.wo_a.weight", "bf16"), ("layers.2.attn.wo_b.weight", "bf16"),       # recipe L76-83 excludes
    ("layers.2.attn.compressor.wkv.weight", "bf16"), ("layers.2.ffn.gate.weight", "bf16"),
    ("embed.weight", "bf16"), ("layers.2.hc_attn_fn", "fp32"),
]


@pytest.mark.parametrize("scheme,model,name,dtype",
                         [("w8a8-msmodelslim", "deepseek-v4-flash", n, d) for n, d in V4_FLASH_W8A8_RECIPE]
                         + [("w4a8-msmodelslim", "deepseek-v4-pro", n, d) for n, d in V4_PRO_W4A8_RECIPE])
def test_msmodelslim_schemes_follow_their_recipes(scheme, model, name, dtype):
    sch, inv = get_scheme(scheme), get_inventory(model)
    t = next(t for t in inv.tensors if t.name == name)
    assert sch.dtype_for(t) == dtype


def test_msmodelslim_scheme_bytes_as_vllm_ascend_holds_them():
    sch, inv = get_scheme("w8a8-msmodelslim"), get_inventory("deepseek-v4-flash")
    by = {t.name: t for t in inv.tensors}
    wq_a = by["layers.2.attn.wq_a.weight"]                     # int8 + BF16 scale + BF16 offset + fp32 scale copy
    assert sch.tensor_bytes(wq_a) == wq_a.numel + wq_a.shape[0] * (2 + 2 + 4)
    w1, w2 = by["layers.2.ffn.experts.{expert}.w1.weight"], by["layers.2.ffn.experts.{expert}.w2.weight"]
    assert sch.tensor_bytes(w1) == w1.count * (w1.numel + w1.shape[0] * 8)   # w13: with the fp32 copy
    assert sch.tensor_bytes(w2) == w2.count * (w2.numel + w2.shape[0] * 4)   # w2: scale and offset only
    gate = by["layers.2.ffn.gate.weight"]                      # BF16 plus an fp32 copy (precast_fp32_weight)
    assert sch.tensor_bytes(gate) == gate.numel * (2 + 4)


def test_card_weights_add_the_mtp_drafts_own_embedding_and_head_only_when_loaded():
    from pdcalc.layout.memory import card_weights

    cfg = get_inventory("deepseek-v4-flash").config
    vocab = cfg.vocab_size * cfg.hidden_size * 2
    on = card_weights("deepseek-v4-flash", "w8a8-msmodelslim", ep=8, mtp=True)
    off = card_weights("deepseek-v4-flash", "w8a8-msmodelslim", ep=8, mtp=False)
    generic = card_weights("deepseek-v4-flash", "w8a8", ep=8, mtp=True)
    mtp_own = weight_bytes("deepseek-v4-flash", "w8a8-msmodelslim", part="mtp", category=None)
    routed_mtp = weight_bytes("deepseek-v4-flash", "w8a8-msmodelslim", part="mtp", category="routed_experts")
    assert on.total_bytes - off.total_bytes == pytest.approx(mtp_own - routed_mtp * (1 - 32 / 256) + 2 * vocab)
    assert on.by_category["embedding"] == 2 * vocab and on.by_category["lm_head"] == 2 * vocab
    assert generic.by_category["embedding"] == vocab


def test_default_scheme_is_the_sourced_one_for_v4_only():
    from pdcalc.model.quant import V4_ASCEND_W8A8, default_scheme

    assert default_scheme("deepseek-v4-flash") == V4_ASCEND_W8A8
    assert default_scheme("deepseek-v3") == "w8a8" and default_scheme("deepseek-v4-flash-article") == "w8a8"


# ---------------------------------------------------------------------------------------------
# the Ascend V4-Pro W4A8 checkpoint as loaded (w4a8-msmodelslim)
# ---------------------------------------------------------------------------------------------
def test_w4a8_scheme_bytes_as_vllm_ascend_holds_them():
    w4, w8 = get_scheme("w4a8-msmodelslim"), get_scheme("w8a8-msmodelslim")
    inv = get_inventory("deepseek-v4-pro")
    by = {t.name: t for t in inv.tensors}
    for name in ("layers.2.ffn.experts.{expert}.w1.weight", "layers.2.ffn.experts.{expert}.w2.weight"):
        t = by[name]             # two int4 per byte; per row an int64 scale, an fp32 offset and an fp32 scale bias
        assert w4.tensor_bytes(t) == t.count * (t.numel / 2 + t.shape[0] * (8 + 4 + 4))
    # everything but the routed experts is stored as the W8A8 recipe stores it
    others = [t for t in inv.tensors if t.category != "routed_experts"]
    assert sum(w4.tensor_bytes(t) for t in others) == sum(w8.tensor_bytes(t) for t in others)
    assert w4.mtp_vocab_copies
    routed = inv.params(category="routed_experts")
    assert weight_bytes("deepseek-v4-pro", "w4a8-msmodelslim", category="routed_experts") < 0.51 * routed


def test_w4a8_scheme_is_w8a8_with_int4_experts():
    w4, w8 = get_scheme("w4a8"), get_scheme("w8a8")
    inv = get_inventory("deepseek-v3")
    for t in inv.tensors:
        if t.category == "routed_experts":
            assert w4.dtype_for(t) == "int4"
            assert w4.tensor_bytes(t) == t.count * (t.numel / 2 + t.shape[0] * (8 + 4 + 4))
        else:                    # MLA, shared experts and the dense layers' MLP stay W8A8
            assert w4.tensor_bytes(t) == w8.tensor_bytes(t), t.name


def test_a_v4_recipe_asked_of_another_model_falls_back_to_the_generic_scheme():
    from pdcalc.model.quant import scheme_for

    assert scheme_for("deepseek-v3", "w4a8-msmodelslim") == "w4a8"
    assert scheme_for("deepseek-v3", "w8a8-msmodelslim") == "w8a8"
    assert scheme_for("deepseek-v4-pro", "w4a8-msmodelslim") == "w4a8-msmodelslim"


def test_load_buffers_follow_the_loader_and_grow_with_the_batched_tokens():
    from pdcalc.layout.memory import load_buffers

    cfg = get_inventory("deepseek-v4-flash").config
    a = load_buffers("deepseek-v4-flash", max_num_batched_tokens=4096)
    b = load_buffers("deepseek-v4-flash", max_num_batched_tokens=8192)
    positions = cfg.extra["rope_scaling"]["original_max_position_embeddings"] * cfg.extra["rope_scaling"]["factor"]
    assert a["rope cache"] == b["rope cache"] == 2 * 2 * positions * cfg.qk_rope_head_dim * 4   # two RoPE configs
    assert b["MTP hidden buffer"] == 8192 * cfg.hc_mult * cfg.hidden_size * 2
    assert b["top-k indices"] == 2 * a["top-k indices"] == 8192 * cfg.index_topk * 4
    assert load_buffers("deepseek-v3", max_num_batched_tokens=4096) == {}
    assert load_buffers("deepseek-v4-flash", "vllm", max_num_batched_tokens=4096) == {}
