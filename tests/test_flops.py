import numpy as np
import pytest

from pdcalc.errors import ConfigError, LayoutError
from pdcalc.flops import prefill_flops
from pdcalc.inventory import get_inventory
from pdcalc.model import load_config

V4 = "deepseek-v4-flash"


def _brute(cfg, n):
    """Attention and indexer FLOPs by a plain loop over query positions."""
    attn = index = 0.0
    per_key = 4 * cfg.num_attention_heads * cfg.head_dim
    for r in cfg.compress_ratios[:cfg.num_hidden_layers]:
        for i in range(1, n + 1):
            keys = min(i, cfg.sliding_window)
            if r == 128:
                keys += i // 128
            elif r == 4:
                keys += min(i // 4, cfg.index_topk)
                index += 2 * cfg.index_n_heads * cfg.index_head_dim * (i // 4)
            attn += per_key * keys
    return attn, index


@pytest.mark.parametrize("n", [1, 100, 129, 3000])
def test_attention_matches_a_plain_loop(n):
    cfg = load_config(V4)
    f = prefill_flops(V4, n)
    attn, index = _brute(cfg, n)
    assert f["attention"] == pytest.approx(attn, rel=1e-12)
    assert f["indexer"] == pytest.approx(index, rel=1e-12)
    assert f["matmul"] == 2 * get_inventory(V4).activated() * n
    assert f["total"] == pytest.approx(f["matmul"] + attn + index, rel=1e-12)


def test_vectorized_equals_scalar():
    arr = prefill_flops(V4, np.array([10, 5000]))
    for i, n in enumerate((10, 5000)):
        assert arr["total"][i] == pytest.approx(prefill_flops(V4, n)["total"], rel=1e-12)


def test_errors():
    with pytest.raises(ConfigError, match="model_type"):
        prefill_flops("deepseek-v3", 100)
    with pytest.raises(LayoutError):
        prefill_flops(V4, 0)
    with pytest.raises(LayoutError):
        prefill_flops(V4, 1.5)
