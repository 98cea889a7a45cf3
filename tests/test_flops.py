import numpy as np
import pytest

from pdcalc.core.errors import ConfigError, LayoutError
from pdcalc.model.config import load_config
from pdcalc.model.inventory import get_inventory
from pdcalc.perf.flops import hybrid_attention_flops, prefill_flops, sum_capped_floor

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


@pytest.mark.parametrize("step,cap", [(1, np.inf), (1, 128), (4, np.inf), (4, 512), (4, 3), (128, np.inf), (7, 2)])
def test_sum_capped_floor_matches_a_plain_loop(step, cap):
    n = np.arange(0, 3000)
    loop = np.concatenate([[0], np.cumsum([min(i // step, cap) for i in range(1, 3000)])])
    assert np.array_equal(sum_capped_floor(n, step, cap), loop)


def test_decode_query_is_the_increment_of_the_prefill_sum():
    n = np.array([1, 2, 4, 127, 128, 129, 2048, 2049, 5000])
    pre_a, pre_i = hybrid_attention_flops(V4, n, phase="prefill")
    prev_a, prev_i = hybrid_attention_flops(V4, n - 1, phase="prefill")
    dec_a, dec_i = hybrid_attention_flops(V4, n, phase="decode")
    assert np.array_equal(pre_a - prev_a, dec_a)
    assert np.array_equal(pre_i - prev_i, dec_i)


def test_long_prompt_is_closed_form():
    # prefill FLOPs of a prompt are a sum in closed form, not a loop or an array over its tokens: the
    # memory allocated for a 1M-token prompt stays that of a short one (speed: `make bench`)
    import tracemalloc

    prefill_flops(V4, 10)
    tracemalloc.start()
    f = prefill_flops(V4, 1_048_576)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_048_576  # bytes: far below one byte per prompt token
    assert f["attention"] > 0
    assert f["attention"] > 1000 * prefill_flops(V4, 1024)["attention"]


def test_other_ratios_attend_to_all_compressed_entries():
    # a ratio without an indexer (anything but 4) attends to every compressed entry, as ratio 128 does
    import dataclasses
    cfg = load_config(V4)
    c16 = dataclasses.replace(cfg, compress_ratios=tuple(16 if r == 128 else r for r in cfg.compress_ratios))
    a, _ = hybrid_attention_flops(c16, 1000, phase="decode")
    per_key = 4 * cfg.num_attention_heads * cfg.head_dim
    assert a == per_key * (43 * 128 + 21 * min(250, 512) + 20 * (1000 // 16))


def test_hybrid_attention_errors():
    with pytest.raises(ConfigError, match="deepseek_v4"):
        hybrid_attention_flops("deepseek-v3", 100)
    with pytest.raises(LayoutError, match="phase"):
        hybrid_attention_flops(V4, 100, phase="train")


def test_prefill_compute_seconds_splits_matmul_and_attention_peaks():
    from pdcalc.hardware.cards import get_card
    from pdcalc.perf.flops import prefill_compute_seconds

    f, dev = prefill_flops(V4, 8000), get_card("ascend-910b2")
    t = prefill_compute_seconds(V4, "ascend-910b2", 8000, mfu=0.3)
    expected = f["matmul"] / (0.3 * dev.flops("int8")) + (f["attention"] + f["indexer"]) / (0.3 * dev.flops("bf16"))
    assert t == pytest.approx(expected, rel=1e-12)
    with pytest.raises(LayoutError):
        prefill_compute_seconds(V4, "ascend-910b2", 8000, mfu=0)
