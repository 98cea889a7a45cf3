import math

import pytest

from pdcalc.errors import UnknownNameError
from pdcalc.inventory import get_inventory
from pdcalc.quant import SCHEMES, bytes_by_category, get_scheme, weight_bytes


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v4-flash"])
def test_one_byte_scheme_equals_parameter_count(model):
    assert weight_bytes(model, "article-1byte") == get_inventory(model).counts().total


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v4-flash"])
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
